"""Spans and propagated headers of a workflow's calls: off, and free, unless a caller binds them.

The library's hot paths (the round loop, the executor, the worker pool, the providers) mark their
work here without depending on OpenTelemetry: the gateway binds a request id and, when tracing is
configured (:mod:`conductor_core.serve.tracing`), an OpenTelemetry tracer into the context its
workflow runs in (:func:`bind`); everything below reads that context.

* :func:`span` opens a span (a child of the current one) when a tracer is bound, else a shared
  no-op. Exceptions end a span with an error status naming the exception's type only (never its
  message), and no attribute carries a prompt, an answer or a credential.
* :func:`outgoing_headers` is what an HTTP call of the workflow sends along: ``X-Request-ID``
  when a request id is bound, and the trace context of the current span (W3C ``traceparent``,
  through OpenTelemetry's configured propagator) when a tracer is.

With nothing bound (the CLI, evaluation, training) both are no-ops and ``opentelemetry`` is
never imported.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

__all__ = [
    "REQUEST_ID_HEADER",
    "CallContext",
    "bind",
    "failed",
    "outgoing_headers",
    "span",
]

REQUEST_ID_HEADER = "X-Request-ID"
"""The header that carries the gateway's request id to the workers."""

AttributeValue = str | bool | int | float
SpanKind = Literal["internal", "client"]


@dataclass(frozen=True)
class CallContext:
    """What the calls of one workflow carry: its request id and the tracer of its spans (an
    OpenTelemetry ``Tracer``; None: no spans)."""

    request_id: str | None
    tracer: Any = None


_CONTEXT: contextvars.ContextVar[CallContext | None] = contextvars.ContextVar(
    "conductor_call_context", default=None
)


def bind(request_id: str | None, tracer: Any = None) -> None:
    """Bind a request id and a tracer to the current context (call it inside the context the
    workflow runs in, e.g. ``contextvars.copy_context().run(bind, ...)`` for its task)."""
    _CONTEXT.set(CallContext(request_id=request_id, tracer=tracer))


class _NoSpan:
    """The span of unbound code: records nothing."""

    __slots__ = ()

    def is_recording(self) -> bool:
        return False

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        return None

    def set_attributes(self, attributes: Mapping[str, AttributeValue]) -> None:
        return None


_NO_SPAN = _NoSpan()
_OFF = contextlib.nullcontext(_NO_SPAN)  # stateless: one shared instance serves every caller


def span(
    name: str,
    attributes: Mapping[str, AttributeValue] | None = None,
    *,
    kind: SpanKind = "internal",
) -> contextlib.AbstractContextManager[Any]:
    """A span named ``name``, current inside the ``with`` block, when a tracer is bound; else a
    no-op whose ``is_recording()`` is False (check it before computing attributes).

    Spans carry ``conductor.request_id`` when a request id is bound. ``kind`` is ``client`` for
    a call to another service (a worker, the Conductor's model server).
    """
    bound = _CONTEXT.get()
    if bound is None or bound.tracer is None:
        return _OFF
    attrs = dict(attributes or {})
    if bound.request_id:
        attrs["conductor.request_id"] = bound.request_id
    return _recorded(bound.tracer, name, attrs, kind)


@contextlib.contextmanager
def _recorded(
    tracer: Any, name: str, attributes: dict[str, AttributeValue], kind: SpanKind
) -> Iterator[Any]:
    from opentelemetry import trace

    otel_kind = trace.SpanKind.CLIENT if kind == "client" else trace.SpanKind.INTERNAL
    # The SDK's own exception handling would record the exception's message (which may quote
    # an upstream's reply): only its type is recorded, by failed().
    with tracer.start_as_current_span(
        name,
        attributes=attributes,
        kind=otel_kind,
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield current
        except BaseException as exc:
            failed(current, type(exc).__name__)
            raise


def failed(current: Any, description: str) -> None:
    """Set an error status with ``description`` (an error kind or an exception's type, never a
    message) on ``current``, a span from :func:`span`; nothing for a no-op span."""
    if not current.is_recording():
        return
    from opentelemetry.trace import Status, StatusCode

    current.set_status(Status(StatusCode.ERROR, description))
    current.set_attribute("error.type", description)


def outgoing_headers() -> dict[str, str]:
    """The headers an HTTP call of the bound workflow sends along (empty when nothing is bound):
    ``X-Request-ID`` and, with a tracer, the current span's trace context (``traceparent``, and
    ``tracestate``/``baggage`` where the configured propagators write them)."""
    bound = _CONTEXT.get()
    if bound is None:
        return {}
    headers: dict[str, str] = {}
    if bound.tracer is not None:
        from opentelemetry import propagate

        propagate.inject(headers)
    if bound.request_id:
        headers[REQUEST_ID_HEADER] = bound.request_id
    return headers
