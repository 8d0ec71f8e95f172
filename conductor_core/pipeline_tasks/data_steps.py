"""Deprecated: moved to :mod:`conductor_core.pipeline_steps.data_steps`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.pipeline_steps.data_steps import curate_step, gate_step, validate_step

__all__ = ["curate_step", "gate_step", "validate_step"]

warn_moved(__name__)
