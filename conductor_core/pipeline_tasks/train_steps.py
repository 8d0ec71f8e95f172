"""Deprecated: moved to :mod:`conductor_core.pipeline_steps.train_steps`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.pipeline_steps.train_steps import train_config, train_step

__all__ = ["train_config", "train_step"]

warn_moved(__name__)
