"""The gateway's FastAPI app (:func:`create_app`): the routes of :mod:`.routes` over one
:class:`~conductor_core.serve.serving.ConductorServing`, built once per lifespan
(:mod:`.lifespan`).

Routes: ``POST /v1/chat/completions``, ``POST /v1/responses`` and ``POST /v1/completions`` (API
key, rate limit and spend quota, then the global and per-key concurrency limits), ``GET
/v1/models`` (API key and rate limit), ``GET /healthz`` (the process is alive), ``GET /readyz``
(this replica can serve: started, not draining, the Conductor answered within a cached window;
the workers are not asked), ``GET /metrics`` (Prometheus text). A client that disconnects from a
chat completion cancels its workflow. Every error is an OpenAI error object with the right
status, and ``x-should-retry: false`` when sending the same request again cannot succeed. Every
response carries ``X-Request-ID`` (the client's, when it sent a sane one) and every request is
logged once (JSON when the CLI configured it) without keys or bodies
(:mod:`.middleware`). ``app.openapi()`` returns the description of :mod:`.openapi`.
"""

from __future__ import annotations

import os
import time
from typing import Any

from conductor_core.errors import require
from conductor_core.policy.base import PlanSource
from conductor_core.serve.admission import Gatekeeper
from conductor_core.serve.config import MODEL_VERSION_ENV, GatewayConfig
from conductor_core.serve.lifespan import GatewayLifespan
from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.serve.middleware import RequestContextMiddleware
from conductor_core.serve.protocol import ModelCard, ModelList, ServedModel
from conductor_core.serve.request_body import read_body
from conductor_core.serve.tracing import GatewayTracing
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import PoolConfig, load_pool

__all__ = ["RequestContextMiddleware", "create_app", "read_body"]


def create_app(
    config: GatewayConfig | None = None,
    *,
    pool: PoolConfig | None = None,
    plan_source: PlanSource | None = None,
    serving_kwargs: dict[str, Any] | None = None,
    tracer_provider: Any = None,
):
    """Build the gateway app.

    Args:
        config: gateway settings (defaults: :class:`GatewayConfig`).
        pool: the worker pool (default: the bundled simulated pool).
        plan_source: the plan source (default: the embedded ``scripted`` one); the app owns it
            and closes it at shutdown.
        serving_kwargs: extra keyword arguments of
            :class:`~conductor_core.serve.serving.ConductorServing` (``rng``, ``trace_logger``).
        tracer_provider: an OpenTelemetry ``TracerProvider`` to trace requests with (tests pass
            one with an in-memory exporter); default: one from the ``OTEL_*`` environment when
            it asks for tracing, else none (:mod:`conductor_core.serve.tracing`).

    The API keys are read here (a missing keys file raises :class:`ConfigError` before anything
    starts); the pool and the :class:`ConductorServing` are built at startup and drained and
    closed at shutdown. ``app.state.serving`` and ``app.state.metrics`` are exposed for tests.
    """
    fastapi = require("fastapi", extra="serve", purpose="the Conductor gateway")
    # lazy: openapi and routes import fastapi (the `serve` extra), known present only from here
    from conductor_core.serve import openapi, routes

    config = config or GatewayConfig()
    if pool is None:
        pool = load_pool(bundled_pool_path())
    gatekeeper = Gatekeeper.from_config(config)
    model_version = os.environ.get(MODEL_VERSION_ENV)
    metrics = GatewayMetrics()
    metrics.set_build_info(config.model_name, model_version)
    tracing = GatewayTracing.create(tracer_provider)
    lifespan = GatewayLifespan(
        config,
        pool,
        plan_source,
        metrics=metrics,
        quota=gatekeeper.quota,
        tracing=tracing,
        serving_kwargs=serving_kwargs,
        open_gateway=not gatekeeper.auth.enabled,
    )
    app = fastapi.FastAPI(
        title="Conductor gateway",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        exception_handlers=routes.EXCEPTION_HANDLERS,
    )
    served = ServedModel(model_version=model_version)
    card = ModelCard(id=config.model_name, created=int(time.time()), conductor=served)
    app.state.config = config
    app.state.metrics = metrics
    app.state.gatekeeper = gatekeeper
    app.state.concurrency = gatekeeper.concurrency
    app.state.models = ModelList(data=[card]).to_json_bytes()  # the /v1/models body
    app.include_router(routes.router)
    app.add_middleware(RequestContextMiddleware, metrics=metrics)
    if tracing is not None:
        tracing.instrument(app)
    app.openapi = openapi.openapi_of(app, config, pool, gatekeeper)
    return app
