"""Running a pipeline on Kubeflow's local runner: the embedded default of the platform.

``kfp.local.SubprocessRunner(use_venv=False)`` runs each task as a subprocess of this Python, so the
same components that run in pods run here. Around it this module sets up the embedded defaults
(a local artifact folder, a SQLite MLflow store), shows one line per task as it starts and ends
(the tasks' full logs go to a log file), and reads the run's results back for the summary.
"""

import builtins
import io
import json
import logging
import os
import re
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conductor_core.errors import ConductorError, ConfigError

if TYPE_CHECKING:  # pragma: no cover
    from conductor_core.track.pipeline_runs import PipelineRun

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_STARTED = re.compile(r"Executing task '([^']+)'")
_FINISHED = re.compile(r"Task '([^']+)' finished with status (\w+)")
_FAILED_TASK = re.compile(r"Inner task failed: '([^']+)'")
_RAISED = re.compile(r"^\s*((?:[\w]+\.)*(\w+(?:Error|Exception|Failed))): (.+)$")
LOCAL_PARALLELISM = 2
"""Evaluation shards run at the same time locally (KFP's local runner runs at most 2)."""


@dataclass
class TaskTiming:
    """One task of a local run: its name, status and wall time."""

    name: str
    status: str = "RUNNING"
    seconds: float = 0.0


@dataclass
class LocalRun:
    """What a local pipeline run produced."""

    pipeline: str
    run_dir: Path | None
    """The run's folder under the KFP pipeline root (every task's outputs); None when the run
    failed before any task wrote an output."""
    log_path: Path
    seconds: float
    tasks: list[TaskTiming] = field(default_factory=list)
    ok: bool = True
    error: str | None = None
    kfp_run_id: str | None = None
    """The run id KFP's local runner gave the tasks (it names the run's MLflow runs and artifact
    folder); None when no task opened the run's MLflow run (or MLflow could not be read)."""
    mlflow_run_name: str | None = None
    """The name of the run's parent MLflow run (``<pipeline>-<KFP run id>``), when found."""
    tracking_uri: str | None = None
    """Where the run's MLflow runs can be read now; None: the default of a local run under its
    root (:func:`local_tracking_uri`)."""
    kept_artifacts: bool = True
    """False when the run's S3 store ended with it (the rehearsal's loopback server): the
    weights are gone, the MLflow runs and metrics remain."""
    resumed: bool = False
    """Whether the run resumed a killed one (``--resume``): tasks ``REUSED`` did not run."""
    earlier_dirs: list[Path] = field(default_factory=list)
    """A resumed run's folders of the run it resumed, where its reused tasks' outputs are."""

    def output(self, task: str, name: str) -> Path | None:
        """The output ``name`` of ``task`` (the first match under the run folder, then under
        the folders of the run it resumed), if any."""
        for folder in [self.run_dir, *reversed(self.earlier_dirs)]:
            found = sorted(folder.glob(f"**/{task}*/{name}")) if folder else []
            if found:
                return found[0]
        return None


class _TaskWatcher(io.TextIOBase):
    """Stands in for stdout during a run: writes everything to the log, and reports task starts
    and ends (KFP's local runner prints them) to ``on_event``."""

    def __init__(self, log: io.TextIOBase, on_event: Callable[[str, str], None]) -> None:
        self._log = log
        self._on_event = on_event
        self._buffer = ""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        self._log.write(text)
        self._buffer += text
        *lines, self._buffer = self._buffer.split("\n")
        for line in lines:
            plain = _ANSI.sub("", line)
            if m := _STARTED.search(plain):
                self._on_event(m.group(1), "STARTED")
            elif m := _FINISHED.search(plain):
                self._on_event(m.group(1), m.group(2))
        return len(text)

    def flush(self) -> None:
        self._log.flush()


def local_settings() -> Any:
    """The cluster settings for a local run: no pod environment variables or workspace (KFP's
    local runner applies a task's environment variables, and the cluster's MLflow address or
    workspace path would be wrong here), and every folder shared (``shared_paths: ["/"]``: the
    tasks run on this machine, so the parameter check accepts a local artifact root; the
    default one is ``<root>/pipelines``, not the settings' ``artifact_root``)."""
    from conductor_core.cluster.settings import POD_KINDS, load_cluster_settings

    settings = load_cluster_settings()
    local = {"env": {}, "workspace": None}
    return settings.model_copy(
        update={
            **{kind: getattr(settings, kind).model_copy(update=local) for kind in POD_KINDS},
            "artifact_root": None,
            "shared_paths": ["/"],
            "s3_endpoint": None,
        }
    )


@contextmanager
def _embedded_environment(root: Path):
    """The embedded defaults for the tasks (subprocesses inherit them): artifacts under
    ``root/pipelines``, MLflow in ``root/mlflow.db`` unless ``MLFLOW_TRACKING_URI`` is set."""
    values = {
        "CONDUCTOR_ARTIFACT_ROOT": str(root / "pipelines"),
        "CONDUCTOR_RUNS_DIR": str(root),
        "GX_ANALYTICS_ENABLED": "false",
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        values["MLFLOW_TRACKING_URI"] = f"sqlite:///{root / 'mlflow.db'}"
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield values
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextmanager
def _kfp_process_state():
    """Put back the process-wide state kfp's local runner changes around each task.

    It swaps ``builtins.print`` for an indenting copy and the root logger's handlers for one
    writing to ``sys.stdout`` (here the task watcher), restoring what it saw on entry; two tasks
    in parallel restore each other's copy, which left print indented (later prints, even to
    stderr, wrote spaces to stdout) and the root logger writing to the closed log file.
    """
    root = logging.getLogger()
    saved = builtins.print, root.level, root.handlers[:]
    try:
        yield
    finally:
        builtins.print, level, handlers = saved
        root.setLevel(level)
        root.handlers[:] = handlers


@contextmanager
def _oneof_artifacts():
    """Let kfp's local runner join ``dsl.OneOf`` of artifacts, as a cluster does.

    The training pipeline picks each stage's task with ``dsl.If``/``Elif``/``Else`` and hands
    the branch's model on through ``dsl.OneOf`` (``conductor_pipelines/training.py``). kfp 2.17's
    local runner joins a ``OneOf`` of parameters (the value of the branch that ran) but stops at
    one of artifacts ("Expected 1 artifact in ArtifactSelectorSpec", ``OrchestratorUtils.
    get_dag_output_artifacts``). Within the block that method takes, for each output, the one
    selector whose task produced it, exactly as it does for parameters; an output with a single
    selector reads as before.
    """
    from kfp.local.orchestrator.orchestrator_utils import OrchestratorUtils

    original = OrchestratorUtils.__dict__["get_dag_output_artifacts"]

    def get_dag_output_artifacts(cls: Any, dag_outputs_spec: Any, io_store: Any) -> dict:
        outputs = {}
        for key, spec in dag_outputs_spec.artifacts.items():
            found = []
            for selector in spec.artifact_selectors:
                try:
                    found.append(
                        io_store.get_task_output(
                            selector.producer_subtask, selector.output_artifact_key
                        )
                    )
                except (KeyError, ValueError):  # that branch did not run
                    continue
            if len(found) != 1:
                raise ValueError(
                    f"dsl.OneOf output {key!r}: {len(found)} of its branches produced it; "
                    "expected exactly one"
                )
            outputs[key] = found[0]
        return outputs

    OrchestratorUtils.get_dag_output_artifacts = classmethod(get_dag_output_artifacts)
    try:
        yield
    finally:
        OrchestratorUtils.get_dag_output_artifacts = original


@dataclass
class _Backend:
    """How a run's tasks execute: the pipeline to call, KFP's runner, the parameters this
    machine fills in, and the MLflow store the tasks log to."""

    pipeline: Any
    runner: Any
    params: dict[str, Any]
    tracking_uri: str
    rehearsal_id: str | None = None
    store_uri: str | None = None
    kept_artifacts: bool = True
    own_store: bool = False
    """Whether the MLflow store belongs to the runs under this root (the embedded
    ``root/mlflow.db``), so that a RUNNING run in it is one of theirs."""


@contextmanager
def _backend(
    name: str,
    root: Path,
    kfp_root: Path,
    containers: bool,
    compiled: Path | None = None,
    pull: bool = False,
):
    """Subprocesses of this Python on the pipeline built here (the embedded default), or, with
    ``containers``, the compiled pipeline (``compiled``, default
    ``conductor_pipelines/compiled/<name>.yaml``) in Docker containers (:mod:`.containers`),
    pulling missing images where ``pull`` or their registry is on loopback."""
    if not containers:
        import kfp.local

        from conductor_pipeline_runner.local_resume import cache_every_task
        from conductor_pipelines.registry import build

        pipeline = build(name, settings=local_settings(), eval_parallelism=LOCAL_PARALLELISM)
        cache_every_task(pipeline.pipeline_spec)
        own_store = not os.environ.get("MLFLOW_TRACKING_URI")
        with _embedded_environment(root):
            yield _Backend(
                pipeline=pipeline,
                runner=kfp.local.SubprocessRunner(use_venv=False),
                params={},
                tracking_uri=local_tracking_uri(root),
                own_store=own_store,
            )
        return
    from conductor_pipeline_runner.containers import (
        compiled_pipeline,
        rehearsal,
        writable_pipeline_root,
    )
    from conductor_pipelines.registry import COMPILED_DIR

    compiled = compiled or COMPILED_DIR / f"{name}.yaml"
    pipeline = compiled_pipeline(compiled)
    writable_pipeline_root(kfp_root)
    with rehearsal(compiled, root, pull=pull) as setup:
        yield _Backend(
            pipeline=pipeline,
            runner=setup.runner(),
            params=setup.params(pipeline),
            tracking_uri=setup.tracking_uri,
            rehearsal_id=setup.rehearsal_id,
            store_uri=setup.store_uri,
            kept_artifacts=setup.kept_artifacts,
        )


def run_local(
    name: str,
    params: dict[str, Any] | None = None,
    *,
    root: str | Path = "runs",
    echo: Callable[[str], None] | None = None,
    verbose: bool = False,
    containers: bool = False,
    resume: str | bool = False,
    compiled: Path | None = None,
    pull: bool = False,
    caching: bool = True,
) -> LocalRun:
    """Run pipeline ``name`` with ``params`` on KFP's local runner under ``root``.

    With ``resume`` (True: the newest run of ``name`` under ``root``; a string: that run's id)
    the run is a killed run taken up again (:mod:`.local_resume`): its tasks that
    finished are reused, with their outputs, and its parameters are kept (a different one given
    in ``params`` is a :class:`ConfigError` naming it). Local runs only, not ``containers``.

    By default every task is a subprocess of this Python. With ``containers`` the compiled
    pipeline runs instead, every task in a Docker container of the image it names, sharing only
    KFP's artifacts, S3 and MLflow (the cluster rehearsal, :mod:`.containers`): the
    committed ``conductor_pipelines/compiled/<name>.yaml`` or ``compiled``; images the engine
    lacks are pulled only from a loopback registry, or from any with ``pull``.
    Without ``caching`` (``--no-cache``) KFP's local task cache is off: no task is answered
    from a cached output, nothing is kept for a resume, and the run cannot be resumed.
    ``echo`` receives one line as each task starts and ends (default: stderr). With ``verbose``
    the tasks' logs also go to stdout; they always go to ``root/logs/<run>.log``. A failed task
    ends the run; the result then has ``ok`` False and the error, and the log keeps the task's
    output.
    """
    import kfp.local

    from conductor_pipeline_runner.containers import given_services
    from conductor_pipeline_runner.local_resume import (
        cached_run_dirs,
        check_backend,
        find_record,
        fixed_run_id,
        new_record,
        resumed_params,
        reused_tasks,
    )

    say = echo or (lambda line: print(line, file=sys.stderr, flush=True))
    root = Path(root).expanduser().resolve()
    backend_name = "docker" if containers else "local"
    services = given_services() if containers else None
    resumable = not containers or services is not None
    if resume and not resumable:
        raise ConfigError(
            "--resume of a --docker run needs the MLflow server and S3 endpoint it ran with "
            "(MLFLOW_TRACKING_URI and an S3 endpoint, as on a cluster): a run that started its "
            "own on loopback lost its S3 when it ended"
        )
    if resume and not caching:
        raise ConfigError("a resumed run reuses its finished tasks from the cache: no --no-cache")
    if resume:
        record = find_record(root, name, resume if isinstance(resume, str) else None)
        check_backend(record, backend_name, services)
        params = resumed_params(record, params or {})
        say(f"resuming {name} run {record.run_id} (started {record.started})")
    else:
        record = new_record(root, name, params or {}, backend_name, services, caching=caching)
        if not caching:
            how = "it starts afresh: --no-cache keeps no finished task to reuse"
        elif resumable:
            how = "the same command with --resume"
        else:
            how = "it starts afresh: its own loopback S3 ends with it"
        say(f"{name} run {record.run_id} (if it is killed: {how})")
    kfp_root = root / "kfp"
    logs = root / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    started_at: dict[str, float] = {}
    tasks: dict[str, TaskTiming] = {}
    t0 = time.perf_counter()

    def on_event(task: str, what: str) -> None:
        now = time.perf_counter()
        if what == "REUSED":
            tasks[task] = TaskTiming(task, "REUSED")
            say(f"[{now - t0:6.0f}s] {task} reused (it finished in the run resumed)")
            return
        if what == "STARTED":
            # Iterations of a ParallelFor share a task name: number the repeats.
            n = sum(1 for t in tasks if t == task or t.startswith(f"{task} #"))
            key = task if n == 0 else f"{task} #{n + 1}"
            started_at[key] = now
            tasks[key] = TaskTiming(key)
            say(f"[{now - t0:6.0f}s] {key} ...")
            return
        running = [
            k for k, t in tasks.items() if t.status == "RUNNING" and k.split(" #")[0] == task
        ]
        key = running[0] if running else task
        timing = tasks.setdefault(key, TaskTiming(key))
        timing.status = what
        timing.seconds = now - started_at.get(key, now)
        mark = "done" if what == "SUCCESS" else what
        say(f"[{now - t0:6.0f}s] {key} {mark} ({timing.seconds:.0f} s)")

    before = set(kfp_root.glob("*")) if kfp_root.exists() else set()
    error = None
    leftovers: list[str] = []
    backend_ctx = _backend(name, root, kfp_root, containers, compiled, pull)
    with (
        _run_lock(root) as alone,
        backend_ctx as backend,
        log_path.open("w", encoding="utf-8") as log,
    ):
        if alone and backend.own_store:
            _close_killed_runs(backend.tracking_uri, record.run_id, say)
        # KFP's workspace folder goes under the run's root: by default it is a new temporary
        # folder, removed after a pipeline run but left behind by a run killed or stopped before
        # its pipeline starts. KFP creates only its default one.
        workspace = root / "kfp-workspace"
        workspace.mkdir(parents=True, exist_ok=True)
        # The task cache of this run alone: a fresh run reuses nothing, a resumed one what its
        # run finished (conductor_pipeline_runner/local_resume.py).
        kfp.local.init(
            runner=backend.runner,
            pipeline_root=str(kfp_root),
            workspace_root=str(workspace),
            raise_on_error=True,
            enable_caching=caching,
            cache_root=str(record.cache_root(root)),
        )
        watcher = _TaskWatcher(log, on_event)
        stdout = sys.stdout
        sys.stdout = _Tee(watcher, stdout) if verbose else watcher  # type: ignore[assignment]
        try:
            with (
                _kfp_process_state(),
                _oneof_artifacts(),
                fixed_run_id(record.run_id),
                reused_tasks(lambda task: on_event(task, "REUSED")),
                warnings.catch_warnings(),
            ):
                # Expected locally, once per task: resources and pod settings apply on a cluster
                # only, and the components name their cluster image while running in this Python.
                warnings.filterwarnings("ignore", message=".*no effect in the current local runner")
                warnings.filterwarnings("ignore", message=".*custom or non-Python base image")
                backend.pipeline(**{**backend.params, **(params or {})})
        except Exception as exc:
            error = str(exc).strip().splitlines()[-1] if str(exc).strip() else repr(exc)
        finally:
            sys.stdout = stdout
        if backend.rehearsal_id is not None:
            from conductor_pipeline_runner.containers import leftover_containers

            leftovers = leftover_containers(backend.rehearsal_id)
        tracking_uri = backend.tracking_uri
        earlier = cached_run_dirs(record, root, kfp_root) if resume else []
        run_dir, found = _run_folder_and_mlflow_run(
            kfp_root, before, record.run_id, tracking_uri, earlier
        )
    if error is not None:
        error = _failure(error, log_path)
    if error is None:
        # Parallel iterations print through one stdout, and a finish line can come out interleaved
        # with another task's output; a run without an error had every task succeed (the local
        # runner raises on the first failure). Such a task ran alongside its twin: same time.
        for t in tasks.values():
            if t.status == "RUNNING":
                base = t.name.split(" #")[0]
                twins = [o.seconds for o in tasks.values() if o.name.split(" #")[0] == base]
                t.status, t.seconds = "SUCCESS", max(twins)
    if run_dir is None and error is None:
        raise ConductorError(f"pipeline {name}: the local runner wrote nothing; log: {log_path}")
    if leftovers and error is None:
        error = f"containers left behind after the run: {', '.join(leftovers)}"
    return LocalRun(
        pipeline=name,
        run_dir=run_dir,
        log_path=log_path,
        seconds=time.perf_counter() - t0,
        tasks=list(tasks.values()),
        ok=error is None,
        error=error,
        kfp_run_id=found.kfp_run_id if found else None,
        mlflow_run_name=found.run_name if found else None,
        tracking_uri=backend.store_uri,
        kept_artifacts=backend.kept_artifacts,
        resumed=bool(resume),
        earlier_dirs=[d for d in earlier if d != run_dir],
    )


@contextmanager
def _run_lock(root: Path) -> Iterator[bool]:
    """Hold ``root``'s run lock while a run goes on; yields whether no other run under ``root``
    was live when this one started. Every run holds the lock shared; the kernel drops it when
    the process ends, however it ends (SIGKILL included), so a run that gets it exclusively
    first knows that any run its store shows RUNNING is dead."""
    import fcntl

    with (root / ".run.lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            alone = True
        except BlockingIOError:
            alone = False
        fcntl.flock(lock, fcntl.LOCK_SH)  # from exclusive: downgraded, never released between
        yield alone


def _close_killed_runs(tracking_uri: str, resumed: str, say: Callable[[str], None]) -> None:
    """Close as KILLED the MLflow runs that runs killed under this root left RUNNING (no run
    under it is live: :func:`_run_lock`), but those of run ``resumed``, which go on; say which."""
    from conductor_core.track.mlflow_run import store_missing
    from conductor_core.track.pipeline_runs import close_stale_pipeline_runs

    if store_missing(tracking_uri):
        return

    def ended(kfp_run_id: str) -> str | None:
        return None if kfp_run_id == resumed else "KILLED"

    for kfp_run_id, status in close_stale_pipeline_runs(ended, tracking_uri=tracking_uri):
        say(f"MLflow: the run {kfp_run_id} was left RUNNING by a killed run; closed it {status}")


def local_tracking_uri(root: Path) -> str:
    """The MLflow store of a local run under ``root``: ``$MLFLOW_TRACKING_URI``, else
    ``root/mlflow.db`` (what :func:`_embedded_environment` gives the tasks)."""
    return os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{root / 'mlflow.db'}"


def _run_folder_and_mlflow_run(
    kfp_root: Path,
    before: set[Path],
    kfp_run_id: str,
    tracking_uri: str,
    earlier: list[Path],
) -> "tuple[Path | None, PipelineRun | None]":
    """The run's folder under KFP's pipeline root (the newest new one; for a resumed run whose
    every task was reused, the newest of the ``earlier`` run's) and its parent MLflow run, read
    while the run's tracking server (if any) is still up."""
    new = sorted(set(kfp_root.glob("*")) - before, key=lambda p: p.stat().st_mtime)
    run_dir = new[-1] if new else (earlier[-1] if earlier else None)
    return run_dir, (_mlflow_run(kfp_run_id, tracking_uri, run_dir) if run_dir else None)


def _mlflow_run(kfp_run_id: str, uri: str, run_dir: Path | None) -> "PipelineRun | None":
    """The parent MLflow run the run's tasks opened, tagged with the local run's name
    (``run_dir``'s; a resumed run's is its last folder) so that `conductor eval compare
    --kfp-run-id NAME` finds it too. None when there is none (a pipeline that does not log, a
    failure before it), and when the store cannot be read: the summary then says less, the run
    is not failed for it."""
    from conductor_core.track.mlflow_run import store_missing
    from conductor_core.track.pipeline_runs import find_pipeline_run, name_pipeline_run

    if store_missing(uri):
        return None  # no task logged

    try:
        found = find_pipeline_run(kfp_run_id, tracking_uri=uri)
        if found is not None and run_dir is not None:
            name_pipeline_run(found.run_id, run_dir.name, tracking_uri=uri)
    except Exception as exc:  # a tracking server that went away: the run itself is done
        logging.getLogger(__name__).warning("could not read the run's MLflow run: %s", exc)
        return None
    return found


def _failure(error: str, log_path: Path) -> str:
    """One line for a failed run: the failed task and the last exception its log raised (a
    ``ConductorError`` says what to fix), instead of KFP's "Inner task failed"."""
    task = m.group(1) if (m := _FAILED_TASK.search(_ANSI.sub("", error))) else None
    raised = None
    for line in log_path.read_text(encoding="utf-8", errors="replace").splitlines():
        if m := _RAISED.match(_ANSI.sub("", line)):
            raised = m
    if raised is None:
        return error
    name, short, message = raised.groups()
    reason = message if name.startswith("conductor_core.") else f"{short}: {message}"
    return f"task '{task}' failed: {reason}" if task else reason


class _Tee(io.TextIOBase):
    def __init__(self, *streams: Any) -> None:
        self._streams = streams

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        for s in self._streams:
            s.write(text)
        return len(text)

    def flush(self) -> None:
        for s in self._streams:
            s.flush()


def read_comparison(run: LocalRun) -> dict[str, Any] | None:
    """The aggregate task's comparison table of a local run, if it got that far."""
    folder = run.output("aggregate", "comparison")
    if folder is None or not (folder / "comparison.json").is_file():
        return None
    return json.loads((folder / "comparison.json").read_text(encoding="utf-8"))
