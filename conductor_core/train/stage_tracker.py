"""Experiment tracking behind a small interface: a no-op tracker and an MLflow one.

:class:`MlflowTracker` is :class:`conductor_core.track.run_tracker.RunTracker` with training's
defaults: it logs the flattened stage config and the pool (which never holds secrets: only the
names of key variables) as params, per-step metrics, a table of sample plans, artifacts and, at
the end, the model folder (registered with an alias through
:func:`conductor_core.track.registry.log_and_register_model`, loadable with ``load_model_dir``).

Which run it logs into: ``MLFLOW_RUN_ID`` when set; else, inside a pipeline
(``tracking.parent_run_id``), the stage's nested run under that pipeline run (see
:func:`conductor_core.track.pipeline_runs.stage_run`: found by its stage tag, so a retried or
resumed stage logs into the same run); else, when the stage resumes from a checkpoint, the run
recorded in ``<output_dir>/mlflow_run.json`` (same tracking URI), re-opened; else a new run,
recorded in that file. A crashed run is ended ``FAILED``; the resumed run ends ``FINISHED``.

Local default store: ``sqlite:///<output_dir>/mlflow.db`` (MLflow 3.13+ refuses a plain
``./mlruns`` file store) with artifacts under ``<output_dir>/mlartifacts``.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from conductor_core.track.mlflow_run import mlflow_module
from conductor_core.track.pipeline_runs import TAG_STAGE, find_nested_run, stage_run
from conductor_core.track.run_tracker import RunTracker
from conductor_core.track.storage import Storage, is_s3, split_s3
from conductor_core.train.checkpoints import find_resume_point

RUN_FILE = "mlflow_run.json"
"""File in the stage's output dir recording the MLflow run (``run_id``, ``tracking_uri``)."""

_LOG = logging.getLogger(__name__)


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
        self, model_dir: str | Path, *, registered_name: str | None, alias: str
    ) -> str | None:
        """Log the saved model folder; register it with ``alias`` when a name is given."""
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
        self.dataset: dict[str, str] | None = None

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

    def log_dataset(self, source: str, digest: str, **_: Any) -> None:
        """Remember the dataset's source and digest."""
        self.dataset = {"source": source, "digest": digest}

    def log_model(
        self, model_dir: str | Path, *, registered_name: str | None, alias: str
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


def _parse_record(text: str, where: str, tracking_uri: str) -> str | None:
    try:
        data = json.loads(text)
    except ValueError:
        _LOG.warning("ignoring unreadable %s; a new MLflow run is started", where)
        return None
    if not isinstance(data, dict) or data.get("tracking_uri") != tracking_uri:
        return None
    run_id = data.get("run_id")
    return run_id if isinstance(run_id, str) and run_id else None


def read_run_file(path: str | Path, tracking_uri: str) -> str | None:
    """The run id recorded at ``path`` (a local file or ``s3://`` key) if it was tracked at
    ``tracking_uri``, else None (also when the record is missing or unreadable)."""
    if is_s3(str(path)):
        from botocore.exceptions import BotoCoreError, ClientError

        bucket, key = split_s3(str(path))
        try:
            body = Storage().client.get_object(Bucket=bucket, Key=key)["Body"].read()
        except (BotoCoreError, ClientError) as exc:  # missing key, no access: nothing to resume
            _LOG.info("no MLflow run record at %s (%s)", path, exc)
            return None
        return _parse_record(body.decode("utf-8", errors="replace"), str(path), tracking_uri)
    file = Path(path)
    if not file.is_file():
        return None
    return _parse_record(
        file.read_text(encoding="utf-8", errors="replace"), str(file), tracking_uri
    )


def write_run_file(path: str | Path, run_id: str, tracking_uri: str, experiment: str) -> None:
    """Record the run (``run_id``, ``tracking_uri``, ``experiment``) at ``path`` (a local file,
    written atomically, or an ``s3://`` key)."""
    record = {"run_id": run_id, "tracking_uri": tracking_uri, "experiment": experiment}
    text = json.dumps(record, indent=2) + "\n"
    if is_s3(str(path)):
        bucket, key = split_s3(str(path))
        Storage().client.put_object(Bucket=bucket, Key=key, Body=text.encode("utf-8"))
        return
    file = Path(path)
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp = file.with_name(file.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(file)


class MlflowTracker(RunTracker):
    """MLflow tracking for a training stage (``mlflow`` imported lazily).

    Args:
        tracking_uri: the store; see :func:`default_tracking_uri`.
        experiment: experiment name.
        run_name: name of a new run.
        artifact_root: artifact location of a newly created experiment with a local (SQLite)
            store; a tracking server's experiments use the server's artifact root.
        run_file: where the run is recorded (see :data:`RUN_FILE`); None records nothing.
        resume: re-open the run recorded in ``run_file`` (when no ``MLFLOW_RUN_ID`` is set).
        mirror: a second record (``s3://`` key or path) next to the checkpoints, read when
            ``run_file`` holds none: a pod that lost its output dir still finds its run.
        parent_run_id: a pipeline run (from
            :func:`~conductor_core.track.pipeline_runs.pipeline_run`): log into its nested run
            of ``stage`` (created, or found again) unless ``MLFLOW_RUN_ID`` is set.
        stage: the stage's name under ``parent_run_id`` (default: ``run_name``, else ``train``).
        system_metrics: sample ``system/*`` metrics into the run while it is open (None:
            MLflow's ``MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING``).
    """

    def __init__(
        self,
        tracking_uri: str,
        experiment: str = "conductor-train",
        run_name: str | None = None,
        artifact_root: str | Path | None = None,
        *,
        run_file: str | Path | None = None,
        resume: bool = False,
        mirror: str | None = None,
        parent_run_id: str | None = None,
        stage: str | None = None,
        system_metrics: bool | None = None,
    ) -> None:
        location = None
        if artifact_root is not None and tracking_uri.startswith("sqlite:"):
            location = Path(artifact_root).expanduser().resolve().as_uri()
        super().__init__(
            experiment,
            run_name,
            uri=tracking_uri,
            artifact_location=location,
            system_metrics=system_metrics,
        )
        self.tracking_uri = tracking_uri
        self.artifact_root = artifact_root
        self.run_file = Path(run_file) if run_file is not None else None
        self.resume = resume
        self.mirror = mirror
        self.parent_run_id = parent_run_id
        self.stage = stage or run_name or "train"

    @property
    def mlflow(self) -> Any:
        """The ``mlflow`` module (imported on first use)."""
        return mlflow_module()

    def _start_stage_run(self, parent_run_id: str) -> None:
        """Open (or re-open) the nested run of :attr:`stage` under ``parent_run_id``."""
        existing = find_nested_run(
            parent_run_id, {TAG_STAGE: self.stage}, tracking_uri=self.tracking_uri
        )
        ctx = stage_run(
            parent_run_id,
            self.stage,
            tracking_uri=self.tracking_uri,
            log_system_metrics=self.system_metrics,
        )
        run = ctx.__enter__()
        self._ctx = ctx
        self.run_id = run.info.run_id
        self.resumed = existing is not None

    def start(self) -> None:
        """Open the run (injected, a pipeline's stage run, resumed or new) and record it in
        ``run_file``."""
        if self._ctx is not None:
            return
        records = [r for r in (self.run_file, self.mirror) if r is not None]
        if self.parent_run_id and not os.environ.get("MLFLOW_RUN_ID"):
            self._start_stage_run(self.parent_run_id)
        else:
            if self.resume and self.resume_run_id is None:
                for record in records:
                    self.resume_run_id = read_run_file(record, self.tracking_uri)
                    if self.resume_run_id:
                        break
            super().start()
        if self.run_id is None:
            return
        for record in records:
            try:
                write_run_file(record, self.run_id, self.tracking_uri, self.experiment)
            except Exception as exc:  # the mirror is a convenience: never stop training
                if record is self.run_file:
                    raise
                _LOG.warning("could not record the MLflow run at %s: %s", record, exc)


def has_checkpoint(config: Any) -> bool:
    """True when :func:`~conductor_core.train.grpo.run_stage` will resume ``config``'s stage."""
    return find_resume_point(config).exists


def make_tracker(config: Any, *, resume: bool | None = None) -> Tracker:
    """The tracker a :class:`~conductor_core.train.config.StageConfig` asks for.

    The MLflow tracker records its run in ``<output_dir>/mlflow_run.json`` (and, with S3
    checkpoints, in ``<checkpoint.dir>/mlflow_run.json``) and, when the stage resumes from a
    checkpoint (``resume``; None looks it up), re-opens the run recorded there. With
    ``tracking.parent_run_id`` it logs into the pipeline run's nested run named after
    ``config.stage`` instead.
    """
    spec = config.tracking
    if spec.backend == "none":
        return NoopTracker()
    out = config.output_path()
    ckpt = config.checkpoint_uri()
    return MlflowTracker(
        spec.tracking_uri or default_tracking_uri(out),
        experiment=spec.experiment,
        run_name=spec.run_name or f"{config.stage}-{config.profile or 'custom'}",
        artifact_root=out / "mlartifacts",
        run_file=out / RUN_FILE,
        resume=has_checkpoint(config) if resume is None else resume,
        mirror=f"{ckpt.rstrip('/')}/{RUN_FILE}" if is_s3(ckpt) else None,
        parent_run_id=spec.parent_run_id,
        stage=str(config.stage),
        system_metrics=spec.system_metrics and _psutil_installed(),
    )


def _psutil_installed() -> bool:
    """Whether MLflow can sample system metrics (it needs ``psutil``, which ``accelerate`` of
    the train extra brings); without it a stage logs none instead of failing to start."""
    import importlib.util

    if importlib.util.find_spec("psutil") is not None:
        return True
    _LOG.warning("tracking.system_metrics: psutil is not installed; no system metrics logged")
    return False
