"""Deprecated: moved to :mod:`conductor_core.pipeline_steps.context`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.pipeline_steps.context import (
    ARTIFACT_ROOT_ENV,
    DEFAULT_ARTIFACT_ROOT,
    KFP_FINAL_STATES,
    TRAINING_PIPELINE,
    WORKDIR_ENV,
    Log,
    artifact_root,
    close_parent_run,
    local_workdir,
    log_stage,
    mlflow_status,
    parent_run,
    pool_path,
    print_line,
    run_folder,
)

__all__ = [
    "ARTIFACT_ROOT_ENV",
    "DEFAULT_ARTIFACT_ROOT",
    "KFP_FINAL_STATES",
    "TRAINING_PIPELINE",
    "WORKDIR_ENV",
    "Log",
    "artifact_root",
    "close_parent_run",
    "local_workdir",
    "log_stage",
    "mlflow_status",
    "parent_run",
    "pool_path",
    "print_line",
    "run_folder",
]

warn_moved(__name__)
