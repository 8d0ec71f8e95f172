"""When the gateway traces (:mod:`conductor_core.serve.tracing`): the standard ``OTEL_*``
settings switch it on, settings it cannot honour leave it off, its spans name the gateway's
service, and a client's key never reaches a span, even with every request header captured.
In-process (no socket); over loopback with HTTP workers: tests/integration/test_gateway_tracing.py.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from conductor_core import __version__
from conductor_core.serve.app import create_app
from conductor_core.serve.config import MODEL_VERSION_ENV, GatewayConfig
from conductor_core.serve.tracing import (
    DEFAULT_SERVICE_NAME,
    GatewayTracing,
    gateway_resource,
    tracing_requested,
)
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

pytest.importorskip("opentelemetry.instrumentation.fastapi")
pytest.importorskip("prometheus_client")

from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

ENDPOINT = "http://collector.monitoring:4318"
KEY = "sk-tracing-0123456789abcdef"
KEYS_ENV = "CONDUCTOR_TRACING_TEST_KEYS"


@pytest.mark.parametrize(
    ("env", "on"),
    [
        ({}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT}, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": ENDPOINT + "/v1/traces"}, True),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_SDK_DISABLED": "true"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "none"}, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, "OTEL_TRACES_EXPORTER": "otlp"}, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, False),  # nowhere to send them
    ],
)
def test_the_standard_settings_switch_tracing_on(env: dict[str, str], on: bool) -> None:
    assert tracing_requested(env) is on
    if not on:
        assert GatewayTracing.create(environ=env) is None


@pytest.mark.parametrize(
    "extra",
    [
        {"OTEL_TRACES_EXPORTER": "console"},
        {"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"},
        {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"},
    ],
)
def test_settings_the_gateway_cannot_honour_leave_it_off_with_a_warning(
    extra: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="conductor.gateway"):
        assert not tracing_requested({"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT, **extra})
    assert "tracing off" in caplog.text


def test_an_environment_provider_is_owned_and_closed_a_callers_is_not() -> None:
    tracing = GatewayTracing.create(environ={"OTEL_EXPORTER_OTLP_ENDPOINT": ENDPOINT})
    assert tracing is not None and tracing.owned
    asyncio.run(tracing.aclose())  # nothing exported yet: stops its batch thread at once
    given = TracerProvider()
    mine = GatewayTracing.create(given)
    assert mine is not None and mine.provider is given and not mine.owned
    asyncio.run(mine.aclose())
    with given.get_tracer("t").start_as_current_span("still open") as span:
        assert span.is_recording()  # the caller's provider was left running


def test_the_resource_names_the_gateway_unless_the_environment_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OTEL_SERVICE_NAME", raising=False)
    monkeypatch.delenv("OTEL_RESOURCE_ATTRIBUTES", raising=False)
    attrs = gateway_resource().attributes
    assert attrs["service.name"] == DEFAULT_SERVICE_NAME
    assert attrs["service.version"] == __version__
    monkeypatch.setenv("OTEL_SERVICE_NAME", "gateway-eu")
    monkeypatch.setenv("OTEL_RESOURCE_ATTRIBUTES", "service.version=9,deployment.environment=prod")
    attrs = gateway_resource().attributes
    assert attrs["service.name"] == "gateway-eu"
    assert attrs["service.version"] == "9"
    assert attrs["deployment.environment"] == "prod"


def test_build_info_names_the_served_model_and_its_version(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pool = load_pool(bundled_pool_path())
    monkeypatch.setenv(MODEL_VERSION_ENV, "12")
    app = create_app(GatewayConfig(model_name="conductor-eu"), pool=pool)
    labels = {"version": __version__, "model": "conductor-eu", "model_version": "12"}
    assert app.state.metrics.value("conductor_gateway_build_info", labels) == 1


@pytest.mark.parametrize("version", ["models:/conductor/7", None])
def test_v1_models_shows_the_served_models_version(
    monkeypatch: pytest.MonkeyPatch, version: str | None
) -> None:
    """The version the deployment pinned ($CONDUCTOR_MODEL_VERSION, set by the chart) is in
    /v1/models, as in build_info; null when it does not say."""
    if version is None:
        monkeypatch.delenv(MODEL_VERSION_ENV, raising=False)
    else:
        monkeypatch.setenv(MODEL_VERSION_ENV, version)
    app = create_app(GatewayConfig(model_name="conductor-eu"), pool=load_pool(bundled_pool_path()))

    async def go() -> httpx.Response:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
                return await client.get("/v1/models")

    response = asyncio.run(go())
    assert response.status_code == 200
    (card,) = response.json()["data"]
    assert card["id"] == "conductor-eu" and card["object"] == "model"
    assert card["conductor"] == {"model_version": version}
    labels = {
        "version": __version__,
        "model": "conductor-eu",
        "model_version": version or "unknown",
    }
    assert app.state.metrics.value("conductor_gateway_build_info", labels) == 1


def test_no_key_reaches_a_span_even_with_every_header_captured(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(KEYS_ENV, KEY)
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST", ".*")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_RESPONSE", ".*")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(
        GatewayConfig(api_keys_env=KEYS_ENV),
        pool=load_pool(bundled_pool_path()),
        tracer_provider=provider,
    )

    async def main() -> list[httpx.Response]:
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://gw") as c:
                body = {"model": "conductor", "messages": [{"role": "user", "content": "6*7?"}]}
                auth = {"Authorization": f"Bearer {KEY}", "X-Api-Key": KEY}
                return [
                    await c.post("/v1/chat/completions", json=body, headers=auth),
                    await c.post("/v1/chat/completions", json=body),  # 401
                    await c.get("/metrics"),
                    await c.get("/healthz"),
                ]

    answered, refused, _, _ = asyncio.run(main())
    assert answered.status_code == 200 and refused.status_code == 401
    spans = exporter.get_finished_spans()
    servers = [s for s in spans if s.kind.name == "SERVER"]
    assert len(servers) == 2  # the probe and the scrape have none
    captured = servers[0].attributes
    assert captured["http.request.header.authorization"] == ("[REDACTED]",)
    assert captured["http.request.header.x_api_key"] == ("[REDACTED]",)
    dump = json.dumps([dict(s.attributes) for s in spans] + [s.name for s in spans])
    assert KEY not in dump
    assert "conductor.workflow" in dump
