"""Deprecated: moved to :mod:`conductor_core.pipeline_steps.params`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.pipeline_steps.params import (
    LAUNCHERS,
    METRICS,
    Placement,
    check_artifact_root,
    check_profile_pool,
    check_training_params,
    grades_code,
    profile_placement,
)

__all__ = [
    "LAUNCHERS",
    "METRICS",
    "Placement",
    "check_artifact_root",
    "check_profile_pool",
    "check_training_params",
    "grades_code",
    "profile_placement",
]

warn_moved(__name__)
