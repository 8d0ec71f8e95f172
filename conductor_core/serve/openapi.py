"""The gateway's OpenAPI description (``app.openapi()``; no docs route serves it).

It comes from the routes and the models. FastAPI generates the paths, the operations and every
response from the route declarations of :mod:`.routes`: the bodies of each status from the
models (:class:`~.protocol.ChatCompletionResponse`, :class:`~.protocol.ModelList`,
:class:`~.protocol.ErrorResponse`, ...) and the headers declared with them here
(:func:`errors`, :data:`REQUEST_ID`). The request bodies are the JSON schemas pydantic gives the
request models (:data:`REQUEST_MODELS`), referenced by each route through :func:`json_body`:
the routes read their bodies raw (size and time limits, strict JSON, before any model sees
them), so FastAPI cannot declare them itself.

Written by hand, each where a model cannot say it:

* the schema of a server-sent event (:data:`SSE_EVENT`): a stream is no JSON body, and OpenAPI
  3.1 has no way to describe a sequence of events, only one of them;
* the deployment's narrowing (:func:`openapi_description`): the models are shared by every
  gateway (and the worker simulator), while the served model id, the pool's workers, the
  server's limits on the ``conductor`` options, whether keys are configured (401, the bearer
  scheme) and which limits can refuse a request (429) belong to one configuration.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from conductor_core.serve.admission import Gatekeeper
from conductor_core.serve.api_adapters import CompletionsRequest, ResponsesRequest
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.protocol import (
    RETRYABLE_STATUSES,
    SANE_REQUEST_ID,
    SHOULD_RETRY_HEADER,
    UNSUPPORTED_PARAMETERS,
    ChatCompletionRequest,
    ErrorResponse,
)
from conductor_core.workers.config import PoolConfig

__all__ = [
    "REQUEST_ID",
    "REQUEST_MODELS",
    "SSE_EVENT",
    "errors",
    "json_body",
    "openapi_description",
    "openapi_of",
    "with_request_id",
]

REQUEST_MODELS: tuple[type[BaseModel], ...] = (
    ChatCompletionRequest,
    ResponsesRequest,
    CompletionsRequest,
)
"""The request bodies the routes read, published under ``components.schemas``."""

_ERROR = {"$ref": "#/components/schemas/ErrorResponse"}
"""The OpenAI error object, published with the request models and referenced by every error
response: not as each route's ``model``, which FastAPI files under the route's own media type,
while ``/metrics`` answers text but errs in JSON like every route."""

REQUEST_ID = {
    "X-Request-ID": {
        "description": "The client's request id when it sent a sane one, else a fresh one.",
        "required": True,
        "schema": {"type": "string", "pattern": SANE_REQUEST_ID.pattern},
    }
}
"""The header on every response (:mod:`.middleware`)."""

SSE_EVENT = {
    "type": "object",
    "properties": {
        "data": {
            "type": "string",
            "description": "A chunk (JSON), an OpenAI error object (JSON) after a failure, or "
            "the final [DONE].",
        }
    },
    "required": ["data"],
}
"""The schema of one server-sent event of a stream (see the module's description)."""

_LIMITS = "x-refused-by"
"""Key of a declared 429 that names the limits able to refuse the route (``rate``,
``concurrency``); read and removed by :func:`openapi_description`."""

_ERROR_STATUSES = {
    400: "Invalid request: body not JSON or not an object, an invalid field (`param` names "
    "it), a string that is not valid Unicode or a number that is not finite, a conversation "
    "not ending with a user question, a `conductor` option above the server's limit, a "
    "parameter the gateway does not honour (`unsupported_parameter`: `n` > 1, tools, log "
    "probabilities, audio), a `response_format` schema that is not a JSON Schema, or a "
    "request the Conductor's server "
    "refused (`conductor_rejected_request`, e.g. a prompt longer than its context).",
    401: "Missing or wrong API key (`Authorization: Bearer <key>`).",
    404: "Another model than the served one (`model_not_found`).",
    408: "The request body did not arrive within `body_timeout_s` (`request_read_timeout`; "
    "the connection is closed).",
    413: "Request body over `max_body_bytes` (`request_too_large`).",
    429: "The caller's rate limit is exhausted (`rate_limit_exceeded`), too many requests "
    "are in flight (`concurrency_limit_exceeded`) or the caller's spend quota is spent "
    "(`insufficient_quota`: `spend_quota_exceeded`, until the period ends); retry after "
    "`Retry-After` seconds.",
    500: "A bug in the gateway (`internal_error`; the message names the request id).",
    502: "The Conductor's plan did not parse, a worker failed, the answer is not in the "
    "requested `response_format` (`response_format_unmet`) or the Conductor is unreachable.",
    504: "The workflow ran past `request_timeout_s` (`request_timeout`).",
}


def with_request_id(description: str | None = None, **response: Any) -> dict[str, Any]:
    """A declared response (``responses=`` of a route) with the ``X-Request-ID`` header."""
    out = {"headers": dict(REQUEST_ID), **response}
    if description is not None:
        out["description"] = description
    return out


def errors(*statuses: int, refused_by: tuple[str, ...] = ("rate",)) -> dict[int, Any]:
    """The declared error responses of a route: the OpenAI error object
    (:class:`~.protocol.ErrorResponse`) with what each status means, ``x-should-retry: false``
    where the same request cannot succeed and ``Retry-After`` on a 429 (``refused_by``: the
    limits that can refuse this route, ``rate`` (rate limit, spend quota) and
    ``concurrency``)."""
    out: dict[int, Any] = {}
    for status in statuses:
        headers = dict(REQUEST_ID)
        extra: dict[str, Any] = {}
        if status == 429:
            headers["Retry-After"] = {
                "description": "Whole seconds to wait before retrying.",
                "required": True,
                "schema": {"type": "integer", "minimum": 1},
            }
            extra[_LIMITS] = list(refused_by)
        elif 400 <= status < 500 and status not in RETRYABLE_STATUSES:
            headers[SHOULD_RETRY_HEADER] = {
                "description": "`false`: the same request cannot succeed (the OpenAI SDKs "
                "then do not retry).",
                "required": True,
                "schema": {"const": "false"},
            }
        out[status] = {
            "description": _ERROR_STATUSES[status],
            "headers": headers,
            "content": {"application/json": {"schema": _ERROR}},
            **extra,
        }
    return out


def json_body(model: type[BaseModel], example: dict[str, Any]) -> dict[str, Any]:
    """The ``openapi_extra`` of a route that reads a body of ``model`` itself: the required JSON
    request body, as the model's schema (one of :data:`REQUEST_MODELS`)."""
    if model not in REQUEST_MODELS:
        raise ValueError(f"{model.__name__} is not published: add it to REQUEST_MODELS")
    schema = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": schema, "example": example}},
        }
    }


def openapi_description(
    base: dict[str, Any],
    *,
    config: GatewayConfig,
    pool: PoolConfig,
    auth_enabled: bool,
    rate_limited: bool,
    concurrency_limited: bool = False,
) -> dict[str, Any]:
    """The gateway's OpenAPI description: FastAPI's document of the routes (``base``) with the
    request models' schemas, narrowed to this deployment.

    The request schemas are narrowed to what this gateway accepts (the served model id, the
    values of the parameters it does not honour that ask for nothing (``n`` = 1, no tools,
    ...), the pool's workers and the server's limits on the ``conductor`` extension), and the
    examples name the served model. 401 is listed (and a bearer security scheme declared) only
    when keys are configured, 429 only when a limit that can refuse the route is set
    (``rate_limited``: a rate limit or a spend quota; ``concurrency_limited``: for the routes
    that declared it).
    """
    _, defs = models_json_schema(
        [*((model, "validation") for model in REQUEST_MODELS), (ErrorResponse, "serialization")],
        ref_template="#/components/schemas/{model}",
    )
    schema = copy.deepcopy(base)
    components = schema.setdefault("components", {})
    published = components.setdefault("schemas", {})
    for name, request_schema in _narrow_request_schemas(defs["$defs"], config, pool).items():
        if published.get(name, request_schema) != request_schema:
            raise ValueError(f"two schemas named {name!r}: rename one of the models")
        published[name] = request_schema
    if auth_enabled:
        components["securitySchemes"] = {
            "apiKey": {"type": "http", "scheme": "bearer", "description": "A gateway API key."}
        }
    limits = {"rate": rate_limited, "concurrency": concurrency_limited}
    for path, item in schema.get("paths", {}).items():
        for operation in item.values():
            responses = operation.get("responses", {})
            if not auth_enabled:
                responses.pop("401", None)
            too_many = responses.get("429")
            if too_many is not None and not any(limits[k] for k in too_many.pop(_LIMITS, ())):
                del responses["429"]
            if path.startswith("/v1/") and auth_enabled:
                operation["security"] = [{"apiKey": []}]
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None and "model" in body.get("example", {}):
                body["example"]["model"] = config.model_name
    return schema


def openapi_of(
    app: Any, config: GatewayConfig, pool: PoolConfig, gatekeeper: Gatekeeper
) -> Callable[[], dict[str, Any]]:
    """``app.openapi`` for a gateway app: its description (:func:`openapi_description`), built
    once, for the deployment of ``config``, ``pool`` and ``gatekeeper`` (its keys and limits)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            base = get_openapi(title=app.title, version=app.version, routes=app.routes)
            app.openapi_schema = openapi_description(
                base,
                config=config,
                pool=pool,
                auth_enabled=gatekeeper.auth.enabled,
                rate_limited=gatekeeper.rate_limited,
                concurrency_limited=gatekeeper.concurrency_limited,
            )
        return app.openapi_schema

    return openapi


def _narrow_request_schemas(
    schemas: dict[str, Any], config: GatewayConfig, pool: PoolConfig
) -> dict[str, Any]:
    """Copies of the request schemas shared with the simulator, narrowed to what this gateway
    accepts (the rest, such as a conversation ending with a user message, is checked in code)."""
    schemas = copy.deepcopy(schemas)
    request = schemas["ChatCompletionRequest"]["properties"]
    request["model"]["anyOf"] = [{"enum": [config.model_name]}, {"type": "null"}]
    for item in UNSUPPORTED_PARAMETERS:  # only the values that ask for nothing unsupported
        described = request[item.name]
        request[item.name] = {
            **copy.deepcopy(item.schema),
            "description": described.get("description", "") + " Other values: 400 "
            "unsupported_parameter.",
        }
        if "default" in described:
            request[item.name]["default"] = described["default"]
    conductor = schemas["ConductorOptions"]["properties"]
    conductor["max_rounds"]["anyOf"][0]["maximum"] = config.max_rounds_limit
    conductor["max_steps"]["anyOf"][0]["maximum"] = config.max_steps
    budget = schemas["BudgetOptions"]["properties"]
    limits = {
        "max_tokens": config.max_tokens,
        "max_cost": config.max_cost,
        "deadline_s": config.deadline_s
        if config.deadline_s is not None
        else config.request_timeout_s,
    }
    for name, limit in limits.items():
        if limit is not None:
            budget[name]["anyOf"][0]["maximum"] = limit
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
