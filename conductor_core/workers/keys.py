"""API key lookup from the environment, and redaction of keys from any text.

A pool config names the environment variable that holds a worker's key (``api_key_env``), never
the key. Keys are read only here, handed straight to the SDK client and never stored on provider
objects, logged, or put into exception messages (see :func:`redact`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from conductor_core.errors import ConfigError
from conductor_core.workers.config import WorkerConfig

LOCAL_DUMMY_KEY = "EMPTY"
"""Key sent to OpenAI-compatible servers that need none (vLLM, the worker simulator)."""

DEFAULT_KEY_ENV: dict[str, tuple[str, ...]] = {
    "anthropic": ("ANTHROPIC_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
"""Conventional variables read when a worker of these providers sets no ``api_key_env``."""

REDACTED = "***"


def _label(worker: WorkerConfig, worker_id: int | None) -> str:
    prefix = f"worker {worker_id}" if worker_id is not None else "worker"
    return f"{prefix} ({worker.display_name})"


def resolve_key(worker: WorkerConfig, *, worker_id: int | None = None) -> str | None:
    """Return the API key of ``worker`` from the environment, or ``None`` when it needs none.

    Rules: ``api_key_env`` set -> that variable must be set and non-empty. Not set -> the
    ``openai`` provider gets the dummy key ``"EMPTY"`` (local OpenAI-compatible servers such as
    vLLM accept any key); ``anthropic`` and ``gemini`` read their conventional variables
    (:data:`DEFAULT_KEY_ENV`); ``transformers`` and ``simulated`` need no key.

    Raises:
        ConfigError: the variable is missing or empty; the message names it and the fix.
    """
    if worker.api_key_env:
        value = os.environ.get(worker.api_key_env, "").strip()
        if not value:
            raise ConfigError(
                f"{_label(worker, worker_id)}: environment variable {worker.api_key_env} is not "
                f"set; export it (export {worker.api_key_env}=...) or set api_key_env in the pool "
                "config to the variable that holds the key"
            )
        return value
    if worker.provider == "openai":
        return LOCAL_DUMMY_KEY
    names = DEFAULT_KEY_ENV.get(worker.provider)
    if not names:
        return None
    for name in names:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    wanted = " or ".join(names)
    raise ConfigError(
        f"{_label(worker, worker_id)}: environment variable {wanted} is not set; export it or "
        "set api_key_env in the pool config to the variable that holds the key"
    )


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """Replace every occurrence of each secret in ``text`` with ``***``.

    Servers sometimes echo part of a rejected key ("Incorrect API key provided: sk-ab***wxyz");
    for keys of 16+ characters, their trailing 8 characters are removed too.
    """
    for secret in secrets:
        if not secret or secret == LOCAL_DUMMY_KEY or len(secret) < 4:
            continue
        text = text.replace(secret, REDACTED)
        tail = secret[-8:] if len(secret) >= 16 else ""
        if tail:
            text = text.replace(tail, REDACTED)
    return text
