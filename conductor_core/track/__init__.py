"""Tracking and storage: MLflow runs (reusing an injected ``MLFLOW_RUN_ID``), params with secrets
scrubbed, tables and figures, solve traces as MLflow traces, model registration with aliases, and
folder storage on local disks or S3. ``mlflow`` and ``boto3`` are imported only when used.
"""

from __future__ import annotations

from conductor_core.track.mlflow_run import (
    flatten_params,
    log_artifacts,
    log_figure,
    log_metrics,
    log_params_flat,
    log_table,
    reopen_run,
    start_run,
    tracking_uri,
)
from conductor_core.track.registry import load_model_dir, log_and_register_model
from conductor_core.track.run_tracker import RunTracker
from conductor_core.track.storage import COMPLETE_MARKER, Storage
from conductor_core.track.traces import log_solve_trace, sample

__all__ = [
    "COMPLETE_MARKER",
    "RunTracker",
    "Storage",
    "flatten_params",
    "load_model_dir",
    "log_and_register_model",
    "log_artifacts",
    "log_figure",
    "log_metrics",
    "log_params_flat",
    "log_solve_trace",
    "log_table",
    "reopen_run",
    "sample",
    "start_run",
    "tracking_uri",
]
