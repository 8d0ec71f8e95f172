"""What a test leaves behind in the test process: threads, child processes, listening sockets,
an open event loop, environment variables, MLflow's process-wide state and files in the working
directory.

``tests/conftest.py`` snapshots these before every test (after its higher-scoped fixtures are
set up, so a session server is not counted) and fails the test if something new is still there
after its teardown. Threads and processes get a short grace period to finish on their own.
What the library keeps for the whole process by design is closed first
(:func:`close_process_caches`).
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time
from dataclasses import dataclass, field

GRACE_S = 3.0
# Set by pytest itself, per phase.
_PYTEST_ENV = frozenset({"PYTEST_CURRENT_TEST"})
# Threads that libraries start once and keep for the whole process, with no public way to stop
# them: MLflow's pools for artifact copies and uploads (one per artifact repository class),
# tqdm's one monitor thread for all progress bars.
LIBRARY_THREADS = ("MlflowLocalArtifactRepository", "MlflowS3ArtifactRepository", "tqdm_monitor")
_POLL_S = 0.05


@dataclass(frozen=True)
class Snapshot:
    """The process-wide state a test must leave as it found it."""

    threads: frozenset[tuple[int, str]]
    children: frozenset[tuple[int, str]]
    listeners: frozenset[str]
    event_loop: bool
    environ: tuple[tuple[str, str], ...]
    mlflow: tuple[tuple[str, str], ...] = field(default=())
    workdir: frozenset[str] = field(default=frozenset())


def _threads() -> frozenset[tuple[int, str]]:
    main = threading.main_thread()
    return frozenset(
        (t.ident or 0, t.name)
        for t in threading.enumerate()
        if t is not main and t.is_alive() and not t.name.startswith(LIBRARY_THREADS)
    )


def _children() -> frozenset[tuple[int, str]]:
    import psutil

    out = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            out.add((proc.pid, " ".join(proc.cmdline())[:160] or proc.name()))
        except psutil.Error:  # ended while we looked
            continue
    return frozenset(out)


def _listeners() -> frozenset[str]:
    import psutil

    try:
        conns = psutil.Process().net_connections(kind="inet")
    except psutil.Error:
        return frozenset()
    return frozenset(
        f"{c.laddr.ip}:{c.laddr.port}" for c in conns if c.status == psutil.CONN_LISTEN
    )


def _open_event_loop() -> bool:
    """Whether the main thread has a current event loop that is still open (a test that set one
    and did not close it)."""
    local = getattr(asyncio.get_event_loop_policy(), "_local", None)
    loop = getattr(local, "_loop", None)
    return loop is not None and not loop.is_closed()


# What the test session may add to the checkout: the vLLM CPU venv that
# tests/support/vllm_server.py installs with scripts/setup_vllm_cpu.sh.
SETUP_OUTPUTS = frozenset({".venv-vllm"})


def _workdir() -> frozenset[str]:
    """The names in the current directory (the checkout, for ``make test``): tests write to
    their ``tmp_path``."""
    try:
        return frozenset(os.listdir(".")) - SETUP_OUTPUTS
    except OSError:
        return frozenset()


def _mlflow_state() -> tuple[tuple[str, str], ...]:
    """MLflow's process-wide tracking URI and active runs, where MLflow is imported."""
    if "mlflow" not in sys.modules:
        return ()
    import mlflow

    from_env = os.environ.get("MLFLOW_TRACKING_URI")
    utils = sys.modules.get("mlflow.tracking._tracking_service.utils")
    set_uri = getattr(utils, "_tracking_uri", None)
    state = [("set_tracking_uri", str(set_uri))] if set_uri and set_uri != from_env else []
    run = mlflow.active_run()
    if run is not None:
        state.append(("active_run", run.info.run_id))
    return tuple(state)


def snapshot() -> Snapshot:
    """The current state."""
    return Snapshot(
        threads=_threads(),
        children=_children(),
        listeners=_listeners(),
        event_loop=_open_event_loop(),
        environ=tuple(sorted(os.environ.items())),
        mlflow=_mlflow_state(),
        workdir=_workdir(),
    )


def left_behind(before: Snapshot, after: Snapshot) -> list[str]:
    """What ``after`` has that ``before`` had not, one line each (values of environment
    variables are not shown: they may be secrets)."""
    lines = [f"thread {name!r}" for _, name in sorted(after.threads - before.threads)]
    new_children = sorted(after.children - before.children)
    lines += [f"child process {pid}: {cmd}" for pid, cmd in new_children]
    lines += [f"listening socket {addr}" for addr in sorted(after.listeners - before.listeners)]
    if after.event_loop and not before.event_loop:
        lines.append("an open event loop set as the main thread's current loop")
    env_before, env_after = dict(before.environ), dict(after.environ)
    changed = sorted(
        k
        for k in env_before.keys() | env_after.keys()
        if env_before.get(k) != env_after.get(k) and k not in _PYTEST_ENV
    )
    lines += [f"environment variable {k} changed" for k in changed]
    lines += [f"mlflow {k} = {v}" for k, v in sorted(set(after.mlflow) - set(before.mlflow))]
    lines += [
        f"file {name!r} in the working directory" for name in sorted(after.workdir - before.workdir)
    ]
    return lines


def close_process_caches() -> None:
    """Close what the library keeps running for the whole process by design (the default code
    sandbox's zygotes), so that a test that started it is checked for what closing leaves."""
    backend = sys.modules.get("conductor_core.tasks.sandbox.backend")
    if backend is not None:
        backend.close_backend()


def settled_leaks(before: Snapshot, grace_s: float = GRACE_S) -> list[str]:
    """:func:`left_behind` after waiting up to ``grace_s`` for threads and processes that are
    ending on their own."""
    deadline = time.monotonic() + grace_s
    while True:
        leaks = left_behind(before, snapshot())
        if not leaks or time.monotonic() >= deadline:
            return leaks
        time.sleep(_POLL_S)
