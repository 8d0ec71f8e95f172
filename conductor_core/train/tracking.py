"""Experiment tracking behind a small interface: a no-op tracker and a plain-MLflow one.

The MLflow tracker logs the flattened stage config and the pool (which never holds secrets: only
the names of key variables) as params, per-step metrics, a table of sample plans, artifacts and,
at the end, the model (registered with an alias). It reuses a run given by ``MLFLOW_RUN_ID``
instead of starting a new one, and a crashed run is ended as ``FAILED``.

Local default store: ``sqlite:///<output_dir>/mlflow.db`` (MLflow 3.13+ refuses a plain
``./mlruns`` file store) with artifacts under ``<output_dir>/mlartifacts``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from conductor_core.errors import require

"""MLflow's limit on one param value; longer values are truncated."""


@runtime_checkable
class Tracker(Protocol):
    """What training needs from a tracking backend."""

    run_id: str | None

    def start(self) -> None:
        """Open (or resume) the run."""
        ...

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log parameters (flat mapping)."""
        ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log scalar metrics at ``step``."""
        ...

    def log_table(self, rows: Sequence[Mapping[str, Any]], name: str) -> None:
        """Log a table of rows (one dict per row) as ``name`` (a ``.json`` file name)."""
        ...

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Log a local file or directory."""
        ...

    def log_model(
        self, model: Any, tokenizer: Any, *, registered_name: str | None, alias: str
    ) -> str | None:
        """Log the trained model; register it with ``alias`` when a name is given."""
        ...

    def finish(self, status: str = "FINISHED") -> None:
        """End the run with ``FINISHED`` or ``FAILED``."""
        ...


class NoopTracker:
    """Tracks nothing (``tracking.backend: none``); keeps the last metrics for inspection."""

    def __init__(self) -> None:
        self.run_id: str | None = None
        self.params: dict[str, Any] = {}
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.tables: dict[str, list[dict[str, Any]]] = {}
        self.status: str | None = None

    def start(self) -> None:
        """Nothing to open."""

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Remember params."""
        self.params.update(params)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Remember metrics."""
        self.metrics.append((step, dict(metrics)))

    def log_table(self, rows: Sequence[Mapping[str, Any]], name: str) -> None:
        """Remember the table."""
        self.tables[name] = [dict(r) for r in rows]

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Nothing to upload."""

    def log_model(
        self, model: Any, tokenizer: Any, *, registered_name: str | None, alias: str
    ) -> str | None:
        """Nothing to log."""
        return None

    def finish(self, status: str = "FINISHED") -> None:
        """Remember the final status."""
        self.status = status


def default_tracking_uri(output_dir: str | Path) -> str:
    """``$MLFLOW_TRACKING_URI`` if set, else a SQLite store under ``output_dir``."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    db = Path(output_dir).expanduser().resolve() / "mlflow.db"
    db.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{db}"


class MlflowTracker:
    """Plain MLflow tracking (``mlflow`` imported lazily).

    Args:
        tracking_uri: the store; see :func:`default_tracking_uri`.
        experiment: experiment name (created with a local artifact root for SQLite stores).
        run_name: name of a new run.
        artifact_root: artifact location of a newly created experiment (SQLite stores).
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment: str = "conductor-train",
        run_name: str | None = None,
        artifact_root: str | Path | None = None,
    ) -> None:
        self.tracking_uri = tracking_uri
        self.experiment = experiment
        self.run_name = run_name
        self.artifact_root = artifact_root
        self.run_id: str | None = None
        self._mlflow: Any = None

    @property
    def mlflow(self) -> Any:
        """The ``mlflow`` module (imported on first use)."""
        if self._mlflow is None:
            self._mlflow = require("mlflow", "train", "experiment tracking")
        return self._mlflow

    def start(self) -> None:
        """Open the run given by ``MLFLOW_RUN_ID``, or start a new one in the experiment."""
        mlflow = self.mlflow
        mlflow.set_tracking_uri(self.tracking_uri)
        existing = os.environ.get("MLFLOW_RUN_ID")
        if existing:
            run = mlflow.start_run(run_id=existing)
        else:
            exp = mlflow.get_experiment_by_name(self.experiment)
            if exp is None:
                location = None
                if self.artifact_root is not None:
                    location = Path(self.artifact_root).expanduser().resolve().as_uri()
                exp_id = mlflow.create_experiment(self.experiment, artifact_location=location)
            else:
                exp_id = exp.experiment_id
            run = mlflow.start_run(experiment_id=exp_id, run_name=self.run_name)
        self.run_id = run.info.run_id

    # Logging goes through conductor_core.track, which flattens, truncates and scrubs secrets.
    def log_params(self, params: Mapping[str, Any]) -> None:
        """Log params (batched, truncated to MLflow's limit, secrets scrubbed)."""
        from conductor_core.track.mlflow_run import log_params_flat

        log_params_flat(dict(params))

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log finite scalar metrics; names are sanitised for MLflow."""
        from conductor_core.track.mlflow_run import log_metrics

        log_metrics(metrics, step=step)

    def log_table(self, rows: Sequence[Mapping[str, Any]], name: str) -> None:
        """Log rows as an MLflow table artifact."""
        from conductor_core.track.mlflow_run import log_table

        log_table(rows, name)

    def log_artifact(self, path: str | Path, artifact_path: str | None = None) -> None:
        """Log a file or a directory."""
        from conductor_core.track.mlflow_run import log_artifacts

        if Path(path).exists():
            log_artifacts(path, artifact_path)

    def log_model(
        self, model: Any, tokenizer: Any, *, registered_name: str | None, alias: str
    ) -> str | None:
        """Log the model with ``mlflow.transformers``; register it and set ``alias``."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        mlflow = self.mlflow
        import transformers

        info = mlflow.transformers.log_model(
            transformers_model={"model": model, "tokenizer": tokenizer},
            name="model",
            task="text-generation",
            pip_requirements=[
                f"transformers=={transformers.__version__}",
                "torch",
                "conductor-core",
            ],
            registered_model_name=registered_name,
        )
        if registered_name:
            client = mlflow.MlflowClient()
            version = getattr(info, "registered_model_version", None)
            if version is None:
                versions = client.search_model_versions(f"name='{registered_name}'")
                version = max(int(v.version) for v in versions)
            client.set_registered_model_alias(registered_name, alias, str(version))
        return info.model_uri

    def finish(self, status: str = "FINISHED") -> None:
        """End the run with ``status``."""
        if self.run_id is not None:
            self.mlflow.end_run(status=status)


def make_tracker(config: Any) -> Tracker:
    """The tracker a :class:`~conductor_core.train.config.StageConfig` asks for."""
    spec = config.tracking
    if spec.backend == "none":
        return NoopTracker()
    out = config.output_path()
    return MlflowTracker(
        spec.tracking_uri or default_tracking_uri(out),
        experiment=spec.experiment,
        run_name=spec.run_name or f"{config.stage}-{config.profile or 'custom'}",
        artifact_root=out / "mlartifacts",
    )
