"""Traces and metrics of the gateway over real HTTP on loopback: the gateway (uvicorn, lifespan on,
the scripted plan source) calls its workers as OpenAI-compatible endpoints on the worker
simulator, which records the headers each worker call brings. Spans are collected in memory
(the SDK's ``InMemorySpanExporter``), and once through the real OTLP/HTTP exporter configured by
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` to a collector on loopback.
"""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import openai
import pytest

from conductor_core import __version__
from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.simulation.server import create_app as create_simulator
from conductor_core.simulation.server import running_app
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool
from tests.integration.test_gateway import metric
from tests.integration.test_gateway_streaming import gateway_pool

pytest.importorskip("prometheus_client")
pytest.importorskip("opentelemetry.instrumentation.fastapi")

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

QUESTION = "What is 6 times 7?"
CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_PARENT = "b7ad6b7169203331"


class HeaderRecorder:
    """ASGI middleware keeping the headers of each chat completion request that reaches the
    wrapped app (the worker simulator), with whether it asked for a stream."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls: list[dict[str, str]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/v1/chat/completions":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body = b""
        replayed = False

        async def replay() -> dict[str, Any]:
            """The body read here, then what the connection brings (its disconnect)."""
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers["(stream)"] = str(bool(json.loads(body).get("stream")))
        self.calls.append(headers)
        await self.app(scope, replay, send)


@pytest.fixture
def traced():
    """(gateway URL .../v1, the in-memory exporter, the simulator's header recorder), per test:
    the gateway's event loop (and the thread that its streamed calls' DNS lookups start) ends
    with the test."""
    simulated = load_pool(bundled_pool_path())
    recorder = HeaderRecorder(create_simulator(simulated))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with running_app(recorder) as sim_url:
        app = create_app(
            GatewayConfig(), pool=gateway_pool(simulated, sim_url), tracer_provider=provider
        )
        with running_app(app, lifespan="on") as url:
            yield url, exporter, recorder
    provider.shutdown()


def trace_of(exporter: InMemorySpanExporter, request_id: str) -> list[ReadableSpan]:
    """The spans of request ``request_id`` (found through its workflow span's
    ``conductor.request_id``): those of its trace, once its server span has ended too (the
    server ends it after the response's last byte, so maybe after the client has read it)."""
    deadline = time.monotonic() + 5
    while True:
        spans = exporter.get_finished_spans()
        (workflow,) = [
            s
            for s in spans
            if s.name == "conductor.workflow" and s.attributes["conductor.request_id"] == request_id
        ]
        found = [s for s in spans if s.context.trace_id == workflow.context.trace_id]
        if any(s.kind.name == "SERVER" for s in found) or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def chain(spans: list[ReadableSpan]) -> dict[str, Any]:
    """The request's spans by role, after checking that each is the child it should be:
    request (server) > workflow > plan and steps; step > worker call."""
    by_id = {s.context.span_id: s for s in spans}
    (server,) = [s for s in spans if s.kind.name == "SERVER"]
    (workflow,) = [s for s in spans if s.name == "conductor.workflow"]
    plans = [s for s in spans if s.name == "conductor.plan"]
    steps = [s for s in spans if s.name == "conductor.step"]
    calls = [s for s in spans if s.name == "conductor.worker_call"]
    assert server.attributes["http.route"] == "/v1/chat/completions"
    assert workflow.parent.span_id == server.context.span_id
    assert plans and all(p.parent.span_id == workflow.context.span_id for p in plans)
    assert steps and all(s.parent.span_id == workflow.context.span_id for s in steps)
    assert len(calls) == len(steps)
    for call in calls:
        step = by_id[call.parent.span_id]
        assert step.name == "conductor.step"
        assert call.attributes["conductor.worker.id"] == step.attributes["conductor.worker.id"]
        assert call.kind.name == "CLIENT"
    return {"server": server, "workflow": workflow, "steps": steps, "calls": calls}


def received(recorder: HeaderRecorder, request_id: str) -> list[dict[str, str]]:
    return [h for h in recorder.calls if h.get("x-request-id") == request_id]


def traceparent(span: ReadableSpan) -> str:
    ctx = span.context
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def test_a_request_is_one_trace_down_to_the_headers_its_workers_receive(traced) -> None:
    url, exporter, recorder = traced
    client_context = f"00-{CLIENT_TRACE}-{CLIENT_PARENT}-01"
    response = httpx.post(
        f"{url}/chat/completions",
        json={"model": "conductor", "messages": [{"role": "user", "content": QUESTION}]},
        headers={"X-Request-ID": "trace-plain-1", "traceparent": client_context},
        timeout=30,
    )
    assert response.status_code == 200, response.text
    spans = trace_of(exporter, "trace-plain-1")
    roles = chain(spans)
    # the client's trace goes on: the server span is the child of the client's span
    assert f"{roles['server'].context.trace_id:032x}" == CLIENT_TRACE
    assert f"{roles['server'].parent.span_id:016x}" == CLIENT_PARENT
    # each worker received its call's span as the parent of whatever it traces, and the id
    calls = received(recorder, "trace-plain-1")
    assert sorted(h["traceparent"] for h in calls) == sorted(map(traceparent, roles["calls"]))
    assert all(h["(stream)"] == "False" for h in calls)


def test_a_streamed_answer_carries_the_trace_on_its_streamed_worker_call_too(traced) -> None:
    url, exporter, recorder = traced
    with openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="conductor",
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
            extra_headers={"X-Request-ID": "trace-stream-1"},
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text
    roles = chain(trace_of(exporter, "trace-stream-1"))
    calls = received(recorder, "trace-stream-1")
    assert sorted(h["traceparent"] for h in calls) == sorted(map(traceparent, roles["calls"]))
    # the last step's call streamed (the SDK's HTTP client), the others did not (the small one)
    assert sorted(h["(stream)"] for h in calls) == ["False"] * (len(calls) - 1) + ["True"]


def test_metrics_show_worker_latency_time_to_first_token_and_the_build(traced) -> None:
    url, _, _ = traced
    base = url.removesuffix("/v1")
    before = httpx.get(f"{base}/metrics").text
    with openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
        stream = client.chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": QUESTION}], stream=True
        )
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    text = httpx.get(f"{base}/metrics").text
    ttft = "conductor_gateway_time_to_first_token_seconds"
    assert metric(text, ttft + "_count") == metric(before, ttft + "_count") + 1
    assert metric(text, ttft + "_sum") > metric(before, ttft + "_sum")
    latency = "conductor_gateway_worker_latency_seconds"
    workers = {
        line.split('worker="')[1].split('"')[0]
        for line in text.splitlines()
        if line.startswith(latency + "_count{")
    }
    assert workers  # those the streamed request's plan called
    calls = "conductor_gateway_worker_calls_total"
    for worker in workers:
        assert metric(text, latency + "_count", worker=worker) == metric(text, calls, worker=worker)
        assert metric(text, latency + "_sum", worker=worker) > 0
    labels = {"version": __version__, "model": "conductor", "model_version": "unknown"}
    assert metric(text, "conductor_gateway_build_info", **labels) == 1


def test_spans_reach_an_otlp_collector_named_by_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    bodies: list[bytes] = []

    async def collector(scope: dict[str, Any], receive: Any, send: Any) -> None:
        """An OTLP/HTTP trace receiver: keeps each export, answers it as a collector does."""
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/v1/traces":
            bodies.append(body)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/x-protobuf")],
            }
        )
        await send(
            {"type": "http.response.body", "body": ExportTraceServiceResponse().SerializeToString()}
        )

    pool = load_pool(bundled_pool_path())
    with running_app(collector) as collector_url:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{collector_url}/traces")
        monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
        monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
        app = create_app(GatewayConfig(), pool=pool)
        with running_app(app, lifespan="on") as url:
            response = httpx.post(
                f"{url}/chat/completions",
                json={"model": "conductor", "messages": [{"role": "user", "content": QUESTION}]},
                headers={"X-Request-ID": "trace-otlp-1"},
                timeout=30,
            )
            assert response.status_code == 200
        # the app's shutdown exported what the batch still held
    assert bodies
    names: set[str] = set()
    services: set[str] = set()
    for body in bodies:
        export = ExportTraceServiceRequest.FromString(body)
        for resource_spans in export.resource_spans:
            for attribute in resource_spans.resource.attributes:
                if attribute.key == "service.name":
                    services.add(attribute.value.string_value)
            for scope_spans in resource_spans.scope_spans:
                names.update(span.name for span in scope_spans.spans)
    assert services == {"conductor-gateway"}
    assert {"conductor.workflow", "conductor.plan", "conductor.step"} <= names
    assert "POST /v1/chat/completions" in names
