"""The local sandbox backend: one subprocess per run, isolated as strongly as the host allows."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import selectors
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import PurePosixPath

from conductor_core.errors import ConfigError
from conductor_core.tasks.sandbox.isolation import (
    MODES,
    UID_BASE,
    UID_SPAN,
    available_modes,
    build_plan,
)
from conductor_core.tasks.sandbox.run_outcome import RunOutcome, classify, scrubbed_env, signal_of
from conductor_core.tasks.sandbox.types import SandboxLimits, SandboxResult
from conductor_core.tasks.sandbox.zygote import ISOLATION_TAGS, ZygotePool

ISOLATION_ENV = "CONDUCTOR_SANDBOX_ISOLATION"
FALLBACK_ENV = "CONDUCTOR_SANDBOX_FALLBACK"
"""What ``auto`` isolation does where no bubblewrap mode passes its self-test: ``refuse`` (the
default: running generated code raises :class:`ConfigError`) or ``limits-only`` (fall back to
``unshare``, with the host's files readable, else to ``rlimits``, with the network reachable
too; in both, other processes' environments stay unreadable, else the run is refused)."""
FALLBACKS = ("refuse", "limits-only")
# The modes that leave the host's files (rlimits: and the network) to the program: ``auto``
# takes one only with fallback ``limits-only``; forcing one is an explicit choice too.
WEAK_MODES = ("unshare", "rlimits")
# "zygote" (zygote.py) forks each run from a pre-started interpreter inside bubblewrap.
ALL_MODES = ("zygote", *MODES)
_READ_CHUNK = 65536
_EXIT_GRACE_S = 0.2
_uid_rng = random.SystemRandom()


def _check_files(files: dict[str, str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, content in (files or {}).items():
        path = PurePosixPath(name)
        if (
            not name
            or path.is_absolute()
            or ".." in path.parts
            or str(path) in (".", "main.py")
            or not isinstance(content, str)
        ):
            raise ValueError(
                f"sandbox files key {name!r} must be a relative path without '..' (not main.py) "
                "mapping to str content"
            )
        out[str(path)] = content
    return out


def _preexec(limits: SandboxLimits, seal: Callable[[], None] | None):
    """The child's work before exec: the mode's ``seal`` (first: the rlimits below would cap
    its allocations), then setrlimit (values computed here, outside the forked child)."""
    import resource

    cpu = max(1, int(limits.cpu_s + 0.999))
    mem = int(limits.memory_mb) * 1024 * 1024
    fsize = int(limits.file_size_mb) * 1024 * 1024
    nofile = int(limits.open_files)
    settings = [
        (resource.RLIMIT_CPU, (cpu, cpu + 1)),
        (resource.RLIMIT_AS, (mem, mem)),
        (resource.RLIMIT_FSIZE, (fsize, fsize)),
        (resource.RLIMIT_NOFILE, (nofile, nofile)),
        (resource.RLIMIT_CORE, (0, 0)),
    ]

    def apply() -> None:
        if seal is not None:
            seal()
        for which, value in settings:
            resource.setrlimit(which, value)

    return apply


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.returncode is not None:
        return  # already reaped: its pid may be reused, never signal it
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


def _exited(proc: subprocess.Popen) -> bool:
    """True once the child exited, WITHOUT reaping it: its pid (= process group id) stays
    reserved, so a later killpg can never hit an unrelated process that reused the pid."""
    if proc.returncode is not None:
        return True
    try:
        info = os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return True
    return info is not None


def _pump(
    proc: subprocess.Popen, marker_r: int, stdin: bytes, limits: SandboxLimits, start: float
) -> RunOutcome:
    """Feed stdin, read stdout/stderr incrementally, enforce the wall clock and output cap."""
    result = RunOutcome()
    deadline = start + float(limits.wall_s)
    sel = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    sel.register(proc.stdout, selectors.EVENT_READ, result.stdout)
    sel.register(proc.stderr, selectors.EVENT_READ, result.stderr)
    sel.register(marker_r, selectors.EVENT_READ, None)
    pending = memoryview(stdin)
    if pending:
        os.set_blocking(proc.stdin.fileno(), False)
        sel.register(proc.stdin, selectors.EVENT_WRITE, None)
    else:
        proc.stdin.close()
    exited_at: float | None = None
    try:
        while sel.get_map():
            now = time.monotonic()
            if now >= deadline:
                result.timed_out = True
                _kill_group(proc)
                break
            if exited_at is None and _exited(proc):
                exited_at = now
            if exited_at is not None and now - exited_at > _EXIT_GRACE_S:
                break  # something outside a namespace kept a pipe open: stop waiting for it
            for key, _ in sel.select(timeout=min(deadline - now, 0.05)):
                if key.fileobj is proc.stdin:
                    try:
                        sent = os.write(proc.stdin.fileno(), pending[:_READ_CHUNK])
                    except (BrokenPipeError, BlockingIOError, OSError):
                        sent = len(pending)
                    pending = pending[sent:]
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                fd = key.fileobj if isinstance(key.fileobj, int) else key.fileobj.fileno()
                chunk = os.read(fd, _READ_CHUNK)
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                if key.data is None:
                    result.marker = True
                    continue
                key.data.extend(chunk)
                if len(result.stdout) + len(result.stderr) > limits.output_bytes:
                    result.out_killed = True
                    _kill_group(proc)
                    break
            if result.out_killed:
                break
    finally:
        sel.close()
    return result


class LocalSandbox:
    """Runs programs on this host under the strongest isolation that passes its self-test.

    ``isolation`` is ``auto`` (default; or the ``CONDUCTOR_SANDBOX_ISOLATION`` env var) or one
    of ``zygote``, ``bwrap``, ``unshare``, ``rlimits`` to force a mode. ``fallback`` (default: the
    ``CONDUCTOR_SANDBOX_FALLBACK`` env var, else ``refuse``) says what ``auto`` does where no
    bubblewrap mode works (a container under Docker's default seccomp profile, a pod under
    Kubernetes' ``RuntimeDefault``): ``refuse`` makes every run raise :class:`ConfigError`
    naming the setting, ``limits-only`` takes ``unshare`` (host files readable) or ``rlimits``
    (resource limits only). Forcing ``unshare`` or ``rlimits`` is an explicit choice too and
    needs no ``fallback``. Every mode keeps other processes' environments (the grader's
    secrets) from the program, or raises :class:`ConfigError` (isolation.py). ``scratch_dir``
    is where modes that stage a program on the host make its private folder (default: the
    system temp folder).
    """

    name = "local"

    def __init__(
        self,
        isolation: str | None = None,
        *,
        scratch_dir: str | None = None,
        fallback: str | None = None,
    ) -> None:
        wanted = (isolation or os.environ.get(ISOLATION_ENV) or "auto").strip().lower()
        if wanted not in ("auto", *ALL_MODES):
            raise ConfigError(
                f"{ISOLATION_ENV} / isolation must be one of auto, {', '.join(ALL_MODES)}; "
                f"got {wanted!r}"
            )
        weak = (fallback or os.environ.get(FALLBACK_ENV) or "refuse").strip().lower()
        if weak not in FALLBACKS:
            raise ConfigError(
                f"{FALLBACK_ENV} / fallback must be one of {', '.join(FALLBACKS)}; got {weak!r}"
            )
        self.wanted = wanted
        self.fallback = weak
        self.scratch_dir = scratch_dir
        self._mode: str | None = None
        self._refusal: str | None = None
        self._zygotes = None  # ZygotePool, created on first zygote run
        self._probe_failures: dict[str, str] = {}
        self._lock = threading.Lock()
        self._zygote_lock = threading.Lock()

    # -- mode selection -------------------------------------------------------------------
    def mode(self) -> str:
        """The isolation mode in use (self-tested once per process).

        Raises :class:`ConfigError` (every time, without testing again) when ``auto`` finds no
        bubblewrap mode and ``fallback`` is ``refuse``, or no mode that keeps the grader's
        environment from the program.
        """
        with self._lock:
            if self._refusal is not None:
                raise ConfigError(self._refusal)
            if self._mode is None:
                self._mode = self._select()
            return self._mode

    def _select(self) -> str:
        auto = self.wanted == "auto"
        candidates = available_modes() if auto else [self.wanted]
        for mode in candidates:
            if auto and mode in WEAK_MODES and self.fallback != "limits-only":
                self._refusal = self._refusal_message()
                raise ConfigError(self._refusal)
            try:
                probe = self._run_in(
                    mode, "import os\nprint('sandbox-ok')\n", "", SandboxLimits(), {}
                )
            except ConfigError as exc:  # a mode that cannot keep the grader's environment away
                if not auto:
                    raise
                self._probe_failures[mode] = str(exc)
                continue
            if probe.status == "ok" and probe.stdout.strip() == "sandbox-ok":
                self._warn_fallback(mode)
                return mode
            self._probe_failures[mode] = probe.reason
        if not auto:
            raise ConfigError(
                f"sandbox isolation {self.wanted!r} failed its self-test on this host "
                f"({self._probe_failures.get(self.wanted, 'not available')}); "
                f"unset {ISOLATION_ENV} or install bubblewrap"
            )
        self._refusal = (
            "sandbox: no isolation mode works here ("
            + "; ".join(f"{m}: {why}" for m, why in self._probe_failures.items())
            + "); give the sandbox namespaces (docs/sandbox.md, 'Generated code in containers "
            "and pods')"
        )
        raise ConfigError(self._refusal)

    def _refusal_message(self) -> str:
        failures = "; ".join(f"{m}: {why}" for m, why in self._probe_failures.items())
        return (
            "sandbox: refusing to run generated code without bubblewrap (unshare would leave "
            "this machine's files readable, such as other runs' solutions and the model "
            "folder, and rlimits the network as well); "
            + (f"the bubblewrap modes failed here ({failures}). " if failures else "")
            + "Let the sandbox create namespaces (install bubblewrap; in a container or pod "
            "allow user namespaces: docs/sandbox.md, 'Generated code in containers and pods'), "
            f"or accept those weaker modes for trusted code with {FALLBACK_ENV}=limits-only "
            "(cluster settings: sandbox.isolation: limits-only on the pod kind)"
        )

    def _warn_fallback(self, mode: str) -> None:
        if self._probe_failures:
            logging.getLogger("conductor.sandbox").warning(
                "sandbox: falling back to %r isolation; stronger modes failed their self-test: %s",
                mode,
                self._probe_failures,
            )

    def report(self) -> dict:
        """What this host supports and what this backend uses (``mode: refused`` and the
        reason when ``auto`` found no namespaces and ``fallback`` is ``refuse``)."""
        try:
            mode = self.mode()
        except ConfigError:
            if self._refusal is None:
                raise
            return {
                "backend": self.name,
                "mode": "refused",
                "fallback": self.fallback,
                "refusal": self._refusal,
                "isolation": [],
                "available": available_modes(),
                "self_test_failures": dict(self._probe_failures),
                "running_as_root": os.geteuid() == 0,
            }
        if mode == "zygote":
            isolation = ISOLATION_TAGS
        else:
            isolation = build_plan(
                mode, SandboxLimits(), host_workdir="/tmp", file_fds={}, marker_fd=3, uid=UID_BASE
            ).isolation
        return {
            "backend": self.name,
            "mode": mode,
            "fallback": self.fallback,
            "isolation": list(isolation),
            "available": available_modes(),
            "self_test_failures": dict(self._probe_failures),
            "running_as_root": os.geteuid() == 0,
        }

    def _zygote_pool(self):
        with self._zygote_lock:
            if self._zygotes is None:
                self._zygotes = ZygotePool()
            return self._zygotes

    def close(self) -> None:
        """Stop this backend's zygotes and their spawner thread (zygote mode; the next zygote
        run starts a new pool); other modes hold nothing."""
        with self._zygote_lock:
            zygotes, self._zygotes = self._zygotes, None
        if zygotes is not None:
            zygotes.close()

    # -- one run ----------------------------------------------------------------------------
    def run(
        self,
        code: str,
        *,
        stdin: str = "",
        limits: SandboxLimits | None = None,
        files: dict[str, str] | None = None,
    ) -> SandboxResult:
        """Run ``code`` as ``main.py`` in a fresh working directory; never raises for the
        program's behaviour (a bad ``files`` argument raises ValueError)."""
        if not isinstance(code, str):
            raise ValueError("sandbox code must be a str containing the Python program")
        return self._run_in(self.mode(), code, stdin, limits or SandboxLimits(), files)

    def _run_in(
        self,
        mode: str,
        code: str,
        stdin: str,
        limits: SandboxLimits,
        files: dict[str, str] | None,
    ) -> SandboxResult:
        if mode == "zygote":
            return self._zygote_pool().run(code, stdin, limits, _check_files(files))
        staged = {"main.py": code, **_check_files(files)}
        host_dir = tempfile.mkdtemp(prefix="conductor-sbx-", dir=self.scratch_dir)
        fds: list[int] = []
        marker_r = marker_w = -1
        start = time.monotonic()
        isolation: tuple[str, ...] = (mode,)
        try:
            os.chmod(host_dir, 0o700)
            file_fds: dict[str, int] = {}
            for rel, content in staged.items():
                path = os.path.join(host_dir, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(content)
                if mode == "bwrap":
                    fd = os.open(path, os.O_RDONLY)
                    fds.append(fd)
                    file_fds[rel] = fd
            marker_r, marker_w = os.pipe()
            uid = UID_BASE + _uid_rng.randrange(UID_SPAN)
            plan = build_plan(
                mode,
                limits,
                host_workdir=host_dir,
                file_fds=file_fds,
                marker_fd=marker_w,
                uid=uid,
            )
            isolation = plan.isolation
            try:
                proc = subprocess.Popen(
                    plan.argv,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    cwd=host_dir,
                    env=scrubbed_env(plan.workdir_inside),
                    pass_fds=(marker_w, *fds),
                    start_new_session=True,
                    preexec_fn=_preexec(limits, plan.preexec),
                )
            except (OSError, subprocess.SubprocessError) as exc:  # the latter: preexec failed
                return SandboxResult(
                    "sandbox_error", None, "", "", 0.0, f"could not start sandbox: {exc}", isolation
                )
            os.close(marker_w)
            marker_w = -1
            for fd in fds:
                os.close(fd)
            fds = []
            try:
                out = _pump(proc, marker_r, stdin.encode("utf-8"), limits, start)
            finally:
                _kill_group(proc)  # also reaps anything left in the group
                proc.wait()
                for stream in (proc.stdout, proc.stderr, proc.stdin):
                    if stream is not None:
                        stream.close()
            wall = time.monotonic() - start
            rc = proc.returncode
            status, reason = classify(out, rc, limits, mode)
            sig = signal_of(rc, mode) if rc is not None else None
            returncode = -sig if sig is not None else rc
            if status == "sandbox_error":
                returncode = None
            return SandboxResult(
                status,
                returncode,
                out.stdout[: limits.output_bytes].decode("utf-8", "replace"),
                out.stderr[: limits.output_bytes].decode("utf-8", "replace"),
                round(wall, 4),
                reason,
                isolation,
            )
        finally:
            for fd in (*fds, marker_r, marker_w):
                if fd >= 0:
                    os.close(fd)
            shutil.rmtree(host_dir, ignore_errors=True)
