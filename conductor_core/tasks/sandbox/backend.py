"""The pluggable backend: local by default, or one named by ``CONDUCTOR_SANDBOX_BACKEND``.

A cluster can grade in its own pods under a restricted runtime class (gVisor, Kata) by
providing an object that satisfies :class:`SandboxBackend` and naming its factory as
``CONDUCTOR_SANDBOX_BACKEND=package.module:factory`` (see docs/sandbox.md).
"""

from __future__ import annotations

import importlib
import os
import threading
from typing import Protocol, runtime_checkable

from conductor_core.errors import ConfigError
from conductor_core.tasks.sandbox.local import LocalSandbox
from conductor_core.tasks.sandbox.types import SandboxLimits, SandboxResult

BACKEND_ENV = "CONDUCTOR_SANDBOX_BACKEND"


@runtime_checkable
class SandboxBackend(Protocol):
    """Something that runs one Python program under limits and reports what happened.

    ``run`` must be thread-safe (it is called from worker threads, many at a time), must never
    raise for the program's behaviour, and must return ``status="sandbox_error"`` for its own
    (infrastructure) failures. ``report`` describes the isolation in force.
    """

    name: str

    def run(
        self,
        code: str,
        *,
        stdin: str = "",
        limits: SandboxLimits | None = None,
        files: dict[str, str] | None = None,
    ) -> SandboxResult:
        """Run ``code`` as ``main.py`` with ``files`` beside it and ``stdin`` as input."""
        ...

    def report(self) -> dict:
        """What isolation this backend provides (for docs and result metadata)."""
        ...


_lock = threading.Lock()
_backend: SandboxBackend | None = None


def _load(spec: str) -> SandboxBackend:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError(
            f"{BACKEND_ENV}={spec!r} must look like 'package.module:factory' "
            "(a callable returning a SandboxBackend)"
        )
    try:
        factory = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(
            f"{BACKEND_ENV}={spec!r}: cannot import {attr!r} from {module_name!r} ({exc}); "
            "fix the name or unset the variable to use the local sandbox"
        ) from exc
    backend = factory()
    if not isinstance(backend, SandboxBackend):
        raise ConfigError(
            f"{BACKEND_ENV}={spec!r} returned {type(backend).__name__}, which lacks "
            "name/run/report of SandboxBackend"
        )
    return backend


def get_backend() -> SandboxBackend:
    """The process-wide backend: the one set by :func:`set_backend`, else the one named by
    ``CONDUCTOR_SANDBOX_BACKEND``, else :class:`LocalSandbox`."""
    global _backend
    with _lock:
        if _backend is None:
            spec = os.environ.get(BACKEND_ENV, "").strip()
            _backend = _load(spec) if spec and spec != "local" else LocalSandbox()
        return _backend


def set_backend(backend: SandboxBackend | None) -> None:
    """Install ``backend`` for this process (``None``: choose again on next use)."""
    global _backend
    if backend is not None and not isinstance(backend, SandboxBackend):
        raise TypeError("set_backend needs an object with name, run() and report()")
    with _lock:
        _backend = backend


def close_backend() -> None:
    """Close the process-wide backend, if one was chosen (stops what it keeps running, such as
    the local sandbox's zygotes), and choose again on next use."""
    global _backend
    with _lock:
        backend, _backend = _backend, None
    close = getattr(backend, "close", None)
    if callable(close):
        close()
