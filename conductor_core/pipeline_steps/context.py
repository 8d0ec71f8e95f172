"""What every pipeline step shares: where a run's files go and its MLflow runs.

Every step of one pipeline run writes under ``<artifact root>/<run id>/<step>``
(:func:`run_folder`); the root is a local folder or an ``s3://`` prefix. Training writes its model
and checkpoints there, so a retried task finds its checkpoints and resumes, and no weights live
only on a pod's disk. Each pipeline run is one parent MLflow run, found by every task through the
KFP run id (:func:`parent_run`), with one nested run per step (:func:`log_stage`); the pipeline's
exit handler ends it with the run's final state (:func:`close_parent_run`).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError
from conductor_core.track.mlflow_run import log_artifacts, log_metrics, store_missing
from conductor_core.track.mlflow_run import tracking_uri as default_tracking_uri
from conductor_core.track.pipeline_runs import (
    PIPELINE_EXPERIMENT,
    close_pipeline_run,
    pipeline_run,
    stage_run,
)
from conductor_core.track.storage import is_s3, join
from conductor_core.workers.bundled import bundled_train_pool_path

TRAINING_PIPELINE = "conductor-training"
ARTIFACT_ROOT_ENV = "CONDUCTOR_ARTIFACT_ROOT"
WORKDIR_ENV = "CONDUCTOR_WORKDIR"
DEFAULT_ARTIFACT_ROOT = "runs/pipelines"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")

Log = Callable[[str], None]


def print_line(msg: str) -> None:
    """Print one line now (a task's log is read as it is written)."""
    print(msg, flush=True)


def artifact_root(root: str = "") -> str:
    """The artifact root: ``root``, else ``$CONDUCTOR_ARTIFACT_ROOT``, else ``runs/pipelines``
    (made absolute, so that every task of a local run agrees)."""
    chosen = root or os.environ.get(ARTIFACT_ROOT_ENV) or DEFAULT_ARTIFACT_ROOT
    return chosen if is_s3(chosen) else str(Path(chosen).expanduser().resolve())


def run_folder(root: str, run_id: str, *parts: str) -> str:
    """``<root>/<run id>/<parts...>`` (a local path or an ``s3://`` URI)."""
    if not run_id:
        raise ConfigError("run_id: empty; the pipeline passes its run id to every step")
    return join(artifact_root(root), _SAFE.sub("-", run_id), *parts)


def local_workdir(run_id: str, *parts: str) -> Path:
    """A local working folder for a step whose results go to S3 (a pod's workspace volume)."""
    base = Path(os.environ.get(WORKDIR_ENV) or tempfile.gettempdir()) / "conductor-work"
    folder = base.joinpath(_SAFE.sub("-", run_id), *parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def parent_run(run_id: str, pipeline: str, tracking_uri: str | None = None) -> str | None:
    """The pipeline run's parent MLflow run (created by the first step that asks; every later
    step finds it by the KFP run id). None without a run id (a step called on its own)."""
    if not run_id:
        return None

    return pipeline_run(pipeline, run_id, experiment=PIPELINE_EXPERIMENT, tracking_uri=tracking_uri)


KFP_FINAL_STATES = {
    # kfp.local, and the v2 API's task states (PipelineTaskDetail.TaskState)
    "SUCCEEDED": "FINISHED",
    "SKIPPED": "FINISHED",
    "CACHED": "FINISHED",
    # ML Metadata's execution states, which the open-source backend's driver hands the exit
    # handler (Execution.LastKnownState: COMPLETE on success; newer drivers map SUCCEEDED,
    # SKIPPED and CACHED to COMPLETE too)
    "COMPLETE": "FINISHED",
    "CANCELED": "KILLED",
    "CANCELLED": "KILLED",
    "CANCELING": "KILLED",
}
"""MLflow's status for KFP's final state of a pipeline run (``PipelineTaskFinalStatus.state``),
every spelling a backend or the local runner passes; every other state (``FAILED``, ``UNKNOWN``,
a task still ``RUNNING``...) ends the runs ``FAILED``."""


def mlflow_status(state: str) -> str:
    """MLflow's status for a KFP final state (:data:`KFP_FINAL_STATES`; any other: FAILED)."""
    return KFP_FINAL_STATES.get(state.strip().upper(), "FAILED")


def close_parent_run(
    run_id: str,
    pipeline: str,
    state: str,
    *,
    tracking_uri: str | None = None,
    log: Log = print_line,
) -> str | None:
    """End the pipeline run's parent MLflow run with the pipeline's final state (the exit
    handler's task, whatever happened before it): success (``SUCCEEDED`` from the local runner,
    ``COMPLETE`` from the backend: :data:`KFP_FINAL_STATES`) ends it ``FINISHED``, a cancel
    ``KILLED``, anything else ``FAILED``; its runs still RUNNING (a task whose pod
    was killed) end the same way. Returns the MLflow status, or None when no task of the run
    opened a parent run (nothing is created: a run stopped by its parameter check)."""
    status = mlflow_status(state)
    uri = tracking_uri or default_tracking_uri()
    closed = None if store_missing(uri) else close_pipeline_run(run_id, status, tracking_uri=uri)
    if closed is None:
        log(f"{pipeline} {run_id}: {state}; no MLflow run to close (no task logged one)")
        return None
    parent, nested = closed
    also = f", and {nested} of its runs left RUNNING" if nested else ""
    log(f"{pipeline} {run_id}: {state}; MLflow run {parent} ended {status}{also}")
    return status


def log_stage(
    run_id: str,
    pipeline: str,
    stage: str,
    *,
    params: dict[str, Any] | None = None,
    metrics: dict[str, float] | None = None,
    artifacts: Sequence[str | Path] = (),
    tracking_uri: str | None = None,
) -> None:
    """Log a step's params, metrics and files into its nested run under the pipeline run."""
    parent = parent_run(run_id, pipeline, tracking_uri)
    if parent is None:
        return

    with stage_run(parent, stage, params=params, tracking_uri=tracking_uri):
        if metrics:
            log_metrics(metrics)
        for path in artifacts:
            log_artifacts(path)


def pool_path(pool: str | None) -> str:
    """The pool YAML a pipeline uses: ``bundled`` (or empty) is the simulated pool that goes with
    the bundled training problems, for training and evaluation alike."""
    if pool in (None, "", "bundled"):
        return str(bundled_train_pool_path())
    return pool
