"""Deprecated: moved to :mod:`conductor_core.pipeline_steps.register_step`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.pipeline_steps.register_step import register_step, version_lineage

__all__ = ["register_step", "version_lineage"]

warn_moved(__name__)
