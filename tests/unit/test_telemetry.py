"""The library's tracing seam (:mod:`conductor_core.telemetry`): free and silent when nothing is
bound; with a tracer, nested spans whose errors name a type, never a message, and headers that
carry the current span's trace context and the request id."""

from __future__ import annotations

import asyncio
import contextvars

import pytest

from conductor_core import telemetry
from conductor_core.policy.scripted import ScriptedPlanSource
from conductor_core.solve import solve, solve_options
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool
from conductor_core.workers.pool import WorkerPool

pytest.importorskip("opentelemetry.sdk")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.trace import StatusCode

QUESTION = "What is 6 times 7?"


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def tracer(exporter: InMemorySpanExporter):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider.get_tracer("test")


def in_context(fn, *args):
    """``fn(*args)`` in a fresh copy of the context (as a workflow's task runs)."""
    return contextvars.copy_context().run(fn, *args)


def test_unbound_code_gets_the_shared_no_op_and_no_headers() -> None:
    def unbound():
        with telemetry.span("x", {"a": 1}) as span:
            assert not span.is_recording()
            span.set_attributes({"b": 2})
            telemetry.failed(span, "server_error")
        return telemetry.span("y"), telemetry.outgoing_headers()

    first, headers = in_context(unbound)
    assert first is telemetry.span("z")  # one shared object: nothing is built per call
    assert headers == {}


def test_a_request_id_alone_is_sent_without_spans() -> None:
    def bound():
        telemetry.bind("req-1")
        with telemetry.span("x") as span:
            assert not span.is_recording()
            return telemetry.outgoing_headers()

    assert in_context(bound) == {"X-Request-ID": "req-1"}


def test_spans_nest_and_headers_carry_the_current_span(tracer, exporter) -> None:
    def traced():
        telemetry.bind("req-2", tracer)
        with telemetry.span("outer", {"k": "v"}) as outer:
            with telemetry.span("inner", kind="client") as inner:
                headers = telemetry.outgoing_headers()
            return outer, inner, headers

    outer, inner, headers = in_context(traced)
    ctx = inner.get_span_context()
    flags = int(ctx.trace_flags)
    assert flags & 1  # sampled
    assert headers["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags:02x}"
    assert headers["X-Request-ID"] == "req-2"
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert spans["inner"].parent.span_id == outer.get_span_context().span_id
    assert spans["inner"].kind.name == "CLIENT"
    assert spans["outer"].attributes == {"k": "v", "conductor.request_id": "req-2"}


def test_an_exception_ends_the_span_naming_its_type_not_its_message(tracer, exporter) -> None:
    def traced():
        telemetry.bind(None, tracer)
        with pytest.raises(RuntimeError), telemetry.span("fails"):
            raise RuntimeError("Bearer sk-secret-do-not-export")

    in_context(traced)
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code == StatusCode.ERROR
    assert span.status.description == "RuntimeError"
    assert span.events == ()  # no exception event, so no message and no traceback
    assert "sk-secret" not in repr(dict(span.attributes))
    assert "conductor.request_id" not in span.attributes


def test_a_solve_with_a_bound_tracer_is_workflow_plan_step_and_call_spans(tracer, exporter) -> None:
    pool_config = load_pool(bundled_pool_path())

    async def run():
        telemetry.bind("req-3", tracer)
        async with WorkerPool(pool_config) as pool:
            return await solve(
                QUESTION, ScriptedPlanSource(), pool, options=solve_options(pool_config)
            )

    trace = asyncio.run(in_context(run))
    spans = exporter.get_finished_spans()
    by_id = {s.context.span_id: s for s in spans}
    (workflow,) = [s for s in spans if s.name == "conductor.workflow"]
    assert workflow.parent is None
    assert workflow.attributes["conductor.calls"] == trace.calls
    plans = [s for s in spans if s.name == "conductor.plan"]
    steps = [s for s in spans if s.name == "conductor.step"]
    calls = [s for s in spans if s.name == "conductor.worker_call"]
    assert len(plans) == len(trace.rounds) and len(steps) == len(calls) == trace.calls > 0
    for s in plans + steps:
        assert s.parent.span_id == workflow.context.span_id
    for call in calls:
        step = by_id[call.parent.span_id]
        assert step.name == "conductor.step"
        assert call.attributes["conductor.worker.id"] == step.attributes["conductor.worker.id"]
        assert call.attributes["gen_ai.usage.output_tokens"] > 0
    assert {s.attributes["conductor.request_id"] for s in spans} == {"req-3"}


def test_a_failed_worker_call_is_an_error_span_naming_its_kind(tracer, exporter) -> None:
    from conductor_core.workers.types import ErrorKind, ProviderError

    class Down:
        async def complete(self, messages, *, sample_index=0):
            raise ProviderError("HTTP 503 from http://10.0.0.1", kind=ErrorKind.SERVER)

        async def aclose(self):
            return None

    pool_config = load_pool(bundled_pool_path())
    for w in pool_config.workers:
        w.max_retries = 0

    async def run():
        telemetry.bind("req-4", tracer)
        pool = WorkerPool(pool_config, providers=[Down() for _ in pool_config.workers])
        async with pool:
            return await pool.call(0, [{"role": "user", "content": QUESTION}])

    result = asyncio.run(in_context(run))
    assert result.error_kind == ErrorKind.SERVER
    (call,) = exporter.get_finished_spans()
    assert call.status.status_code == StatusCode.ERROR
    assert call.status.description == ErrorKind.SERVER
    assert "10.0.0.1" not in repr(dict(call.attributes))
