"""The hardened code sandbox: run hostile generated Python under limits and isolation.

Public API::

    run_python(code, *, stdin="", limits=None, files=None) -> SandboxResult
    await arun_python(code, *, stdin="", limits=None, files=None) -> SandboxResult
    isolation_report() -> dict
    set_max_concurrency(n)          # bound of arun_python (default: CPU count)
    SandboxLimits, SandboxResult, SandboxBackend, LocalSandbox, get_backend, set_backend,
    close_backend                   # stop the process-wide backend's zygotes

See docs/sandbox.md for what is enforced and how a cluster backend plugs in.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref

from conductor_core.errors import ConfigError
from conductor_core.tasks.sandbox.backend import (
    BACKEND_ENV,
    SandboxBackend,
    close_backend,
    get_backend,
    set_backend,
)
from conductor_core.tasks.sandbox.isolation import available_modes
from conductor_core.tasks.sandbox.local import FALLBACK_ENV, ISOLATION_ENV, LocalSandbox
from conductor_core.tasks.sandbox.types import STATUSES, SandboxLimits, SandboxResult

__all__ = [
    "BACKEND_ENV",
    "CONCURRENCY_ENV",
    "FALLBACK_ENV",
    "ISOLATION_ENV",
    "STATUSES",
    "LocalSandbox",
    "SandboxBackend",
    "SandboxLimits",
    "SandboxResult",
    "arun_python",
    "close_backend",
    "get_backend",
    "isolation_report",
    "max_concurrency",
    "run_python",
    "set_backend",
    "set_max_concurrency",
]

CONCURRENCY_ENV = "CONDUCTOR_SANDBOX_CONCURRENCY"

_conc_lock = threading.Lock()
_max_concurrency: int | None = None
_semaphores: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, tuple[int, asyncio.Semaphore]]
_semaphores = weakref.WeakKeyDictionary()


def _default_concurrency() -> int:
    raw = os.environ.get(CONCURRENCY_ENV, "").strip()
    if raw:
        if not raw.isdigit() or int(raw) < 1:
            raise ConfigError(f"{CONCURRENCY_ENV} must be a positive integer, got {raw!r}")
        return int(raw)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - non-Linux
        return max(1, os.cpu_count() or 1)


def max_concurrency() -> int:
    """How many runs :func:`arun_python` lets proceed at once (per event loop)."""
    global _max_concurrency
    with _conc_lock:
        if _max_concurrency is None:
            _max_concurrency = _default_concurrency()
        return _max_concurrency


def set_max_concurrency(n: int) -> None:
    """Bound :func:`arun_python` to ``n`` concurrent runs (applies to new event loops and to
    loops whose semaphore is idle)."""
    global _max_concurrency
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"sandbox max concurrency must be a positive int, got {n!r}")
    with _conc_lock:
        _max_concurrency = n


def _semaphore() -> asyncio.Semaphore:
    loop = asyncio.get_running_loop()
    limit = max_concurrency()
    entry = _semaphores.get(loop)
    if entry is None or (entry[0] != limit and not entry[1].locked()):
        entry = (limit, asyncio.Semaphore(limit))
        _semaphores[loop] = entry
    return entry[1]


def run_python(
    code: str,
    *,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    files: dict[str, str] | None = None,
) -> SandboxResult:
    """Run ``code`` (a Python program, as ``main.py``) in the sandbox and wait for it.

    ``files`` are written beside it (relative paths), ``stdin`` is its standard input. The
    program's failures are reported in the result, never raised.
    """
    return get_backend().run(code, stdin=stdin, limits=limits, files=files)


async def arun_python(
    code: str,
    *,
    stdin: str = "",
    limits: SandboxLimits | None = None,
    files: dict[str, str] | None = None,
) -> SandboxResult:
    """Async :func:`run_python`, at most :func:`max_concurrency` runs at a time per loop."""
    async with _semaphore():
        return await asyncio.to_thread(run_python, code, stdin=stdin, limits=limits, files=files)


def isolation_report() -> dict:
    """What this host supports and what the active backend enforces (self-tested once)."""
    report = dict(get_backend().report())
    report.setdefault("available", available_modes())
    report["max_concurrency"] = max_concurrency()
    return report
