"""Resuming a local pipeline run that was killed: its finished tasks reused, its interrupted stage
resumed from its checkpoint, its MLflow runs continued.

Every local run gets a record under ``<root>/local-runs/`` (the pipeline, its KFP run id, its
parameters) before its first task, and runs with KFP's local task cache on, in a cache folder of
its own: a finished task's outputs are kept there (artifacts by their paths under the run's
folder). A fresh run's cache starts empty, so nothing is reused across runs by accident.
``--resume`` runs the pipeline again under the recorded run id and parameters with that run's
cache: a task whose inputs match a finished one is answered from the cache instead of running
again; the interrupted task runs again, and a training stage finds its checkpoints under the
same run id in the artifact root; the tasks find the same MLflow parent run by the run id.

A ``--docker`` run (the cluster rehearsal) resumes the same way when its S3 and MLflow outlive
it (given by ``MLFLOW_TRACKING_URI`` and an S3 endpoint, as a cluster's do): the rehearsal of KFP's
"Retry", which on a cluster re-runs only what did not finish. A run resumes only on the backend
it ran on: the two cache the same tasks with outputs of different kinds.
"""

from __future__ import annotations

import json
import logging
import re
import secrets
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError

RECORDS = "local-runs"
"""The folder under a run root that holds one record per local run."""
CACHES = "kfp-cache"
"""The folder under a run root that holds each local run's task cache."""


@dataclass(frozen=True)
class RunRecord:
    """What a local run needs to be resumed: written before its first task."""

    pipeline: str
    run_id: str
    """The KFP run id its tasks see (``dsl.PIPELINE_JOB_ID_PLACEHOLDER``)."""
    params: dict[str, Any]
    """The parameters given to the run (the pipeline's defaults fill in the rest)."""
    started: str
    backend: str = "local"
    """``local`` (tasks in this Python) or ``docker`` (the compiled pipeline in containers)."""
    services: dict[str, str] = field(default_factory=dict)
    """A ``docker`` run's MLflow and S3 endpoints (where its finished tasks' outputs are)."""
    caching: bool = True
    """False: the run had KFP's task cache off (``--no-cache``), so nothing of it can be reused."""

    def cache_root(self, root: Path) -> Path:
        """This run's task cache under ``root``."""
        return root / CACHES / self.run_id


def _plain(params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` as JSON gives them back (what a record holds, so that they compare alike)."""
    return json.loads(json.dumps(dict(params), default=str))


def new_record(
    root: Path,
    pipeline: str,
    params: Mapping[str, Any],
    backend: str = "local",
    services: Mapping[str, str] | None = None,
    *,
    caching: bool = True,
) -> RunRecord:
    """Draw a run id for a new run of ``pipeline`` on ``backend`` (with ``services``, a docker
    run's endpoints; ``caching`` False: run with the task cache off) and write its record under
    ``root``."""
    record = RunRecord(
        pipeline=pipeline,
        run_id=f"local-{secrets.token_hex(6)}",
        params=_plain(params),
        started=datetime.now(UTC).isoformat(),  # sortable, to the microsecond
        backend=backend,
        services=dict(services or {}),
        caching=caching,
    )
    folder = root / RECORDS
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{record.run_id}.json").write_text(json.dumps(asdict(record), indent=2) + "\n")
    return record


def find_record(root: Path, pipeline: str, run: str | None = None) -> RunRecord:
    """The record of the local run of ``pipeline`` to resume: ``run`` (its run id), else the
    newest. Raises :class:`ConfigError` naming what is there when there is none."""
    folder = root / RECORDS
    records = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            records.append(RunRecord(**json.loads(path.read_text())))
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"--resume: {path} is not a run record ({exc})") from exc
    mine = [r for r in records if r.pipeline == pipeline]
    if run:
        found = [r for r in mine if r.run_id == run]
        if not found:
            known = ", ".join(r.run_id for r in mine) or "none"
            raise ConfigError(f"--resume {run}: no local run of {pipeline} by that id ({known})")
        return found[0]
    if not mine:
        raise ConfigError(f"--resume: no local run of {pipeline} under {root} to resume")
    return max(mine, key=lambda r: r.started)


def check_backend(
    record: RunRecord, backend: str, services: Mapping[str, str] | None = None
) -> None:
    """Raise :class:`ConfigError` unless the run is resumed on the backend it ran on, with the
    same MLflow and S3 (its finished tasks' outputs are there), and kept them (it did not run
    with ``--no-cache``)."""
    if not record.caching:
        raise ConfigError(
            f"--resume {record.run_id}: that run ran with --no-cache, so none of its tasks was "
            "kept to reuse; start it afresh"
        )
    if record.backend != backend:
        raise ConfigError(
            f"--resume {record.run_id}: that run ran with --{record.backend}; resume it with "
            f"--{record.backend} (its finished tasks' outputs are {record.backend}'s)"
        )
    changed = [
        f"{key} {value!r} (the run had {record.services.get(key)!r})"
        for key, value in sorted((services or {}).items())
        if record.services.get(key) != value
    ]
    if changed:
        raise ConfigError(
            f"--resume {record.run_id}: the run's outputs are in the MLflow and S3 it ran "
            "with; now: " + ", ".join(changed)
        )


def resumed_params(record: RunRecord, given: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters of the resumed run: the recorded ones. A parameter given now must be the
    same; a different one is a :class:`ConfigError` naming it (the finished tasks were computed
    with the recorded value)."""
    given = _plain(given)
    changed = [
        f"{key}={given[key]!r} (the run had {record.params.get(key, '<its default>')!r})"
        for key in sorted(given)
        if record.params.get(key) != given[key]
    ]
    if changed:
        raise ConfigError(
            f"--resume {record.run_id}: a resumed run keeps its parameters; changed: "
            + ", ".join(changed)
        )
    return dict(record.params)


@contextmanager
def fixed_run_id(run_id: str) -> Iterator[None]:
    """Make KFP's local runner give the pipeline run ``run_id`` instead of a random one (it
    draws it once per pipeline run, before any task; task ids stay random)."""
    from kfp.local import pipeline_orchestrator, placeholder_utils

    class _Ids:
        def __getattr__(self, name: str) -> Any:
            return getattr(placeholder_utils, name)

        @staticmethod
        def make_random_id() -> str:
            return run_id

    pipeline_orchestrator.placeholder_utils = _Ids()  # type: ignore[assignment]
    try:
        yield
    finally:
        pipeline_orchestrator.placeholder_utils = placeholder_utils


def cache_every_task(spec: Any) -> None:
    """Let KFP's local cache keep every task of pipeline spec ``spec`` (a ``PipelineSpec``,
    changed in place) but its exit handler, which must run to close the run: tasks with side
    effects (training, registration) are uncached on a cluster, and a resumed run must still
    reuse them once they finished."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    exit_strategy = pipeline_spec_pb2.PipelineTaskSpec.TriggerPolicy.ALL_UPSTREAM_TASKS_COMPLETED
    for component in [spec.root, *spec.components.values()]:
        for task in component.dag.tasks.values():
            if task.trigger_policy.strategy != exit_strategy:
                task.caching_options.enable_cache = True


_CACHE_HIT = re.compile(r"^Task (\S+) cache hit")


@contextmanager
def reused_tasks(on_reused: Callable[[str], None]) -> Iterator[None]:
    """Call ``on_reused(task)`` for each task KFP's local runner answers from its cache. It says
    so only in an INFO record of the root logger (outside the log context it prints tasks in),
    which is otherwise dropped: a handler that takes those records alone, with the root logger
    at INFO meanwhile (its other handlers are KFP's own, which log at INFO anyway)."""

    class _Hits(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if m := _CACHE_HIT.match(record.getMessage()):
                on_reused(m.group(1))

    root = logging.getLogger()
    handler, level = _Hits(logging.INFO), root.level
    root.addHandler(handler)
    root.setLevel(min(level, logging.INFO))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def cached_run_dirs(record: RunRecord, root: Path, kfp_root: Path) -> list[Path]:
    """The run folders under ``kfp_root`` that hold the outputs of the run's finished tasks (as
    its task cache names them), oldest first: where a resumed run's reused outputs are."""
    found: set[Path] = set()

    def walk(value: Any) -> None:
        if isinstance(value, dict):
            uri = value.get("uri")
            if value.get("__kfp_artifact__") and isinstance(uri, str):
                path = Path(uri)
                if path.is_relative_to(kfp_root) and path != kfp_root:
                    found.add(kfp_root / path.relative_to(kfp_root).parts[0])
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for entry in sorted(record.cache_root(root).glob("*.json")):
        try:
            walk(json.loads(entry.read_text()))
        except ValueError:  # an entry being written when the run was killed: not a finished task
            continue
    return sorted((p for p in found if p.is_dir()), key=lambda p: p.stat().st_mtime)
