"""Types shared by worker providers, the pool and the executor."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, Field

Messages = list[dict[str, str]]
"""Chat messages: ``[{"role": "user", "content": "..."}]``."""

DeltaHandler = Callable[[str], None]
"""Receives a reply's text in pieces as a worker writes it (streaming); the pieces of a call that
succeeds join to its reply's text."""


class Usage(BaseModel):
    """Token usage of one call."""

    input_tokens: int = 0
    output_tokens: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
        )


class Completion(BaseModel):
    """What a provider returns for one successful call."""

    text: str
    usage: Usage = Field(default_factory=Usage)


class ErrorKind:
    """Stable names for infrastructure failure kinds (used in traces and metrics)."""

    RATE_LIMIT = "rate_limit"  # HTTP 429
    SERVER = "server_error"  # HTTP 5xx
    CONNECTION = "connection_error"
    TIMEOUT = "timeout"
    CIRCUIT_OPEN = "circuit_open"
    DEADLINE = "deadline_exceeded"
    CLIENT = "client_error"  # other 4xx: not retried
    AUTH = "auth_error"  # missing or rejected credentials: not retried
    MALFORMED = "malformed_response"


class ProviderError(Exception):
    """A provider call failed. ``retryable`` decides whether the pool retries it."""

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


@runtime_checkable
class Provider(Protocol):
    """One worker backend. Implementations raise :class:`ProviderError` on failure."""

    async def complete(self, messages: Messages, *, sample_index: int = 0) -> Completion:
        """Return the worker's reply to ``messages``. ``sample_index`` distinguishes repeats."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


@runtime_checkable
class StreamingProvider(Provider, Protocol):
    """A provider that can also stream a reply (the pool uses it when its caller streams)."""

    async def complete_stream(
        self, messages: Messages, *, sample_index: int = 0, on_delta: DeltaHandler
    ) -> Completion:
        """Like :meth:`Provider.complete`, passing the reply's text to ``on_delta`` in pieces as
        it arrives; the returned text is the pieces joined. May raise :class:`ProviderError`
        after some pieces were passed on."""
        ...


class CallResult(BaseModel):
    """The outcome of one pool call, success or recorded infrastructure failure. Never raised."""

    worker: int
    model: str
    text: str | None = None
    usage: Usage = Field(default_factory=Usage)
    cost: float = 0.0
    latency_s: float = 0.0
    retries: int = 0
    cached: bool = False
    error: str | None = None
    error_kind: str | None = None

    @property
    def ok(self) -> bool:
        """True when the call produced a response."""
        return self.error is None
