"""The ``zygote`` isolation mode: one pre-started interpreter per slot, forked per run.

Per concurrency slot the host starts ONE long-lived Python process ("zygote") inside bubblewrap
(read-only system, no network, PID/IPC/UTS/mount namespaces, ``--die-with-parent``), as root
inside so it can drop privileges. The zygote never runs a program and never reads one: it
pre-forks a *runner* that receives the next request (program, files, limits, env and the
stdin/stdout/stderr pipes as file descriptors), so the zygote's memory holds no run's data and a
run can never see a previous run's program, stdin or files. Per run:

* the runner unshares fresh mount, PID, IPC and UTS namespaces and mounts two private tmpfs
  (``/sandbox`` owned by the run's uid and ``/tmp``), each capped at ``limits.tmpfs_mb``;
* it forks ``init`` (pid 1 of the new PID namespace, root, mounts a fresh ``/proc``), which forks
  the program process: new session, ``setgroups([])``/``setgid``/``setuid`` to a fresh random uid
  in ``[UID_BASE, UID_BASE + UID_SPAN)``, rlimits (CPU, AS, NPROC, FSIZE, NOFILE, CORE=0), stdio on
  the host's pipes, every other descriptor closed, scrubbed environment, then the program is
  compiled and executed in-process as ``__main__`` (no new interpreter start-up);
* the runner enforces the wall clock (or an output-cap kill from the host) by SIGKILLing ``init``:
  the kernel then kills every process of the run's PID namespace, daemonized or not, and the
  tmpfs mounts vanish with the namespace; the runner reports the wait status and exits.

If a zygote dies or misbehaves the run is reported as ``sandbox_error`` (never a pass) and the
zygote is replaced. This file is also the zygote's program (run with ``python -I -S -B -c``), so
its module-level imports are standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import struct
import sys
import time

SANDBOX_DIR = "/sandbox"
UID_BASE = 0x3F000000  # same range as isolation.UID_BASE (kept import-free for the zygote)
UID_SPAN = 1 << 24
PRELOAD = ("typing", "math", "re", "collections", "itertools", "functools", "heapq", "bisect")
PRELOAD += ("string", "operator", "copy", "dataclasses", "enum", "fractions", "decimal")
PRELOAD += ("io", "traceback", "types", "atexit", "importlib", "threading", "ctypes")
ISOLATION_TAGS = (
    "zygote",
    "bwrap",
    "mount-ns",
    "pid-ns",
    "ipc-ns",
    "uts-ns",
    "net-ns",
    "ro-system",
    "tmpfs-workdir",
    "per-run-namespaces",
    "rlimits",
    "process-group",
    "env-allowlist",  # isolation.ENV_TAGS (kept import-free for the zygote)
    "host-environ-unreadable",
    "own-uid",
    "nproc-limit",
)
_HEADER = struct.Struct(">cI")  # kind (b"Q" request, b"R" report), payload length
_READY = b"ZYGOTE-READY\n"
_SETUP_FAILED = 121
_START_TIMEOUT_S = 20.0
_BACKSTOP_S = 5.0
_DRAIN_S = 1.0
_READ_CHUNK = 65536

# Linux constants (not all exposed by the os module on Python 3.11).
_CLONE_NEWNS, _CLONE_NEWUTS = 0x20000, 0x4000000
_CLONE_NEWIPC, _CLONE_NEWPID = 0x8000000, 0x20000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 1, 2, 4, 8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 32, 4096, 16384, 1 << 18


# ---------------------------------------------------------------------------------------------
# Inside the sandbox: the zygote, its per-run runner, init and program processes.
# ---------------------------------------------------------------------------------------------
def _libc():
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _check(ret: int, what: str) -> None:
    if ret != 0:
        import ctypes

        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _mount(libc, src: str | None, dst: str, fstype: str | None, flags: int, data: str | None):
    enc = [None if v is None else v.encode() for v in (src, dst, fstype, data)]
    _check(libc.mount(enc[0], enc[1], enc[2], flags, enc[3]), f"mount {dst}")


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("control socket closed")
        buf.extend(chunk)
    return bytes(buf)


def _send_msg(sock: socket.socket, kind: bytes, obj: dict) -> None:
    payload = json.dumps(obj).encode()
    sock.sendall(_HEADER.pack(kind, len(payload)) + payload)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):  # the program may have broken sys.stderr
        sys.stderr.write(f"{code}\n")
    return 1


def _program(status_w: int, fds: list[int], req: dict, uid: int) -> None:
    """The run's program process (pid 2 of the run's PID namespace): drop, limit, execute."""
    import resource

    try:
        os.setsid()
        for target, fd in enumerate(fds[:3]):
            os.dup2(fd, target)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        if os.getuid() == 0 or os.geteuid() == 0 or os.getgid() == 0:
            os._exit(_SETUP_FAILED)
        lim = req["limits"]
        nproc = int(lim["max_processes"])
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        for rel, content in [("main.py", req["code"]), *sorted(req["files"].items())]:
            path = os.path.join(SANDBOX_DIR, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(content)
        cpu = max(1, int(float(lim["cpu_s"]) + 0.999))
        mem = int(lim["memory_mb"]) * 1024 * 1024
        fsize = int(lim["file_size_mb"]) * 1024 * 1024
        nofile = int(lim["open_files"])
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        os.chdir(SANDBOX_DIR)
        os.environ.clear()
        os.environ.update(req["env"])
        os.write(status_w, b"S")
        os.closerange(3, 1 << 16)
        resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    except BaseException as exc:  # report any setup failure, then die
        os.write(2, f"zygote setup failed: {type(exc).__name__}: {exc}\n".encode())
        os._exit(_SETUP_FAILED)
    os._exit(_execute(req["code"]))


def _execute(source: str) -> int:
    """Run ``source`` as ``__main__`` like ``python main.py`` would; return the exit code."""
    import atexit
    import builtins
    import importlib
    import io
    import types

    atexit._clear()
    # The program's own standard streams, as a fresh interpreter would create them.
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", False)), encoding="utf-8"
    )
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", False)), encoding="utf-8"
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    if "random" in sys.modules:
        sys.modules["random"].seed()
    path = os.path.join(SANDBOX_DIR, "main.py")
    sys.argv = ["main.py"]
    sys.path.insert(0, SANDBOX_DIR)
    importlib.invalidate_caches()
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__builtins__ = builtins
    sys.modules["__main__"] = main
    try:
        exec(compile(source, path, "exec"), main.__dict__)
        rc = 0
    except SystemExit as exc:
        rc = _exit_code(exc)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())
        rc = 128 + signal.SIGINT
    except BaseException:  # the interpreter's own top-level behaviour
        try:
            sys.excepthook(*sys.exc_info())
        except BaseException:
            os.write(2, f"{sys.exc_info()[0].__name__}\n".encode())
        rc = 1
    try:
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except SystemExit as exc:
        rc = _exit_code(exc)
    except BaseException:  # e.g. flushing into a closed pipe
        rc = rc or 120
    return rc


def _init(status_w: int, fds: list[int], req: dict, uid: int) -> None:
    """pid 1 of the run's PID namespace: fresh /proc, start the program, reap, report."""
    libc = _libc()
    try:
        _mount(libc, "proc", "/proc", "proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
        _mount(libc, "/proc/sys", "/proc/sys", None, _MS_BIND | _MS_REC, None)
        flags = _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
        _mount(libc, None, "/proc/sys", None, flags, None)
        child = os.fork()
    except BaseException as exc:
        os.write(fds[2], f"zygote init failed: {type(exc).__name__}: {exc}\n".encode())
        os._exit(_SETUP_FAILED)
    if child == 0:
        _program(status_w, fds, req, uid)
    for fd in fds:
        os.close(fd)
    status = 0
    while True:
        try:
            pid, st = os.waitpid(-1, 0)
        except ChildProcessError:
            break
        if pid == child:
            status = st
            break
    os.write(status_w, b"X" + struct.pack(">I", status))
    os._exit(0)


def _runner(sock: socket.socket) -> None:
    """Receive one request, run it in fresh namespaces, report, exit (a fork of the zygote)."""
    try:
        msg, fds, _flags, _addr = socket.recv_fds(sock, _HEADER.size, 8)
        if not msg:
            os._exit(3)
        msg += _recv_exact(sock, _HEADER.size - len(msg))
        kind, size = _HEADER.unpack(msg)
        req = json.loads(_recv_exact(sock, size))
        if kind != b"Q" or len(fds) != 4:
            raise ValueError(f"bad request ({kind!r}, {len(fds)} fds)")
    except EOFError:
        os._exit(3)
    start = time.monotonic()
    report: dict = {"marker": False, "status": None, "timed_out": False, "error": None}
    kill_r = fds[3]
    try:
        wall = float(req["limits"]["wall_s"])
        uid = UID_BASE + int.from_bytes(os.urandom(4), "big") % UID_SPAN
        libc = _libc()
        ns = _CLONE_NEWNS | _CLONE_NEWPID | _CLONE_NEWIPC | _CLONE_NEWUTS
        _check(libc.unshare(ns), "unshare")
        _mount(libc, None, "/", None, _MS_REC | _MS_PRIVATE, None)
        size = int(req["tmpfs_bytes"])
        opts = f"size={size},uid={uid},gid={uid}"
        _mount(libc, "tmpfs", SANDBOX_DIR, "tmpfs", _MS_NOSUID | _MS_NODEV, opts + ",mode=0700")
        _mount(libc, "tmpfs", "/tmp", "tmpfs", _MS_NOSUID | _MS_NODEV, opts + ",mode=1777")
        for stash, dest in _TMP_ROOTS:  # Python roots under /tmp (e.g. a CI checkout's venv)
            os.makedirs(dest, mode=0o755, exist_ok=True)
            _mount(libc, stash, dest, None, _MS_BIND | _MS_REC, None)
            _mount(libc, None, dest, None, _MS_REMOUNT | _MS_BIND | _MS_RDONLY, None)
        status_r, status_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            sock.close()
            os.close(status_r)
            os.close(kill_r)
            _init(status_w, fds[:3], req, uid)
        os.close(status_w)
        for fd in fds[:3]:
            os.close(fd)
        got = bytearray()
        deadline = start + wall
        open_fds = [status_r, kill_r]
        while status_r in open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                report["timed_out"] = True
                break
            ready, _, _ = select.select(open_fds, [], [], left)
            if kill_r in ready:
                break  # the host asked for a kill (output cap) or went away
            if status_r in ready:
                chunk = os.read(status_r, 64)
                if not chunk:
                    open_fds.remove(status_r)
                got.extend(chunk)
        if status_r in open_fds:
            os.kill(pid, signal.SIGKILL)  # pid 1 of the run: the kernel kills the whole run
        os.waitpid(pid, 0)
        report["marker"] = got.startswith(b"S")
        at = got.find(b"X")
        if at >= 0 and len(got) >= at + 5:
            report["status"] = struct.unpack(">I", bytes(got[at + 1 : at + 5]))[0]
    except BaseException as exc:  # report the infrastructure failure
        report["error"] = f"{type(exc).__name__}: {exc}"
    _send_msg(sock, b"R", report)
    os._exit(0)


_TMP_ROOTS: list[tuple[str, str]] = []


def _serve(sock_fd: int, site: list[str], tmp_roots: list[tuple[str, str]] = ()) -> None:
    """The zygote's loop: pre-fork a runner, wait for it, repeat; never run a program itself.

    ``tmp_roots`` are (stash, path) pairs of Python roots that live under /tmp: each run mounts
    a fresh tmpfs on /tmp, then binds them back read-only from their stash.
    """
    _TMP_ROOTS[:] = list(tmp_roots)
    sys.path.extend(site)
    for name in PRELOAD:
        with contextlib.suppress(ImportError):
            __import__(name)
    sock = socket.socket(fileno=sock_fd)
    sock.sendall(_READY)
    devnull = os.open("/dev/null", os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    while True:
        pid = os.fork()
        if pid == 0:
            try:
                _runner(sock)
            finally:
                os._exit(4)
        _, status = os.waitpid(pid, 0)
        code = os.waitstatus_to_exitcode(status)
        if code == 3:
            return  # the host closed the control socket
        if code != 0:
            try:
                _send_msg(sock, b"R", {"error": f"zygote runner died (exit {code})"})
            except OSError:
                return


# ---------------------------------------------------------------------------------------------
# On the host: a pool of zygotes, one per concurrent run.
# ---------------------------------------------------------------------------------------------
def zygote_supported() -> bool:
    """True when the mode can work here: bubblewrap present and the host runs as root (the
    zygote must switch each run to its own uid, which a single-uid user namespace cannot)."""
    import shutil

    return os.geteuid() == 0 and shutil.which("bwrap") is not None and sys.platform == "linux"


class _Zygote:
    """One running zygote: its bwrap process and the host end of its control socket."""

    def __init__(self) -> None:
        import subprocess

        # lazy: this file is also the zygote's program (python -I -S), stdlib only at the top
        from conductor_core.tasks.sandbox.isolation import bwrap_argv, python_roots, site_dirs
        from conductor_core.tasks.sandbox.run_outcome import scrubbed_env
        from conductor_core.tasks.sandbox.types import SandboxLimits

        with open(__file__, encoding="utf-8") as fh:
            source = fh.read()
        host, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        argv = bwrap_argv(SandboxLimits(), {})
        tmp_roots = [r for r in python_roots() if r == "/tmp" or r.startswith("/tmp/")]
        stashes = [(f"/.conductor-pyroot-{i}", root) for i, root in enumerate(tmp_roots)]
        binds = [x for stash, root in stashes for x in ("--ro-bind", root, stash)]
        argv[-1:-1] = binds  # before bwrap's closing "--"
        argv += [sys.executable, "-I", "-S", "-B", "-c", source, "serve", str(child.fileno())]
        argv += [os.pathsep.join(site_dirs()), json.dumps(stashes)]
        self.sock = host
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd="/",
            env=scrubbed_env(SANDBOX_DIR),
            pass_fds=(child.fileno(),),
            start_new_session=True,
        )
        child.close()
        try:
            self._await_ready()
        except BaseException:
            self.close()
            raise

    def _await_ready(self) -> None:
        got = b""
        deadline = time.monotonic() + _START_TIMEOUT_S
        while not got.endswith(_READY):
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.sock], [], [], max(0.0, left))
            chunk = self.sock.recv(64) if ready else b""
            if not chunk:
                err = b""
                if self.proc.stderr is not None and self.proc.poll() is not None:
                    err = self.proc.stderr.read()[-300:]
                why = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no answer"]
                raise OSError(f"zygote did not start: {why[0]}")
            got += chunk

    def alive(self) -> bool:
        """True while the zygote process runs."""
        return self.proc.poll() is None

    def close(self) -> None:
        """Kill the zygote (and with it every run inside) and release its resources."""
        import contextlib

        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self.sock.close()


class _Pump:
    """Host side of one run: feed stdin, collect output under the cap, read the report."""

    def __init__(self, z: _Zygote, stdin: bytes, out_cap: int) -> None:
        self.z = z
        self.stdin = memoryview(stdin)
        self.cap = out_cap
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.out_killed = False
        self.report: dict | None = None
        self.broken = ""
        self.stdin_closed = False
        self._raw = bytearray()

    def _take_report(self) -> bool:
        if len(self._raw) < _HEADER.size:
            return False
        kind, size = _HEADER.unpack(bytes(self._raw[: _HEADER.size]))
        if kind != b"R":
            self.broken = f"zygote sent an unexpected message {kind!r}"
            return True
        if len(self._raw) < _HEADER.size + size:
            return False
        try:
            self.report = json.loads(bytes(self._raw[_HEADER.size : _HEADER.size + size]))
        except ValueError:
            self.broken = "zygote sent a malformed report"
        return True

    def run(self, in_w: int, out_r: int, err_r: int, kill_w: int, backstop: float) -> None:
        """Loop until the report arrived and output reached EOF (or the backstop passed)."""
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(out_r, selectors.EVENT_READ, self.stdout)
        sel.register(err_r, selectors.EVENT_READ, self.stderr)
        sel.register(self.z.sock, selectors.EVENT_READ, "report")
        if self.stdin:
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE, "stdin")
        else:
            self._close_stdin(in_w)
        drain_until: float | None = None
        try:
            while True:
                now = time.monotonic()
                outputs = [k for k in sel.get_map().values() if isinstance(k.data, bytearray)]
                done = self.report is not None or self.broken
                if done and (not outputs or (drain_until is not None and now > drain_until)):
                    return
                if now > backstop:
                    self.broken = "zygote gave no report in time"
                    return
                for key, _ in sel.select(timeout=min(backstop - now, 0.25)):
                    self._event(sel, key, in_w, kill_w)
                if (self.report is not None or self.broken) and drain_until is None:
                    drain_until = time.monotonic() + _DRAIN_S
        finally:
            sel.close()

    def _close_stdin(self, in_w: int) -> None:
        """EOF for the program's stdin once everything was written."""
        os.close(in_w)
        self.stdin_closed = True

    def _event(self, sel, key, in_w: int, kill_w: int) -> None:
        if key.data == "stdin":
            try:
                sent = os.write(in_w, self.stdin[:_READ_CHUNK])
            except (BlockingIOError, OSError):
                sent = len(self.stdin)
            self.stdin = self.stdin[sent:]
            if not self.stdin:
                sel.unregister(in_w)
                self._close_stdin(in_w)
            return
        if key.data == "report":
            chunk = self.z.sock.recv(_READ_CHUNK)
            if not chunk:
                self.broken = self.broken or "zygote closed its control socket"
                sel.unregister(self.z.sock)
                return
            self._raw.extend(chunk)
            if self._take_report():
                sel.unregister(self.z.sock)
            return
        chunk = os.read(key.fileobj, _READ_CHUNK)
        if not chunk:
            sel.unregister(key.fileobj)
            return
        if self.out_killed:
            return
        key.data.extend(chunk)
        if len(self.stdout) + len(self.stderr) > self.cap:
            self.out_killed = True
            with contextlib.suppress(OSError):
                os.write(kill_w, b"K")


class ZygotePool:
    """Runs programs in zygotes; thread-safe; one zygote per concurrently running program.

    Zygotes are started on demand from a dedicated long-lived thread (bwrap's
    ``--die-with-parent`` follows the *thread* that started it), reused while healthy, and
    replaced after any failure. ``keep_idle`` bounds how many idle zygotes are kept.
    """

    def __init__(self, keep_idle: int = 16) -> None:
        import threading
        from concurrent.futures import ThreadPoolExecutor

        self.keep_idle = keep_idle
        self._idle: list[_Zygote] = []
        self._lock = threading.Lock()
        self._closed = False
        self._spawner = ThreadPoolExecutor(max_workers=4, thread_name_prefix="sandbox-zygote")

    def _acquire(self) -> _Zygote:
        with self._lock:
            while self._idle:
                z = self._idle.pop()
                if z.alive():
                    return z
                z.close()
        return self._spawner.submit(_Zygote).result()

    def _release(self, z: _Zygote, healthy: bool) -> None:
        if healthy and z.alive():
            with self._lock:
                if not self._closed and len(self._idle) < self.keep_idle:
                    self._idle.append(z)
                    return
        z.close()

    def close(self) -> None:
        """Stop every idle zygote and the spawner thread; running zygotes stop when their run
        returns. A closed pool starts no zygote: its runs are ``sandbox_error``."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for z in idle:
            z.close()
        # Zygotes die with the thread that started them (--die-with-parent), so the spawner
        # ends only once none is idle.
        self._spawner.shutdown(wait=True)

    def run(self, code: str, stdin: str, limits, files: dict[str, str]):
        """Run one program (``limits``: SandboxLimits, ``files`` already validated) and return
        a SandboxResult; infrastructure failures give ``sandbox_error``."""
        # lazy: this file is also the zygote's program (python -I -S), stdlib only at the top
        from conductor_core.tasks.sandbox.run_outcome import RunOutcome, classify, scrubbed_env
        from conductor_core.tasks.sandbox.types import SandboxResult

        start = time.monotonic()
        tags = ISOLATION_TAGS

        def infra(reason: str) -> SandboxResult:
            wall = round(time.monotonic() - start, 4)
            return SandboxResult("sandbox_error", None, "", "", wall, reason, tags)

        try:
            z = self._acquire()
        except Exception as exc:  # any start failure is the sandbox's
            return infra(f"could not start a sandbox zygote: {exc}")
        start = time.monotonic()
        req = {
            "code": code,
            "files": files,
            "limits": {k: v for k, v in vars(limits).items()},
            "tmpfs_bytes": limits.tmpfs_mb * 1024 * 1024,
            "env": scrubbed_env(SANDBOX_DIR),
        }
        payload = json.dumps(req).encode()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        kill_r, kill_w = os.pipe()
        pump = _Pump(z, stdin.encode("utf-8"), int(limits.output_bytes))
        try:
            try:
                socket.send_fds(
                    z.sock, [_HEADER.pack(b"Q", len(payload))], [in_r, out_w, err_w, kill_r]
                )
                z.sock.sendall(payload)
            except OSError as exc:
                pump.broken = f"could not send the program to the zygote: {exc}"
            for fd in (in_r, out_w, err_w, kill_r):
                os.close(fd)
            in_r = out_w = err_w = kill_r = -1
            if not pump.broken:
                pump.run(in_w, out_r, err_r, kill_w, start + float(limits.wall_s) + _BACKSTOP_S)
        finally:
            if pump.stdin_closed:
                in_w = -1
            for fd in (in_r, in_w, out_r, out_w, err_r, err_w, kill_r, kill_w):
                if fd >= 0:
                    os.close(fd)
        report = pump.report or {}
        if pump.broken or report.get("error"):
            self._release(z, False)
            return infra(f"zygote sandbox failed: {pump.broken or report['error']}")
        self._release(z, True)
        out = RunOutcome()
        out.stdout, out.stderr = pump.stdout, pump.stderr
        out.marker = bool(report.get("marker"))
        out.timed_out = bool(report.get("timed_out")) and not pump.out_killed
        out.out_killed = pump.out_killed
        raw = report.get("status")
        rc = os.waitstatus_to_exitcode(raw) if isinstance(raw, int) else None
        if rc is None and not out.timed_out and not out.out_killed and out.marker:
            return infra("zygote reported no exit status for the program")
        status, reason = classify(out, rc, limits, "zygote")
        return SandboxResult(
            status,
            None if status == "sandbox_error" else rc,
            out.stdout[: limits.output_bytes].decode("utf-8", "replace"),
            out.stderr[: limits.output_bytes].decode("utf-8", "replace"),
            round(time.monotonic() - start, 4),
            reason,
            tags,
        )


if __name__ == "__main__" and len(sys.argv) >= 3 and sys.argv[1] == "serve":
    _serve(
        int(sys.argv[2]),
        [p for p in sys.argv[3].split(os.pathsep) if p],
        [tuple(pair) for pair in json.loads(sys.argv[4])] if len(sys.argv) > 4 else [],
    )
