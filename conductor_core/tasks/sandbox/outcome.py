"""Deprecated: moved to :mod:`conductor_core.tasks.sandbox.run_outcome`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.tasks.sandbox.run_outcome import (
    RunOutcome,
    classify,
    last_line,
    scrubbed_env,
    signal_of,
)

__all__ = ["RunOutcome", "classify", "last_line", "scrubbed_env", "signal_of"]

warn_moved(__name__)
