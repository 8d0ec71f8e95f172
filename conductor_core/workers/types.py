"""Types shared by worker providers, the pool and the executor."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

Messages = list[dict[str, str]]
"""Chat messages: ``[{"role": "user", "content": "..."}]``."""

DeltaHandler = Callable[[str], None]
"""Receives a reply's text in pieces as a worker writes it (streaming); the pieces of a call that
succeeds join to its reply's text."""


@dataclass(frozen=True)
class OutputFormat:
    """The form a reply must take: ``json_object`` (one JSON object) or ``json_schema`` (one JSON
    value valid against ``schema``), as OpenAI's ``response_format`` asks for it. The gateway
    asks the last step's worker for it (:meth:`WorkerPool.call`'s ``output_format``).

    A provider that can constrain its output declares ``accepts_output_format = True`` and takes
    ``output_format=`` in ``complete`` (and ``complete_stream``); any other is asked in words
    (:meth:`instruction`, a system message the pool puts first).
    """

    type: Literal["json_object", "json_schema"]
    schema: dict[str, Any] | None = None
    name: str = "response"
    strict: bool | None = None
    description: str | None = None

    def response_format(self) -> dict[str, Any]:
        """OpenAI's ``response_format`` for this format (vLLM and OpenAI take it as is)."""
        if self.type == "json_object":
            return {"type": "json_object"}
        spec: dict[str, Any] = {"name": self.name, "schema": self.schema or {}}
        if self.description is not None:
            spec["description"] = self.description
        if self.strict is not None:
            spec["strict"] = self.strict
        return {"type": "json_schema", "json_schema": spec}

    def instruction(self) -> str:
        """The format said in words, for a worker with no native JSON mode."""
        if self.type == "json_object":
            return "Reply with one JSON object and nothing else: no prose, no Markdown code fence."
        schema = json.dumps(self.schema or {}, ensure_ascii=False, sort_keys=True)
        return (
            "Reply with one JSON value that is valid against this JSON Schema, and nothing "
            f"else: no prose, no Markdown code fence.\nJSON Schema ({self.name}): {schema}"
        )


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
    """Stable names for worker-call failure kinds (used in traces and metrics). Whose fault each
    is, the plan's or the infrastructure's, is decided by :func:`is_plan_fault`."""

    RATE_LIMIT = "rate_limit"  # HTTP 429
    SERVER = "server_error"  # HTTP 5xx
    CONNECTION = "connection_error"
    TIMEOUT = "timeout"  # one attempt ran past the worker's timeout_s
    CIRCUIT_OPEN = "circuit_open"
    DEADLINE = "deadline_exceeded"  # the caller's (the plan's) wall-clock budget ran out
    CLIENT = "client_error"  # other 4xx: not retried
    CONTEXT_OVERFLOW = "context_overflow"  # the prompt is longer than the worker's context
    AUTH = "auth_error"  # missing or rejected credentials: not retried
    NOT_FOUND = "not_found"  # HTTP 404: the worker's model or endpoint is not deployed
    MALFORMED = "malformed_response"


PLAN_FAULT_KINDS = frozenset({ErrorKind.CLIENT, ErrorKind.CONTEXT_OVERFLOW, ErrorKind.DEADLINE})
"""Failure kinds that the request itself caused, so the plan that made it: a request the worker
rejected as bad (a 4xx other than auth, 404, 408 and 429), a prompt longer than the worker's
context, and the plan's own deadline. Every other kind (rate limits, 5xx, connection errors, a
worker's per-attempt timeout, an open circuit, credentials, a model or endpoint that is not
deployed, unusable replies) is the infrastructure's."""


def is_plan_fault(kind: str | None) -> bool:
    """True when a call that failed with ``kind`` failed through the plan's own fault (see
    :data:`PLAN_FAULT_KINDS`): the one place that decides it, for the reward (a plan failure
    scores 0, an infrastructure failure is left out) and for the pool's circuit breaker (a bad
    request says nothing about the worker's health)."""
    return kind in PLAN_FAULT_KINDS


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
        """Return the worker's reply to ``messages``. ``sample_index`` distinguishes repeats.
        (A provider with ``accepts_output_format = True`` also takes ``output_format``, an
        :class:`OutputFormat` or None.)"""
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
    """The outcome of one pool call, success or recorded failure (``error_kind`` says which kind,
    :attr:`plan_fault` whose fault). Never raised."""

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

    @property
    def plan_fault(self) -> bool:
        """True when the call failed through the plan's own fault (:func:`is_plan_fault`)."""
        return self.error is not None and is_plan_fault(self.error_kind)
