"""How a run is isolated on this host: bubblewrap, unshare(1), or plain rlimits.

The sandboxed program always runs as ``python -I -S -B -c BOOTSTRAP CONFIG``. The bootstrap
(below) drops to the run's own unprivileged uid when it starts as real root, sets
RLIMIT_NPROC (which only binds a non-root uid or a fresh user namespace), reports that it
started on a marker pipe, and executes ``main.py`` as ``__main__`` from the working directory
(which is first on ``sys.path``, so helper files given as ``files`` import).
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from conductor_core.tasks.sandbox.types import SandboxLimits

MODES = ("bwrap", "unshare", "rlimits")
SANDBOX_DIR = "/sandbox"
# Each run gets its own uid in this range (never a real account): RLIMIT_NPROC then counts
# only that run's tasks, so one run's fork bomb cannot starve another run.
UID_BASE = 0x3F000000
UID_SPAN = 1 << 24

# Kept import-light (no json/runpy: ~30 ms per run). argv: uid nproc marker workdir chown site
# (lists joined with os.pathsep).
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
    """The command of one run and what it guarantees."""

    argv: list[str]
    workdir_inside: str
    isolation: tuple[str, ...]


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


def _unshare_argv() -> list[str]:
    argv = [shutil.which("unshare") or "unshare", "--fork", "--pid", "--kill-child"]
    argv += ["--mount-proc", "--net", "--ipc", "--uts"]
    if not _is_root():
        argv += ["--user", "--map-root-user"]
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
    elif mode == "rlimits":
        prefix = []
        workdir = host_workdir
        drop = root and world_traversable(python_executable())
        chown = [host_workdir]
        tags = ["no-namespaces", "network-not-isolated", "host-fs-visible"]
    else:
        raise ValueError(f"sandbox isolation mode must be one of {MODES}, got {mode!r}")
    run_uid = uid if drop else 0
    # RLIMIT_NPROC binds a non-root uid, or a fresh user namespace (counted per namespace).
    nproc_ok = drop or (not root and mode in ("bwrap", "unshare"))
    nproc = 0
    tags += ["rlimits", "process-group", "env-scrubbed"]
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
    ]
    return Plan(argv=argv, workdir_inside=workdir, isolation=tuple(tags))


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
