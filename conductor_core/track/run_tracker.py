"""A run tracker object over :mod:`conductor_core.track` with the method names of training's
``Tracker`` protocol (``start``/``log_params``/``log_metrics``/``log_table``/``log_artifact``/
``log_model``/``finish``); training's ``MlflowTracker`` is a thin subclass of it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from conductor_core.track import mlflow_run
from conductor_core.track.lineage import log_dataset_input
from conductor_core.track.registry import log_and_register_model

_LOG = logging.getLogger(__name__)


class RunTracker:
    """One MLflow run, opened by :meth:`start` and ended by :meth:`finish`.

    Which run :meth:`start` opens: the one named by ``MLFLOW_RUN_ID`` when set; else
    ``resume_run_id`` when given and still present in the store (re-opened, so a resumed job
    keeps logging into the run it started); else a new run of ``experiment``.

    Args:
        experiment: experiment of a new run (ignored when an existing run is reused).
        run_name: name of a new run.
        tags: tags set on a new or injected run.
        uri: tracking URI (default :func:`~conductor_core.track.mlflow_run.tracking_uri`).
        artifact_location: artifact root of the experiment if this tracker creates it (default:
            ``mlartifacts/`` next to a SQLite store, the server's root for a tracking server).
        resume_run_id: a run to re-open when no ``MLFLOW_RUN_ID`` is set.
        system_metrics: sample the machine's ``system/*`` metrics (CPU, memory, disk, network,
            GPU with ``pynvml``) into the run while it is open; None leaves it to MLflow's
            ``MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING``.
    """

    def __init__(
        self,
        experiment: str = "conductor-train",
        run_name: str | None = None,
        tags: Mapping[str, Any] | None = None,
        uri: str | None = None,
        *,
        artifact_location: str | None = None,
        resume_run_id: str | None = None,
        system_metrics: bool | None = None,
    ) -> None:
        self.experiment = experiment
        self.run_name = run_name
        self.tags = dict(tags or {})
        self.uri = uri
        self.artifact_location = artifact_location
        self.resume_run_id = resume_run_id
        self.system_metrics = system_metrics
        self.run_id: str | None = None
        self.resumed = False
        self._ctx: AbstractContextManager[Any] | None = None

    def _reopenable(self, run_id: str) -> bool:
        """True when ``run_id`` exists in the store and is not deleted."""
        from mlflow.exceptions import MlflowException

        try:
            client = mlflow_run.mlflow_module().MlflowClient(
                tracking_uri=self.uri or mlflow_run.tracking_uri()
            )
            run = client.get_run(run_id)
        except MlflowException as exc:
            _LOG.warning("cannot resume MLflow run %s (%s); starting a new run", run_id, exc)
            return False
        if run.info.lifecycle_stage == "deleted":
            _LOG.warning("MLflow run %s was deleted; starting a new run", run_id)
            return False
        return True

    def start(self) -> None:
        """Open the run (see the class docstring for which one)."""
        if self._ctx is not None:
            return
        injected = os.environ.get("MLFLOW_RUN_ID")
        if not injected and self.resume_run_id and self._reopenable(self.resume_run_id):
            ctx: AbstractContextManager[Any] = mlflow_run.reopen_run(
                self.resume_run_id, uri=self.uri, log_system_metrics=self.system_metrics
            )
            self.resumed = True
        else:
            if not injected and self.artifact_location:
                with mlflow_run.tracking_at(self.uri):
                    mlflow_run.ensure_experiment(
                        self.experiment, artifact_location=self.artifact_location
                    )
            ctx = mlflow_run.start_run(
                self.experiment,
                self.run_name,
                self.tags,
                uri=self.uri,
                log_system_metrics=self.system_metrics,
            )
            self.resumed = False
        run = ctx.__enter__()
        self._ctx = ctx
        self.run_id = run.info.run_id

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params flattened and scrubbed (see :func:`~mlflow_run.flatten_params`)."""
        mlflow_run.log_params_flat(dict(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log finite scalar metrics at ``step``."""
        mlflow_run.log_metrics(metrics, step=step)

    def log_table(self, rows: Sequence[Mapping[str, Any]], name: str) -> None:
        """Log rows as an MLflow table ``name``."""
        mlflow_run.log_table(rows, name)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Log a local file or folder."""
        mlflow_run.log_artifacts(path, artifact_path)

    def log_dataset(
        self,
        source: str,
        digest: str,
        *,
        name: str,
        context: str = "training",
        tags: Mapping[str, Any] | None = None,
    ) -> None:
        """Log the dataset at ``source`` with its content ``digest`` as an MLflow dataset input
        of the run (see :func:`~conductor_core.track.lineage.log_dataset_input`)."""
        log_dataset_input(source, digest, name=name, context=context, tags=tags)

    def log_model(
        self, model_dir: str | Path, *, registered_name: str | None, alias: str
    ) -> str | None:
        """Log the saved model folder as it is (weights, tokenizer and the prompt spec the model
        was trained with); register it with ``alias`` when named.

        Returns ``models:/name@alias`` when registered, else None (the folder is then logged as
        the run artifact ``model``).
        """
        if registered_name:
            return log_and_register_model(
                model_dir, registered_name, alias, run_id=self.run_id, uri=self.uri
            )
        mlflow_run.log_artifacts(model_dir, "model")
        return None

    def finish(self, status: str = "FINISHED") -> None:
        """End the run ``FINISHED``; any other status ends it ``FAILED``."""
        if self._ctx is None:
            return
        ctx, self._ctx = self._ctx, None
        if status == "FINISHED":
            ctx.__exit__(None, None, None)
        else:
            error = RuntimeError(f"run ended {status}")
            ctx.__exit__(RuntimeError, error, None)
