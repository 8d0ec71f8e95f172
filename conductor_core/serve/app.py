"""The gateway's FastAPI app: thin routes over :class:`~conductor_core.serve.serving.
ConductorServing`, built once per lifespan.

Routes: ``POST /v1/chat/completions`` and ``GET /v1/models`` (API key and rate limit), ``GET
/healthz`` (the process is alive), ``GET /readyz`` (the plan source and the pool's endpoints
answer), ``GET /metrics`` (Prometheus text). Every error is an OpenAI error object with the right
status. Every response carries ``X-Request-ID`` (the client's, when it sent a sane one) and every
request is logged once (JSON when the CLI configured it) without keys or bodies.
"""

# No ``from __future__ import annotations``: FastAPI reads the handlers' real annotations, and
# fastapi is imported lazily inside :func:`create_app`.

import contextlib
import logging
import re
import time
import uuid
from typing import Any

from conductor_core.errors import require
from conductor_core.policy.base import PlanSource
from conductor_core.serve.auth import ApiKeyAuth, TokenBucketLimiter, load_api_keys
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.serve.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ErrorResponse,
    ModelCard,
    ModelList,
    RequestError,
    error_body,
    parse_chat_request,
)
from conductor_core.workers.config import PoolConfig

__all__ = ["create_app", "openapi_description", "read_body"]

logger = logging.getLogger("conductor.gateway")
access_logger = logging.getLogger("conductor.gateway.access")

REQUEST_ID_HEADER = "x-request-id"
_SANE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_ROUTES = ("/v1/chat/completions", "/v1/models", "/healthz", "/readyz", "/metrics")


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
        request_id = given if _SANE_ID.match(given) else uuid.uuid4().hex
        scope.setdefault("state", {})["request_id"] = request_id
        start = time.perf_counter()
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


async def read_body(request: Any, limit: int) -> bytes:
    """The request body, read up to ``limit`` bytes.

    Raises:
        RequestError: 413 when the declared or actual body is larger than ``limit``.
    """
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
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise too_large
        chunks.append(chunk)
    return b"".join(chunks)


_ERROR_STATUSES = {
    "400": "Invalid request: body not JSON or not an object, an invalid field (`param` names "
    "it), a conversation not ending with a user question, `n` > 1.",
    "401": "Missing or wrong API key (`Authorization: Bearer <key>`).",
    "404": "Another model than the served one (`model_not_found`).",
    "413": "Request body over `max_body_bytes` (`request_too_large`).",
    "429": "The caller's rate limit is exhausted; retry after `Retry-After` seconds.",
    "500": "A bug in the gateway (`internal_error`; the message names the request id).",
    "502": "The Conductor's plan did not parse, a worker failed or the Conductor is unreachable.",
    "504": "The workflow ran past `request_timeout_s` (`request_timeout`).",
}


def openapi_description(
    base: dict[str, Any],
    *,
    config: GatewayConfig,
    pool: PoolConfig,
    auth_enabled: bool,
    rate_limited: bool,
) -> dict[str, Any]:
    """The gateway's OpenAPI description: FastAPI's skeleton (``base``, paths and operation ids)
    with the real request and response bodies, statuses and headers of every route.

    The chat route reads its body itself (to enforce the body limit before parsing), so FastAPI
    cannot see its schema; it is described here from the models of :mod:`.protocol`, narrowed to
    this deployment: the served model id, ``n`` = 1, the pool's workers and the rounds limit of
    the ``conductor`` extension. 401 is listed (and a bearer security scheme declared) only when
    keys are configured, 429 only when a rate limit is. Not served (no docs routes); tests and
    clients can use it.
    """
    from pydantic.json_schema import models_json_schema

    refs, defs = models_json_schema(
        [
            (ChatCompletionRequest, "validation"),
            (ChatCompletionResponse, "serialization"),
            (ModelList, "serialization"),
            (ErrorResponse, "serialization"),
        ],
        ref_template="#/components/schemas/{model}",
    )
    request_ref = refs[(ChatCompletionRequest, "validation")]
    response_ref = refs[(ChatCompletionResponse, "serialization")]
    models_ref = refs[(ModelList, "serialization")]
    error_ref = refs[(ErrorResponse, "serialization")]
    request_id = {
        "X-Request-ID": {
            "description": "The client's request id when it sent a sane one, else a fresh one.",
            "required": True,
            "schema": {"type": "string", "pattern": _SANE_ID.pattern},
        }
    }

    def json_body(schema: dict[str, Any], description: str, **extra_headers: Any):
        return {
            "description": description,
            "headers": {**request_id, **extra_headers},
            "content": {"application/json": {"schema": schema}},
        }

    def errors(*statuses: str) -> dict[str, Any]:
        out = {}
        for status in statuses:
            if (status == "401" and not auth_enabled) or (status == "429" and not rate_limited):
                continue
            headers = {}
            if status == "429":
                headers["Retry-After"] = {
                    "description": "Whole seconds to wait before retrying.",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 1},
                }
            out[status] = json_body(error_ref, _ERROR_STATUSES[status], **headers)
        return out

    readiness = {
        "type": "object",
        "properties": {
            "status": {"enum": ["ready", "not_ready"]},
            "checks": {"type": "object", "additionalProperties": {"type": "string"}},
        },
        "required": ["status", "checks"],
    }
    sse_event = {  # OpenAPI 3.1: the schema of one server-sent event
        "type": "object",
        "properties": {
            "data": {
                "type": "string",
                "description": "A chat.completion.chunk (JSON), an OpenAI error object (JSON) "
                "after a failure, or the final [DONE].",
            }
        },
        "required": ["data"],
    }
    operations: dict[tuple[str, str], dict[str, Any]] = {
        ("/healthz", "get"): {
            "200": json_body(
                {
                    "type": "object",
                    "properties": {"status": {"const": "ok"}},
                    "required": ["status"],
                },
                "The process is alive.",
            ),
            **errors("500"),
        },
        ("/readyz", "get"): {
            "200": json_body(readiness, "The plan source and the pool's endpoints answer."),
            "503": json_body(readiness, "Not ready: the failing checks are named."),
            **errors("500"),
        },
        ("/metrics", "get"): {
            "200": {
                "description": "Prometheus text exposition.",
                "headers": request_id,
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
            **errors("500"),
        },
        ("/v1/models", "get"): {
            "200": json_body(models_ref, "The one served model."),
            **errors("401", "429", "500"),
        },
        ("/v1/chat/completions", "post"): {
            "200": {
                "description": "A chat.completion, or with `stream: true` server-sent "
                "chat.completion.chunk events ending with `data: [DONE]`.",
                "headers": request_id,
                "content": {
                    "application/json": {"schema": response_ref},
                    "text/event-stream": {"schema": sse_event},
                },
            },
            **errors("400", "401", "404", "413", "429", "500", "502", "504"),
        },
    }
    schemas = _narrow_request_schemas(defs.get("$defs", {}), config, pool)
    schema = dict(base)
    components = dict(schema.get("components") or {})
    components["schemas"] = {**components.get("schemas", {}), **schemas}
    if auth_enabled:
        components["securitySchemes"] = {
            "apiKey": {"type": "http", "scheme": "bearer", "description": "A gateway API key."}
        }
    schema["components"] = components
    paths = {path: dict(item) for path, item in schema.get("paths", {}).items()}
    for (path, method), responses in operations.items():
        operation = dict(paths.get(path, {}).get(method, {}))
        operation["responses"] = responses
        if path.startswith("/v1/") and auth_enabled:
            operation["security"] = [{"apiKey": []}]
        if path == "/v1/chat/completions":
            example = {
                "model": config.model_name,
                "messages": [{"role": "user", "content": "What is 6 times 7?"}],
            }
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": request_ref, "example": example}},
            }
        paths.setdefault(path, {})[method] = operation
    schema["paths"] = paths
    return schema


def _narrow_request_schemas(
    schemas: dict[str, Any], config: GatewayConfig, pool: PoolConfig
) -> dict[str, Any]:
    """Copies of the request schemas shared with the simulator, narrowed to what this gateway
    accepts (the rest, such as a conversation ending with a user message, is checked in code)."""
    import copy

    schemas = copy.deepcopy(schemas)
    request = schemas["ChatCompletionRequest"]["properties"]
    request["model"]["anyOf"] = [{"enum": [config.model_name]}, {"type": "null"}]
    request["n"].update(minimum=1, maximum=1)
    conductor = schemas["ConductorOptions"]["properties"]
    rounds = conductor["max_rounds"]["anyOf"][0]
    rounds["maximum"] = config.max_rounds_limit
    workers = pool.workers
    names: dict[str, int] = {}
    for w in workers:
        for name in {w.name, w.model} - {""}:
            names[name] = names.get(name, 0) + 1
    refs: list[dict[str, Any]] = [{"type": "integer", "minimum": 0, "maximum": len(workers) - 1}]
    unique = sorted(name for name, count in names.items() if count == 1)
    if unique:
        refs.append({"enum": unique})
    items = conductor["workers"]["anyOf"][0]
    items["items"] = {"anyOf": refs}
    items["uniqueItems"] = True
    return schemas


def create_app(
    config: GatewayConfig | None = None,
    *,
    pool: PoolConfig | None = None,
    plan_source: PlanSource | None = None,
    serving_kwargs: dict[str, Any] | None = None,
):
    """Build the gateway app.

    Args:
        config: gateway settings (defaults: :class:`GatewayConfig`).
        pool: the worker pool (default: the bundled simulated pool).
        plan_source: the plan source (default: the embedded ``scripted`` one); the app owns it
            and closes it at shutdown.
        serving_kwargs: extra keyword arguments of
            :class:`~conductor_core.serve.serving.ConductorServing` (``rng``, ``trace_logger``).

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

    config = config or GatewayConfig()
    auth = ApiKeyAuth(load_api_keys(config))
    limiter = (
        TokenBucketLimiter(config.rate_limit_per_minute, config.rate_limit_burst)
        if config.rate_limit_per_minute
        else None
    )
    metrics = GatewayMetrics()
    if pool is None:
        from conductor_core.workers.config import load_pool
        from conductor_core.workers.simulated import bundled_pool_path

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
            config, pool_config, source, metrics=metrics, **(serving_kwargs or {})
        )
        app.state.serving = serving
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
    app.add_middleware(RequestContextMiddleware, metrics=metrics)

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
        message = f"{detail}: {request.method} {request.url.path}"
        return JSONResponse(
            status_code=exc.status_code,
            content=error_body(message, kind),
            headers=getattr(exc, "headers", None),
        )

    def guard(request: fastapi.Request) -> None:
        """API key, then the caller's rate limit."""
        key = auth.authenticate(request.headers.get("authorization"))
        request.state.key_id = key
        if limiter is not None:
            caller = key or (request.client.host if request.client else "unknown")
            limiter.acquire(caller)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(request: fastapi.Request):
        ready, checks = await request.app.state.serving.readiness()
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

    @app.post("/v1/chat/completions")
    async def chat_completions(request: fastapi.Request):
        guard(request)
        serving = request.app.state.serving
        body = parse_chat_request(await read_body(request, config.max_body_bytes))
        job = serving.prepare(body, request.state.request_id)
        if body.stream:
            return StreamingResponse(
                serving.stream_chat_completion(job),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        response = await serving.chat_completion(job)
        return json_response(response.to_json_bytes())

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            from fastapi.openapi.utils import get_openapi

            base = get_openapi(title=app.title, version=app.version, routes=app.routes)
            app.openapi_schema = openapi_description(
                base,
                config=config,
                pool=pool_config,
                auth_enabled=auth.enabled,
                rate_limited=limiter is not None,
            )
        return app.openapi_schema

    app.openapi = openapi
    return app
