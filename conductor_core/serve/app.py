"""The gateway's FastAPI app: thin routes over :class:`~conductor_core.serve.serving.
ConductorServing`, built once per lifespan.

Routes: ``POST /v1/chat/completions`` and ``GET /v1/models`` (API key and rate limit; chat
completions also under the global and per-key concurrency limits), ``GET /healthz`` (the process
is alive), ``GET /readyz`` (this replica can serve: started, not draining, the Conductor answered
within a cached window; the workers are not asked), ``GET /metrics`` (Prometheus text). A client
that disconnects from a chat completion cancels its workflow. Every error is an OpenAI error
object with the right status, and ``x-should-retry: false`` when sending the same request again
cannot succeed. Every response carries ``X-Request-ID`` (the client's, when it sent a sane one)
and every request is logged once (JSON when the CLI configured it) without keys or bodies.
``app.openapi()`` returns the description of :mod:`~conductor_core.serve.openapi`.
"""

# No ``from __future__ import annotations``: FastAPI reads the handlers' real annotations, and
# fastapi is imported lazily inside :func:`create_app`.

import asyncio
import contextlib
import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

from conductor_core.errors import require
from conductor_core.policy.base import PlanSource
from conductor_core.serve import api_adapters
from conductor_core.serve.auth import (
    ApiKeyAuth,
    ConcurrencyLimiter,
    SpendQuota,
    TokenBucketLimiter,
    load_api_keys,
)
from conductor_core.serve.config import MODEL_VERSION_ENV, GatewayConfig
from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.serve.openapi import openapi_description
from conductor_core.serve.protocol import (
    RETRYABLE_STATUSES,
    SANE_REQUEST_ID,
    SHOULD_RETRY_HEADER,
    ModelCard,
    ModelList,
    RequestError,
    error_body,
    parse_chat_request,
)
from conductor_core.workers.config import PoolConfig

__all__ = ["create_app", "read_body"]

logger = logging.getLogger("conductor.gateway")
access_logger = logging.getLogger("conductor.gateway.access")

REQUEST_ID_HEADER = "x-request-id"
_ROUTES = ("/v1/chat/completions", "/v1/models", "/healthz", "/readyz", "/metrics")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""The HTTP methods counted under their own name; any other is counted as ``other``, so that a
client cannot create metric series (or log fields) at will."""


class RequestContextMiddleware:
    """Pure ASGI middleware: request id (echoed as ``X-Request-ID``), timing, the access log
    line, request metrics, and an OpenAI-format 500 for anything unhandled."""

    def __init__(self, app: Any, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = ""
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                given = value.decode("latin-1")
                break
        request_id = given if SANE_REQUEST_ID.match(given) else uuid.uuid4().hex
        start = time.perf_counter()
        scope.setdefault("state", {}).update(request_id=request_id, received_at=start)
        status = 500
        started = False

        async def send_wrapped(message: dict[str, Any]) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapped)
        except Exception:
            logger.exception("unhandled error", extra={"request_id": request_id})
            if not started:
                import json

                body = json.dumps(
                    error_body(
                        f"internal server error (request id {request_id})",
                        "server_error",
                        code="internal_error",
                    )
                ).encode()
                await send_wrapped(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
        finally:
            seconds = time.perf_counter() - start
            path = scope.get("path", "")
            route = path if path in _ROUTES else "other"
            method = scope.get("method", "")
            method = method if method in _METHODS else "other"
            self.metrics.observe_request(route, method, status, seconds)
            state = scope.get("state", {})
            client = scope.get("client")
            access_logger.info(
                "%s %s %d",
                method,
                route,
                status,
                extra={
                    "request_id": request_id,
                    "method": method,
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                    "key_id": state.get("key_id"),
                    "client": client[0] if client else None,
                },
            )


async def read_body(
    request: Any,
    limit: int,
    timeout_s: float | None = None,
    on_timeout: Callable[[], None] | None = None,
) -> bytes:
    """The request body, read up to ``limit`` bytes within ``timeout_s`` seconds (None: no
    time limit; ``on_timeout`` is called when it runs out).

    Raises:
        RequestError: 413 when the declared or actual body is larger than ``limit``; 408
            ``request_read_timeout`` (with ``Connection: close``, so that the server drops the
            connection) when the body did not arrive in time; 499 ``client_disconnected`` when
            the client went away before sending it all.
    """
    from starlette.requests import ClientDisconnect

    too_large = RequestError(
        413,
        f"request body too large: the limit is {limit} bytes",
        code="request_too_large",
    )
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise too_large
        except ValueError:
            raise RequestError(400, "invalid Content-Length header") from None
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
    except TimeoutError:
        if on_timeout is not None:
            on_timeout()
        raise RequestError(
            408,
            f"the request body did not arrive within {timeout_s:g}s",
            code="request_read_timeout",
            headers={"Connection": "close"},
        ) from None
    except ClientDisconnect:
        raise RequestError(
            499,
            "the client closed the connection while sending the body",
            code="client_disconnected",
        ) from None
    return b"".join(chunks)


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
    responses = require("fastapi.responses", extra="serve", purpose="the Conductor gateway")
    exceptions = require("starlette.exceptions", extra="serve", purpose="the Conductor gateway")
    JSONResponse = responses.JSONResponse
    StreamingResponse = responses.StreamingResponse
    Response = responses.Response

    from conductor_core.serve.serving import ConductorServing
    from conductor_core.serve.tracing import GatewayTracing

    config = config or GatewayConfig()
    auth = ApiKeyAuth(load_api_keys(config))
    limiter = failures = None
    if config.rate_limit_per_minute:
        limiter = TokenBucketLimiter(config.rate_limit_per_minute, config.rate_limit_burst)
        # failed authentications, per client address: guessing keys costs the same as calling
        failures = TokenBucketLimiter(config.rate_limit_per_minute, config.rate_limit_burst)
    quota = (
        SpendQuota(config.spend_quota, config.spend_quota_period_s)
        if config.spend_quota is not None
        else None
    )
    concurrency = ConcurrencyLimiter(
        config.max_concurrent_requests, config.max_concurrent_requests_per_key
    )
    concurrency_limited = (
        config.max_concurrent_requests is not None
        or config.max_concurrent_requests_per_key is not None
    )
    metrics = GatewayMetrics()
    metrics.set_build_info(config.model_name, os.environ.get(MODEL_VERSION_ENV))
    tracing = GatewayTracing.create(tracer_provider)
    if pool is None:
        from conductor_core.workers.bundled import bundled_pool_path
        from conductor_core.workers.config import load_pool

        pool = load_pool(bundled_pool_path())
    pool_config = pool
    created = int(time.time())

    @contextlib.asynccontextmanager
    async def lifespan(app: Any):
        if not auth.enabled:
            logger.warning(
                "no API keys configured (api_keys_file, $CONDUCTOR_API_KEYS_FILE, $%s): the "
                "gateway is OPEN to anyone who can reach it",
                config.api_keys_env,
            )
        source = plan_source
        if source is None:
            from conductor_core.policy.factory import load_plan_source

            source = load_plan_source("scripted")
        serving = ConductorServing(
            config,
            pool_config,
            source,
            metrics=metrics,
            quota=quota,
            tracer=tracing.tracer if tracing is not None else None,
            **(serving_kwargs or {}),
        )
        app.state.serving = serving
        serving.start()
        logger.info(
            "gateway ready: model %s, %d workers, plan source %s",
            config.model_name,
            len(pool_config.workers),
            type(source).__name__,
        )
        try:
            yield
        finally:
            await serving.aclose()
            if tracing is not None:
                await tracing.aclose()  # the last spans exported
            logger.info("gateway stopped")

    app = fastapi.FastAPI(
        title="Conductor gateway",
        version="1",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
    )
    app.state.metrics = metrics
    app.state.config = config
    app.state.concurrency = concurrency
    app.add_middleware(RequestContextMiddleware, metrics=metrics)
    if tracing is not None:
        tracing.instrument(app)

    class SlotStreamingResponse(StreamingResponse):
        """A stream that holds its request's concurrency slot until the response is over, however
        it ends (sent, failed, or the client gone), then closes its generator, whose cleanup
        cancels a workflow still running."""

        def __init__(self, content: Any, slot: Any, **kwargs: Any) -> None:
            super().__init__(content, **kwargs)
            self.slot = slot

        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            try:
                await super().__call__(scope, receive, send)
            finally:
                self.slot.release()
                aclose = getattr(self.body_iterator, "aclose", None)
                if aclose is not None:
                    with contextlib.suppress(Exception):
                        await aclose()

    def json_response(body: bytes):
        """A 200 with an already encoded JSON body (FastAPI's jsonable_encoder pass skipped)."""
        return Response(content=body, media_type="application/json")

    def error_response(exc: RequestError):
        return JSONResponse(status_code=exc.status, content=exc.body(), headers=exc.headers)

    @app.exception_handler(RequestError)
    async def on_request_error(request: fastapi.Request, exc: RequestError):
        return error_response(exc)

    @app.exception_handler(exceptions.HTTPException)
    async def on_http_error(request: fastapi.Request, exc: exceptions.HTTPException):
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        detail = exc.detail if isinstance(exc.detail, str) else "request rejected"
        message = f"{detail}: {request.method[:16]} {request.url.path[:200]}"
        headers = dict(getattr(exc, "headers", None) or {})
        if 400 <= exc.status_code < 500 and exc.status_code not in RETRYABLE_STATUSES:
            headers[SHOULD_RETRY_HEADER] = "false"  # an unknown route stays unknown
        return JSONResponse(
            status_code=exc.status_code, content=error_body(message, kind), headers=headers
        )

    def guard(request: fastapi.Request) -> str:
        """API key, then the caller's rate limit and spend quota; returns the caller (the key
        id, or the client address when the gateway is open).

        The key is checked first and only failures are throttled: with a rate limit, each
        failed authentication spends a bucket of the client address, whose empty bucket turns
        the 401 into a 429. A valid key is never refused by it, so a client behind the same
        address (an ingress, a NAT) sending bad keys cannot lock out the others. The address is
        the peer's, or X-Forwarded-For's when the peer is a trusted proxy
        (``config.forwarded_allow_ips``, applied by uvicorn).
        """
        address = request.client.host if request.client else "unknown"
        try:
            key = auth.authenticate(request.headers.get("authorization"))
        except RequestError:
            if failures is not None:
                failures.acquire(address)  # 429 once the address has spent its bucket
            raise
        request.state.key_id = key
        caller = key or address
        if limiter is not None:
            limiter.acquire(caller)
        if quota is not None:
            quota.check(caller)
        return caller

    def count_body_timeout() -> None:
        metrics.read_timeouts.labels(phase="body").inc()

    async def client_gone(receive: Any) -> None:
        """Returns when the client disconnects. Once the body is read, the server's next
        ``receive()`` message is ``http.disconnect`` (waiting costs nothing until then)."""
        while (await receive())["type"] != "http.disconnect":
            pass

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(request: fastapi.Request):
        serving = getattr(request.app.state, "serving", None)
        if serving is None:  # the lifespan has not started (or has ended)
            ready, checks = False, {"gateway": "starting"}
        else:
            ready, checks = await serving.readiness()
        status = "ready" if ready else "not_ready"
        return JSONResponse(
            status_code=200 if ready else 503, content={"status": status, "checks": checks}
        )

    @app.get("/metrics")
    async def prometheus_metrics():
        body, content_type = metrics.render()
        return Response(content=body, media_type=content_type)

    @app.get("/v1/models")
    async def models(request: fastapi.Request):
        guard(request)
        card = ModelCard(id=config.model_name, created=created, owned_by="conductor")
        return json_response(ModelList(data=[card]).to_json_bytes())

    async def solve(
        request: fastapi.Request,
        parse: Callable[[bytes], Any],
        events: Callable[[Any], Any] | None = None,
        answer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ):
        """Solve a request as a chat completion: ``parse`` turns the body into the chat request
        it stands for; a streamed answer's chat events go through ``events``, a finished chat
        completion (its JSON) through ``answer`` (None: as they are, the chat API's own)."""
        caller = guard(request)
        serving = request.app.state.serving
        raw = await read_body(
            request, config.max_body_bytes, config.body_timeout_s, count_body_timeout
        )
        body = parse(raw)
        job = serving.prepare(body, request.state.request_id, caller)
        slot = concurrency.acquire(caller)  # a slot only for a request that will run
        if body.stream:
            stream = serving.stream_chat_completion(job, request.state.received_at)
            return SlotStreamingResponse(
                events(stream) if events else stream,
                slot,
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        with slot:
            response = await serving.chat_completion(job, client_gone(request.receive))
        if answer is None:
            return json_response(response.to_json_bytes())
        return JSONResponse(answer(response.to_json()))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: fastapi.Request):
        return await solve(request, parse_chat_request)

    @app.post("/v1/responses")
    async def responses(request: fastapi.Request):
        """OpenAI's Responses API, text only (:mod:`conductor_core.serve.api_adapters`)."""
        meta = api_adapters.new_meta(config.model_name)
        return await solve(
            request,
            api_adapters.chat_request,
            lambda stream: api_adapters.response_events(meta, stream),
            lambda completion: api_adapters.from_chat_completion(meta, completion),
        )

    @app.post("/v1/completions")
    async def completions(request: fastapi.Request):
        """The legacy completions API, text only: the prompt asked as a chat completion."""
        return await solve(
            request,
            api_adapters.completions_chat_request,
            api_adapters.completion_events,
            api_adapters.completion_from_chat,
        )

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            base = get_openapi(title=app.title, version=app.version, routes=app.routes)
            app.openapi_schema = openapi_description(
                base,
                config=config,
                pool=pool_config,
                auth_enabled=auth.enabled,
                rate_limited=limiter is not None or quota is not None,
                concurrency_limited=concurrency_limited,
            )
        return app.openapi_schema

    app.openapi = openapi
    return app
