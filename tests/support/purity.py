"""The rule of ``tests/unit/``: a unit test is fast and pure. It starts no process, binds or
connects no network socket (Unix sockets aside) and opens no database through SQLAlchemy (MLflow's
tracking store); anything that does belongs in ``tests/integration/`` (or ``tests/e2e/``). Unit
tests carry no ``slow`` marker either. (A plain ``sqlite3`` file, such as the response cache's,
is a temporary file like any other.)

Watched with a Python audit hook (:pep:`578`), which sees these acts from any thread of the
test process while a unit test runs (setup, call and teardown).
"""

from __future__ import annotations

import platform
import sys
import threading

# Audit events that start a process, use the network or open a database file.
PROCESS_EVENTS = frozenset(
    {"subprocess.Popen", "os.posix_spawn", "os.fork", "os.forkpty", "os.system", "os.exec"}
)
NETWORK_EVENTS = frozenset({"socket.bind", "socket.connect"})
DATABASE_EVENTS = frozenset({"sqlite3.connect"})

_lock = threading.Lock()
_watching: str | None = None  # the node id of the unit test now running
_seen: list[str] = []
_installed = False


def _describe(event: str, args: tuple) -> str | None:
    if event in PROCESS_EVENTS:
        what = args[0] if args else ""
        if isinstance(what, list | tuple):
            what = " ".join(str(a) for a in what[:4])
        return f"starts a process ({event}: {str(what)[:120]})"
    if event in NETWORK_EVENTS:
        sock, address = args[0], args[1] if len(args) > 1 else None
        if getattr(sock, "family", None) is not None and sock.family.name == "AF_UNIX":
            return None
        return f"uses the network ({event} {address!r})"
    if event in DATABASE_EVENTS:
        if not _called_from("sqlalchemy"):
            return None
        return f"opens a database through SQLAlchemy ({args[0] if args else ''})"
    return None


def _called_from(package: str) -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_globals.get("__name__", "").startswith(package + "."):
            return True
        frame = frame.f_back
    return False


def _hook(event: str, args: tuple) -> None:
    if _watching is None:
        return
    if event not in PROCESS_EVENTS and event not in NETWORK_EVENTS and event not in DATABASE_EVENTS:
        return
    what = _describe(event, args)
    if what is not None:
        with _lock:
            if len(_seen) < 20:
                _seen.append(what)


def install() -> None:
    """Install the audit hook (once per process; audit hooks cannot be removed).

    First it makes the one-off probe that libraries share and ``platform`` caches for the whole
    process (``platform.platform()`` runs ``uname -p``; the OpenAI SDK asks for it in its request
    headers, MLflow when it is imported), so that no unit test is blamed for being first.
    """
    global _installed
    if not _installed:
        platform.platform()
        sys.addaudithook(_hook)
        _installed = True


def watch(nodeid: str | None) -> None:
    """Start watching for the unit test ``nodeid`` (``None``: stop watching)."""
    global _watching
    with _lock:
        _watching = nodeid
        if nodeid is not None:
            _seen.clear()


def violations() -> list[str]:
    """What the watched test did that a unit test may not (at most 20 lines)."""
    with _lock:
        return list(dict.fromkeys(_seen))
