"""The one mapping of SDK exceptions to :class:`ProviderError` kinds, shared by every provider.

* :func:`error_for_status`: an HTTP status (and, for a rejected request, its message) -> kind and
  retryability.
* :func:`map_sdk_error`: an exception of an SDK's API-error family. The ``openai`` and
  ``anthropic`` SDKs share one generated hierarchy (``APITimeoutError``, ``APIConnectionError``,
  ``APIResponseValidationError``, ``APIStatusError``), recognised here by class name, so this
  module imports no SDK; SDKs without a status class (``google-genai``) pass the status.
* :func:`map_transport_error`: any other exception raised while calling an SDK (timeouts,
  dropped connections, undecodable bodies), judged by its type and class name.

Every message goes through :func:`clean_message`: one line, bounded, with the key redacted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from conductor_core.workers.keys import redact
from conductor_core.workers.resilience import parse_retry_after
from conductor_core.workers.types import ErrorKind, ProviderError

MAX_ERROR_CHARS = 300
_CONNECTION_WORDS = ("connect", "transport", "network", "protocol", "disconnect")
_CONTEXT_OVERFLOW = re.compile(
    r"context[ _-]length|context window|maximum context|prompt is too long|input is too long"
    r"|too many (?:input )?tokens|input token count|exceeds the maximum number of tokens"
    r"|reduce the length of the (?:messages|prompt|input)",
    re.IGNORECASE,
)
"""How the providers word a prompt longer than the model's context (OpenAI's
``context_length_exceeded``, vLLM's "maximum context length", Anthropic's "prompt is too long",
Gemini's "input token count ... exceeds the maximum number of tokens")."""


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
    401/403 -> auth (not retried); 404 -> not found (a worker's model or endpoint that is not
    deployed: the configuration's fault, not the plan's; not retried); 5xx and 529 -> server
    error (retried, except 501); 413, or a 400/422 whose message says the prompt exceeds the
    model's context -> context overflow (not retried); any other status -> client error (not
    retried).
    """
    if status == 429:
        kind, retryable = ErrorKind.RATE_LIMIT, True
    elif status == 408:
        kind, retryable = ErrorKind.TIMEOUT, True
    elif status in (401, 403):
        kind, retryable = ErrorKind.AUTH, False
    elif status == 404:
        kind, retryable = ErrorKind.NOT_FOUND, False
    elif status >= 500:
        kind, retryable = ErrorKind.SERVER, status != 501
    elif status == 413 or (status in (400, 422) and _CONTEXT_OVERFLOW.search(message)):
        kind, retryable = ErrorKind.CONTEXT_OVERFLOW, False
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


def timed_out(detail: str) -> ProviderError:
    """The request ran past its timeout: retried."""
    return ProviderError(f"request timed out: {detail}", kind=ErrorKind.TIMEOUT, retryable=True)


def unreachable(detail: str, where: str | None = None) -> ProviderError:
    """The server could not be reached (``where``: the endpoint, when worth naming): retried."""
    prefix = f"cannot reach {where}" if where else "connection failed"
    return ProviderError(f"{prefix}: {detail}", kind=ErrorKind.CONNECTION, retryable=True)


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


def map_sdk_error(
    exc: BaseException,
    secrets: Iterable[str | None] = (),
    *,
    status: int | None = None,
    where: str | None = None,
) -> ProviderError:
    """Map an exception of an SDK's API-error family to a :class:`ProviderError`.

    Args:
        exc: the exception (its ``message`` attribute, else its text, is the detail).
        secrets: values to redact from the message (the worker's key).
        status: the HTTP status, for SDKs whose errors carry it without an ``APIStatusError``
            class (``google-genai``'s ``code``); ``None`` when there is none.
        where: the endpoint named in connection errors (otherwise "connection failed").

    Timeouts and connection failures are retried; a reply not matching the API schema, or any
    other error without a status, is malformed (retried); a status goes through
    :func:`error_for_status`, with the ``Retry-After`` header of the response.
    """
    detail = clean_message(getattr(exc, "message", None) or exc, secrets)
    names = _class_names(exc)
    if "APITimeoutError" in names:
        return timed_out(detail)
    if "APIConnectionError" in names:
        return unreachable(detail, where)
    if "APIResponseValidationError" in names:
        return malformed(f"response did not match the API schema: {detail}")
    if status is None and "APIStatusError" in names:
        status = exc.status_code  # type: ignore[attr-defined]
    if status is not None:
        headers: Mapping[str, str] | None = getattr(getattr(exc, "response", None), "headers", None)
        return error_for_status(status, detail, retry_after=parse_retry_after(headers))
    if isinstance(exc, json.JSONDecodeError):
        return malformed(f"response is not JSON: {detail}")
    return malformed(f"unusable response: {detail}")


def map_transport_error(exc: BaseException, secrets: Iterable[str | None] = ()) -> ProviderError:
    """Map an exception raised outside an SDK's API-error family (its HTTP library's own).

    A timeout (by class name or ``TimeoutError``) is retried; an undecodable body
    (``ValueError``/``TypeError``/``KeyError``) is malformed; an ``OSError`` or a class named
    like a connection or transport failure is a connection error (retried); anything else is a
    server error that is not retried.
    """
    detail = clean_message(f"{type(exc).__name__}: {exc}", secrets)
    name = type(exc).__name__.lower()
    if "timeout" in name or isinstance(exc, TimeoutError):
        return timed_out(detail)
    if isinstance(exc, (ValueError, TypeError, KeyError)):
        return malformed(f"unreadable response: {detail}")
    if isinstance(exc, OSError) or any(word in name for word in _CONNECTION_WORDS):
        return unreachable(detail)
    return ProviderError(f"unexpected error: {detail}", kind=ErrorKind.SERVER, retryable=False)


__all__ = [
    "MAX_ERROR_CHARS",
    "clean_message",
    "error_for_status",
    "malformed",
    "map_sdk_error",
    "map_transport_error",
    "timed_out",
    "unreachable",
]
