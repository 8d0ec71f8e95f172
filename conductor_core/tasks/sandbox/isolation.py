"""How a run is isolated on this host: bubblewrap, unshare(1), or plain rlimits.

The sandboxed program always runs as ``python -I -S -B -c BOOTSTRAP CONFIG``. The bootstrap
(below) drops to the run's own unprivileged uid when it starts as real root, sets
RLIMIT_NPROC (which only binds a non-root uid or a fresh user namespace), reports that it
started on a marker pipe, and executes ``main.py`` as ``__main__`` from the working directory
(which is first on ``sys.path``, so helper files given as ``files`` import).

Without a PID namespace (``rlimits``) the program shares ``/proc`` with the grader, PID 1 of
the pod and every other process: their environments hold the pod's secrets. There the
program runs under its own uid or in its own Landlock domain (or both), which the kernel's
ptrace check (``/proc/PID/environ``, ``mem``, ``maps``, ``fd``) refuses for every process
outside it; a host that offers neither gets :class:`ConfigError`. Under ``unshare`` the host's
``/proc`` lies beneath the run's own: a program holding CAP_SYS_ADMIN could unmount the latter,
so there it runs without capabilities (its own uid as root, the grader's uid mapped to itself
otherwise). In both modes the bootstrap checks this on every run before the program starts.
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import struct
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conductor_core.errors import ConfigError
from conductor_core.tasks.sandbox.types import SandboxLimits

MODES = ("bwrap", "unshare", "rlimits")
SANDBOX_DIR = "/sandbox"
# Each run gets its own uid in this range (never a real account): RLIMIT_NPROC then counts
# only that run's tasks, so one run's fork bomb cannot starve another run.
UID_BASE = 0x3F000000
UID_SPAN = 1 << 24

# Tags of every mode: the program's own environment is an allow-list (outcome.scrubbed_env),
# and no other process's environment or memory (the grader's, PID 1's, other runs') can be read.
ENV_TAGS = ("env-allowlist", "host-environ-unreadable")

# Kept import-light (no json/runpy: ~30 ms per run). argv: uid nproc marker workdir chown site
# seal-check (lists joined with os.pathsep). With seal-check 1 (unshare, rlimits: the host's
# /proc is shared or mounted beneath the run's) the run stops before the program when it would
# hold a capability or could read its parent's environment: build_plan's seal verified on
# every run, not assumed. (Under unshare the bootstrap is PID 1 of its namespace, its parent 0:
# there the capability test is the one that bites; the environ probe is rlimits' check.)
BOOTSTRAP = r"""
import os, resource, sys
_uid, _nproc, _marker = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
_workdir = sys.argv[4]
_chown = [p for p in sys.argv[5].split(os.pathsep) if p]
if _uid and os.geteuid() == 0:
    for _root, _dirs, _files in os.walk(_chown[0]):
        for _n in _dirs + _files:
            os.lchown(os.path.join(_root, _n), _uid, _uid)
    for _p in _chown:
        os.chown(_p, _uid, _uid)
    os.setgroups([])
    os.setgid(_uid)
    os.setuid(_uid)
    if os.getuid() == 0 or os.geteuid() == 0:
        sys.exit(121)
if sys.argv[7] == "1":
    with open("/proc/self/status") as _fh:
        if any(_l.startswith("CapEff:") and int(_l.split()[1], 16) for _l in _fh):
            os.write(2, b"sandbox: the program would hold capabilities; not run\n")
            sys.exit(121)
    try:
        open("/proc/%d/environ" % os.getppid(), "rb").close()
    except OSError:
        pass
    else:
        os.write(2, b"sandbox: the program could read the grader's environment; not run\n")
        sys.exit(121)
if _nproc:
    resource.setrlimit(resource.RLIMIT_NPROC, (_nproc, _nproc))
os.write(_marker, b"1")
os.close(_marker)
os.chdir(_workdir)
sys.path[:0] = [_workdir]
sys.path.extend(p for p in sys.argv[6].split(os.pathsep) if p)
sys.argv = ["main.py"]
_path = os.path.join(_workdir, "main.py")
with open(_path, encoding="utf-8") as _fh:
    _code = compile(_fh.read(), _path, "exec")
_main = type(sys)("__main__")
_main.__file__ = _path
_main.__builtins__ = __builtins__
sys.modules["__main__"] = _main
exec(_code, _main.__dict__)
"""


@dataclass(frozen=True)
class Plan:
    """The command of one run, what it guarantees, and what the forked child must do before
    exec for that (``preexec``: the rlimits mode's seal; ``None`` elsewhere)."""

    argv: list[str]
    workdir_inside: str
    isolation: tuple[str, ...]
    preexec: Callable[[], None] | None = None


def _is_root() -> bool:
    return os.geteuid() == 0


def python_executable() -> str:
    """The interpreter used inside the sandbox (the current one, so the venv's packages load)."""
    return sys.executable


def site_dirs() -> list[str]:
    """The site-packages directories of the current interpreter (added to ``sys.path`` inside;
    the sandbox runs Python with ``-S``, so ``.pth`` files such as editable installs are not
    processed: that saves ~50 ms per run and keeps the repository out of reach)."""
    seen: list[str] = []
    for entry in sys.path:
        is_site = entry.rstrip("/").endswith(("site-packages", "dist-packages"))
        if entry and is_site and os.path.isdir(entry) and entry not in seen:
            seen.append(entry)
    return seen


def python_roots() -> list[str]:
    """Directories the interpreter needs (prefixes and site-packages), outermost only."""
    candidates = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        str(Path(os.path.realpath(sys.executable)).parent.parent),
    }
    candidates.update(site_dirs())
    real = sorted({os.path.realpath(c) for c in candidates if c and os.path.isdir(c)})
    roots: list[str] = []
    for path in real:
        if path.startswith("/usr/") or path == "/usr":
            continue
        if not any(path == r or path.startswith(r + "/") for r in roots):
            roots.append(path)
    return roots


def world_traversable(path: str) -> bool:
    """True when every directory on ``path`` lets other users through (mode o+x)."""
    p = Path(os.path.realpath(path))
    for part in [p, *p.parents]:
        try:
            if not part.stat().st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


_ETC_FILES = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/mime.types",
)


def bwrap_argv(limits: SandboxLimits, file_fds: dict[str, int]) -> list[str]:
    """bubblewrap arguments: fresh namespaces, read-only system dirs, private tmpfs dirs."""
    argv = [shutil.which("bwrap") or "bwrap"]
    for top in ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        src = f"/{top}"
        if os.path.islink(src):
            argv += ["--symlink", os.readlink(src), src]
        elif os.path.isdir(src):
            argv += ["--ro-bind", src, src]
    argv += ["--perms", "0755", "--dir", "/etc"]
    for src in _ETC_FILES:
        if os.path.exists(src):
            argv += ["--ro-bind", src, src]
    size = str(limits.tmpfs_mb * 1024 * 1024)
    argv += ["--dev", "/dev", "--proc", "/proc"]
    argv += ["--perms", "1777", "--size", size, "--tmpfs", "/tmp"]
    argv += ["--perms", "0755", "--size", size, "--tmpfs", SANDBOX_DIR]
    # Python roots after the tmpfs mounts, so a venv under /tmp (a CI checkout) stays visible.
    made: set[str] = {"/", "/etc", "/tmp", SANDBOX_DIR}
    for root in python_roots():
        for parent in reversed(Path(root).parents):
            if str(parent) not in made:
                made.add(str(parent))
                argv += ["--perms", "0755", "--dir", str(parent)]
        argv += ["--ro-bind", root, root]
    for rel, fd in sorted(file_fds.items()):
        dest = f"{SANDBOX_DIR}/{rel}"
        for parent in reversed(Path(rel).parents):
            if str(parent) != ".":
                argv += ["--perms", "0755", "--dir", f"{SANDBOX_DIR}/{parent}"]
        argv += ["--perms", "0644", "--file", str(fd), dest]
    argv += ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]
    argv += ["--unshare-cgroup-try", "--hostname", "sandbox"]
    if not _is_root():
        argv += ["--unshare-user"]
    argv += ["--die-with-parent", "--new-session", "--chdir", SANDBOX_DIR, "--"]
    return argv


# Landlock (unprivileged, no namespaces needed): the same syscall numbers on every architecture.
_SYS_LANDLOCK_CREATE_RULESET, _SYS_LANDLOCK_ADD_RULE, _SYS_LANDLOCK_RESTRICT_SELF = 444, 445, 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_LANDLOCK_RULE_PATH_BENEATH = 1
_LANDLOCK_ACCESS_FS_MAKE_CHAR, _LANDLOCK_ACCESS_FS_REFER = 1 << 6, 1 << 13
_LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET, _LANDLOCK_SCOPE_SIGNAL = 1 << 0, 1 << 1
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38


@functools.cache
def landlock_abi() -> int:
    """The kernel's Landlock ABI version; 0 where it is absent, disabled at boot, or blocked by
    a seccomp profile (the syscall then fails)."""
    if sys.platform != "linux":
        return 0
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    version = libc.syscall(
        _SYS_LANDLOCK_CREATE_RULESET,
        None,
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    return max(0, int(version))


@functools.cache  # the same seal for every run of the process: built once
def _sealer(*, drop_caps: bool, landlock: bool) -> Callable[[], None]:
    """The rlimits mode's seal, run in the forked child before exec (everything it needs is
    computed here, in the parent).

    ``landlock``: enter a Landlock domain of its own. The kernel then refuses the program every
    ptrace-mode access (``/proc/PID/environ``, ``mem``, ``maps``, ``fd``) to processes outside
    it, whatever their uid; from ABI 6 it cannot signal them or reach their abstract unix
    sockets either. The ruleset must handle a file access right: it handles making character
    devices and reparenting files (``REFER``, which a ruleset would otherwise deny everywhere)
    and allows both beneath ``/``, so files behave as before; only mount() is lost.
    ``drop_caps``: empty the capability bounding set, so the root program that cannot change
    uid (interpreter not reachable by other users) keeps no capability after exec:
    CAP_SYS_PTRACE would pass Landlock's check.
    """
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fs = _LANDLOCK_ACCESS_FS_MAKE_CHAR | _LANDLOCK_ACCESS_FS_REFER
    if landlock_abi() >= 6:
        scoped = _LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | _LANDLOCK_SCOPE_SIGNAL
        attr = ctypes.create_string_buffer(struct.pack("=QQQ", fs, 0, scoped), 24)
    else:  # an older kernel reads the struct's first field only
        attr = ctypes.create_string_buffer(struct.pack("=Q", fs), 8)
    last_cap = int(Path("/proc/sys/kernel/cap_last_cap").read_text()) if drop_caps else -1

    def check(ret: int, what: str) -> int:
        if ret < 0:
            raise OSError(ctypes.get_errno(), f"sandbox seal: {what} failed")
        return ret

    def seal() -> None:
        for cap in range(last_cap + 1):
            check(libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0), f"dropping capability {cap}")
        if not landlock:
            return
        check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
        ruleset = check(
            libc.syscall(
                _SYS_LANDLOCK_CREATE_RULESET, attr, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0)
            ),
            "landlock_create_ruleset",
        )
        root = os.open("/", os.O_PATH | os.O_CLOEXEC)
        rule = ctypes.create_string_buffer(struct.pack("=Qi", fs, root), 12)
        try:
            check(
                libc.syscall(
                    _SYS_LANDLOCK_ADD_RULE,
                    ctypes.c_int(ruleset),
                    ctypes.c_int(_LANDLOCK_RULE_PATH_BENEATH),
                    rule,
                    ctypes.c_uint32(0),
                ),
                "landlock_add_rule",
            )
            check(
                libc.syscall(
                    _SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)
                ),
                "landlock_restrict_self",
            )
        finally:
            os.close(root)
            os.close(ruleset)

    return seal


def _unreachable_python() -> str:
    """Why a root grader's program cannot get a uid of its own, in words."""
    path = os.path.realpath(python_executable())
    return f"the interpreter {path} is not reachable by other users (a directory lacks o+x)"


def _rlimits_seal(root: bool, drop: bool) -> tuple[list[str], Callable[[], None]]:
    """How an rlimits run is kept from every other process's environment and memory: its own
    uid (``drop``: root with a world-traversable interpreter) and/or its own Landlock domain
    (ABI 2+, Linux 5.19+: reparenting files must stay allowed). Raises :class:`ConfigError`
    where neither is possible: the program would read the grader's secrets."""
    landlock = landlock_abi() >= 2
    if not (drop or landlock):
        why = (
            f"{_unreachable_python()}, so the program cannot get a uid of its own"
            if root
            else "the grader is not root, so the program cannot get a uid of its own"
        )
        raise ConfigError(
            "sandbox: isolation 'rlimits' cannot keep the grader's environment (the pod's "
            "secrets) from the program here: Landlock is unavailable (Linux 5.19+ with landlock "
            f"among its LSMs, and a seccomp profile that allows landlock_*) and {why}; give the "
            "sandbox namespaces (install bubblewrap, allow user namespaces) or run graders as "
            "root with a world-readable interpreter (docs/sandbox.md, 'Secrets')"
        )
    tags = ["landlock"] if landlock else []
    if root and not drop:
        tags.append("no-capabilities")
    return tags, _sealer(drop_caps=root and not drop, landlock=landlock)


def _unshare_argv() -> list[str]:
    argv = [shutil.which("unshare") or "unshare", "--fork", "--pid", "--kill-child"]
    argv += ["--mount-proc", "--net", "--ipc", "--uts"]
    if not _is_root():
        # The grader's uid mapped to itself (util-linux 2.38+), not to root: the program then
        # holds no capability and cannot unmount its /proc to reach the host's beneath it.
        argv += ["--user", "--map-current-user"]
    return [*argv, "--"]


def build_plan(
    mode: str,
    limits: SandboxLimits,
    *,
    host_workdir: str,
    file_fds: dict[str, int],
    marker_fd: int,
    uid: int,
) -> Plan:
    """The argv for one run in ``mode`` (``bwrap``, ``unshare`` or ``rlimits``)."""
    root = _is_root()
    preexec: Callable[[], None] | None = None
    if mode == "bwrap":
        prefix = bwrap_argv(limits, file_fds)
        workdir = SANDBOX_DIR
        drop = root
        chown = [SANDBOX_DIR, "/tmp"]
        tags = ["bwrap", "mount-ns", "pid-ns", "net-ns", "ipc-ns", "uts-ns"]
        tags += ["ro-system", "tmpfs-workdir"]
        if not root:
            tags.append("user-ns")
    elif mode == "unshare":
        prefix = _unshare_argv()
        workdir = host_workdir
        drop = root and world_traversable(python_executable())
        chown = [host_workdir]
        tags = ["unshare", "pid-ns", "net-ns", "ipc-ns", "uts-ns", "host-fs-visible"]
        if not root:
            tags.append("user-ns")
        elif not drop:
            raise ConfigError(
                "sandbox: isolation 'unshare' as root needs a uid of its own for the program "
                "(as real root it could unmount its /proc and read every process's environment), "
                f"but {_unreachable_python()}"
            )
    elif mode == "rlimits":
        prefix = []
        workdir = host_workdir
        drop = root and world_traversable(python_executable())
        chown = [host_workdir]
        tags = ["no-namespaces", "network-not-isolated", "host-fs-visible"]
        seal_tags, preexec = _rlimits_seal(root, drop)
        tags += seal_tags
    else:
        raise ValueError(f"sandbox isolation mode must be one of {MODES}, got {mode!r}")
    run_uid = uid if drop else 0
    # RLIMIT_NPROC binds a non-root uid, or a fresh user namespace (counted per namespace).
    nproc_ok = drop or (not root and mode in ("bwrap", "unshare"))
    nproc = 0
    tags += ["rlimits", "process-group", *ENV_TAGS]
    if drop:
        tags.append("own-uid")
    if nproc_ok:
        nproc = int(limits.max_processes)
        tags.append("nproc-limit")
    else:
        tags.append("nproc-unenforced")
    argv = [
        *prefix,
        python_executable(),
        "-I",
        "-S",
        "-B",
        "-c",
        BOOTSTRAP,
        str(run_uid),
        str(nproc),
        str(marker_fd),
        workdir,
        os.pathsep.join(chown),
        os.pathsep.join(site_dirs()),
        "0" if mode == "bwrap" else "1",  # the bootstrap verifies the seal (host /proc reachable)
    ]
    return Plan(argv=argv, workdir_inside=workdir, isolation=tuple(tags), preexec=preexec)


def available_modes() -> list[str]:
    """Modes whose tools exist on this host (not yet self-tested), fastest strong one first."""
    modes = []
    if shutil.which("bwrap"):
        if _is_root() and sys.platform == "linux":
            modes.append("zygote")  # see zygote.py: needs root to give each run its own uid
        modes.append("bwrap")
    if shutil.which("unshare"):
        modes.append("unshare")
    modes.append("rlimits")
    return modes
