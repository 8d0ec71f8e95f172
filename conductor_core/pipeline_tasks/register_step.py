"""Deprecated: moved to :mod:`conductor_core.pipeline_steps.register_step`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.pipeline_steps.register_step import *  # noqa: F403 (the moved module's public names, whatever they become)

warn_moved(__name__)
