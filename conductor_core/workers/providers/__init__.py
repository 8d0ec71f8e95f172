"""Worker providers: one class per backend, built from a :class:`WorkerConfig` by
:func:`build_provider`. SDKs are imported inside the provider modules' constructors, so importing
this package is cheap and a missing SDK is one clear message naming the extra to install.

Shared helpers here turn HTTP statuses into :class:`ProviderError` kinds, and keep keys out of
error messages.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.keys import redact
from conductor_core.workers.types import ErrorKind, Provider, ProviderError

MAX_ERROR_CHARS = 300


def clean_message(text: Any, secrets: Iterable[str | None] = ()) -> str:
    """One line, at most :data:`MAX_ERROR_CHARS` characters, with every secret redacted."""
    line = " ".join(str(text).split())
    line = redact(line, list(secrets))
    if len(line) > MAX_ERROR_CHARS:
        line = line[: MAX_ERROR_CHARS - 3] + "..."
    return line


def error_for_status(
    status: int,
    message: str,
    *,
    retry_after: float | None = None,
) -> ProviderError:
    """Map an HTTP status to a :class:`ProviderError` with the right kind and retryability.

    429 -> rate limit (retried, honouring ``retry_after``); 408 -> timeout (retried);
    401/403 -> auth (not retried); 5xx and 529 -> server error (retried, except 501);
    any other status -> client error (not retried).
    """
    if status == 429:
        kind, retryable = ErrorKind.RATE_LIMIT, True
    elif status == 408:
        kind, retryable = ErrorKind.TIMEOUT, True
    elif status in (401, 403):
        kind, retryable = ErrorKind.AUTH, False
    elif status >= 500:
        kind, retryable = ErrorKind.SERVER, status != 501
    else:
        kind, retryable = ErrorKind.CLIENT, False
    return ProviderError(
        f"HTTP {status}: {message}",
        kind=kind,
        retryable=retryable,
        status=status,
        retry_after=retry_after,
    )


def malformed(message: str) -> ProviderError:
    """A reply that arrived but cannot be used (empty, missing content, not JSON): retried."""
    return ProviderError(message, kind=ErrorKind.MALFORMED, retryable=True)


def build_provider(
    worker: WorkerConfig, *, bank: Any = None, worker_id: int | None = None
) -> Provider:
    """Create the provider of ``worker`` (``worker_id`` only labels error messages).

    ``bank`` (a problem bank) is used by the ``simulated`` provider only, to know the reference
    answers it plays against.

    Raises:
        ConfigError: a missing key variable or an invalid local model path.
        MissingDependencyError: the provider's SDK is not installed (names the extra).
    """
    if worker.provider == "openai":
        from conductor_core.workers.providers.openai_compat import OpenAIProvider

        return OpenAIProvider(worker, worker_id=worker_id)
    if worker.provider == "anthropic":
        from conductor_core.workers.providers.anthropic_provider import AnthropicProvider

        return AnthropicProvider(worker, worker_id=worker_id)
    if worker.provider == "gemini":
        from conductor_core.workers.providers.gemini_provider import GeminiProvider

        return GeminiProvider(worker, worker_id=worker_id)
    if worker.provider == "transformers":
        from conductor_core.workers.providers.transformers_provider import TransformersProvider

        return TransformersProvider(worker, worker_id=worker_id)
    if worker.provider == "simulated":
        from conductor_core.workers.simulated import SimulatedProvider

        return SimulatedProvider(worker, bank)
    raise ValueError(f"unknown provider {worker.provider!r}")


__all__ = ["build_provider", "clean_message", "error_for_status", "malformed"]
