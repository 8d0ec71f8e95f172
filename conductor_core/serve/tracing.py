"""OpenTelemetry tracing of the gateway: off unless the standard ``OTEL_*`` environment asks for it.

What is traced (one trace per request; see docs/serving.md, "Tracing"):

* each HTTP request, a server span from the FastAPI instrumentation
  (``opentelemetry-instrumentation-fastapi``), continuing the client's ``traceparent``; the probe
  and scrape routes (``/healthz``, ``/readyz``, ``/metrics``) are left out;
* inside it the library's spans (:mod:`conductor_core.telemetry`): ``conductor.workflow``
  (the round loop), ``conductor.plan`` (each call of the Conductor), ``conductor.step`` (each
  executed step) and ``conductor.worker_call`` (each worker call, retries included); the HTTP
  calls to the workers and to the Conductor's server carry the trace context (``traceparent``)
  and ``X-Request-ID``, so a vLLM started with ``--otlp-traces-endpoint`` adds its spans under
  them.

When: a tracer provider passed to :func:`~conductor_core.serve.app.create_app` (tests pass one
with an in-memory exporter), else one built here when ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_ENDPOINT`` is set, unless ``OTEL_SDK_DISABLED=true`` or
``OTEL_TRACES_EXPORTER=none``. It exports over OTLP/HTTP (protobuf) in batches; the exporter
reads its own settings (``OTEL_EXPORTER_OTLP_HEADERS``, timeouts, certificates), the provider its
sampler (``OTEL_TRACES_SAMPLER``, default: parent-based, always on) and resource
(``OTEL_SERVICE_NAME``, default ``conductor-gateway``; ``OTEL_RESOURCE_ATTRIBUTES``). A setting
the gateway cannot honour (another exporter or protocol) is a warning and leaves tracing off:
tracing never stops a gateway from serving.

The provider is the app's own (not installed as the global one); one built here is flushed and
shut down when the app stops (:meth:`GatewayTracing.aclose`). OpenTelemetry is imported only
when tracing is on.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from conductor_core import __version__
from conductor_core.errors import require

__all__ = ["DEFAULT_SERVICE_NAME", "GatewayTracing", "tracing_requested"]

logger = logging.getLogger("conductor.gateway")

DEFAULT_SERVICE_NAME = "conductor-gateway"
"""``service.name`` of the gateway's spans when ``OTEL_SERVICE_NAME`` (or the resource
attributes) names none."""

UNTRACED_ROUTES = "/healthz$,/readyz$,/metrics$"
"""The routes without server spans (probes and scrapes), as the instrumentation's list of URL
regular expressions."""

SECRET_HEADER_PATTERNS = (
    "authorization",
    "cookie",
    "key",
    "token",
    "secret",
    "password",
    "credential",
)
"""Header names (searched, case-insensitive) whose values are redacted should an operator ask
the instrumentation to capture request or response headers
(``OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SERVER_REQUEST``): a key never reaches a span."""

_PURPOSE = "OpenTelemetry tracing of the gateway"


def tracing_requested(environ: Mapping[str, str]) -> bool:
    """Whether the ``OTEL_*`` settings in ``environ`` ask for traces exported over OTLP/HTTP: an
    OTLP endpoint is set and neither the SDK nor trace export is switched off. Settings the
    gateway cannot honour are logged as a warning and answer False."""
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {
        e.strip().lower()
        for e in environ.get("OTEL_TRACES_EXPORTER", "otlp").split(",")
        if e.strip()
    }
    if not exporters or exporters == {"none"}:
        return False
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not endpoint:
        return False
    if exporters != {"otlp"}:
        logger.warning(
            "tracing off: OTEL_TRACES_EXPORTER=%s; the gateway exports traces over OTLP only "
            "(otlp, or none)",
            ",".join(sorted(exporters)),
        )
        return False
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or "http/protobuf"
    ).strip()
    if protocol != "http/protobuf":
        logger.warning(
            "tracing off: OTLP protocol %r; the gateway sends http/protobuf (set "
            "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf and the collector's HTTP endpoint, "
            "usually port 4318)",
            protocol,
        )
        return False
    return True


class GatewayTracing:
    """The tracing of one gateway app: its tracer provider, the instrumentation of its routes
    and the tracer of its workflows.

    Args:
        provider: an OpenTelemetry ``TracerProvider``.
        owned: the provider was built here (:meth:`shutdown` then flushes and closes it); a
            caller's provider is left to the caller.
    """

    def __init__(self, provider: Any, *, owned: bool = False) -> None:
        self.provider = provider
        self.owned = owned

        self.tracer = provider.get_tracer("conductor_core", __version__)

    @classmethod
    def create(
        cls, provider: Any = None, environ: Mapping[str, str] | None = None
    ) -> GatewayTracing | None:
        """The tracing of a new app: with ``provider`` when given, else with one built from
        ``environ`` (default: the process environment) when it asks for tracing
        (:func:`tracing_requested`), else None (tracing off)."""
        if provider is not None:
            return cls(provider)
        environ = os.environ if environ is None else environ
        if not tracing_requested(environ):
            return None
        return cls(_otlp_provider(environ), owned=True)

    def instrument(self, app: Any) -> None:
        """Give ``app`` (the gateway's FastAPI app) server spans for its requests."""
        instrumentation = require(
            "opentelemetry.instrumentation.fastapi",
            extra="serve",
            purpose=_PURPOSE,
            package="opentelemetry-instrumentation-fastapi",
        )
        env = os.environ
        excluded = ",".join(
            filter(None, [UNTRACED_ROUTES, env.get("OTEL_PYTHON_FASTAPI_EXCLUDED_URLS", "")])
        )
        sanitized = [
            *SECRET_HEADER_PATTERNS,
            *_csv(env.get("OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_SANITIZE_FIELDS", "")),
        ]
        instrumentation.FastAPIInstrumentor.instrument_app(
            app,
            tracer_provider=self.provider,
            excluded_urls=excluded,
            # no span per ASGI message: a stream would get one per chunk
            exclude_spans=["receive", "send"],
            http_capture_headers_sanitize_fields=sanitized,
        )

    async def aclose(self) -> None:
        """Flush and close a provider built here, in a thread (exporting may take up to the
        exporter's timeout); a caller's provider is left alone."""
        if not self.owned:
            return
        try:
            await asyncio.to_thread(self.provider.shutdown)
        except Exception as exc:  # tracing must never fail a shutdown
            logger.warning("could not export the last traces: %s", type(exc).__name__)


def _otlp_provider(environ: Mapping[str, str]) -> Any:
    """A tracer provider exporting in batches over OTLP/HTTP, configured by ``environ``."""
    sdk_trace = require(
        "opentelemetry.sdk.trace", extra="serve", purpose=_PURPOSE, package="opentelemetry-sdk"
    )
    export = require(
        "opentelemetry.sdk.trace.export",
        extra="serve",
        purpose=_PURPOSE,
        package="opentelemetry-sdk",
    )
    otlp = require(
        "opentelemetry.exporter.otlp.proto.http.trace_exporter",
        extra="serve",
        purpose=_PURPOSE,
        package="opentelemetry-exporter-otlp-proto-http",
    )
    provider = sdk_trace.TracerProvider(resource=gateway_resource())
    provider.add_span_processor(export.BatchSpanProcessor(otlp.OTLPSpanExporter()))
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT", ""
    )
    logger.info("tracing on: spans exported over OTLP/HTTP to %s", _host(endpoint))
    return provider


def gateway_resource() -> Any:
    """The resource of the gateway's spans: the environment's (``OTEL_SERVICE_NAME``,
    ``OTEL_RESOURCE_ATTRIBUTES``), with ``service.name`` ``conductor-gateway`` when it names no
    service and ``service.version`` the package's version when it gives none."""
    from opentelemetry.sdk.resources import Resource

    detected = Resource.create()
    defaults: dict[str, str] = {}
    if str(detected.attributes.get("service.name", "")).startswith("unknown_service"):
        defaults["service.name"] = DEFAULT_SERVICE_NAME
    if "service.version" not in detected.attributes:
        defaults["service.version"] = __version__
    return detected.merge(Resource(defaults)) if defaults else detected


def _host(url: str) -> str:
    """``host[:port]`` of ``url``, without any credentials it holds (for the log)."""
    try:
        parts = urlsplit(url)
        return (parts.hostname or "?") + (f":{parts.port}" if parts.port else "")
    except ValueError:
        return "?"


def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]
