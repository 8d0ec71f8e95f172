"""The gateway's OpenAPI description (:func:`openapi_description`), which
:func:`~conductor_core.serve.app.create_app` serves as ``app.openapi()``: FastAPI's skeleton of
the routes completed with the real request and response bodies, statuses and headers, narrowed to
the deployment (served model, pool, limits)."""

from __future__ import annotations

from typing import Any

from conductor_core.serve.api_adapters import RESPONSE_SCHEMA, CompletionsRequest, ResponsesRequest
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.protocol import (
    RETRYABLE_STATUSES,
    SANE_REQUEST_ID,
    SHOULD_RETRY_HEADER,
    UNSUPPORTED_PARAMETERS,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ErrorResponse,
    ModelList,
)
from conductor_core.workers.config import PoolConfig

__all__ = ["openapi_description"]


_ERROR_STATUSES = {
    "400": "Invalid request: body not JSON or not an object, an invalid field (`param` names "
    "it), a string that is not valid Unicode or a number that is not finite, a conversation "
    "not ending with a user question, a `conductor` option above the server's limit, a "
    "parameter the gateway does not honour (`unsupported_parameter`: `n` > 1, tools, log "
    "probabilities, audio), a `response_format` schema that is not a JSON Schema, or a "
    "request the Conductor's server "
    "refused (`conductor_rejected_request`, e.g. a prompt longer than its context).",
    "401": "Missing or wrong API key (`Authorization: Bearer <key>`).",
    "404": "Another model than the served one (`model_not_found`).",
    "408": "The request body did not arrive within `body_timeout_s` (`request_read_timeout`; "
    "the connection is closed).",
    "413": "Request body over `max_body_bytes` (`request_too_large`).",
    "429": "The caller's rate limit is exhausted (`rate_limit_exceeded`), too many requests "
    "are in flight (`concurrency_limit_exceeded`) or the caller's spend quota is spent "
    "(`insufficient_quota`: `spend_quota_exceeded`, until the period ends); retry after "
    "`Retry-After` seconds.",
    "500": "A bug in the gateway (`internal_error`; the message names the request id).",
    "502": "The Conductor's plan did not parse, a worker failed, the answer is not in the "
    "requested `response_format` (`response_format_unmet`) or the Conductor is unreachable.",
    "504": "The workflow ran past `request_timeout_s` (`request_timeout`).",
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
    """The gateway's OpenAPI description: FastAPI's skeleton (``base``, paths and operation ids)
    with the real request and response bodies, statuses and headers of every route.

    The chat route reads its body itself (to enforce the body limit before parsing), so FastAPI
    cannot see its schema; it is described here from the models of :mod:`.protocol`, narrowed to
    this deployment: the served model id, the values of the parameters it does not honour that
    ask for nothing (``n`` = 1, no tools, ...), the pool's workers and the server's limits on the
    ``conductor`` extension. 401 is listed (and a bearer security scheme declared) only when
    keys are configured, 429 only when a rate limit or a spend quota (or, for chat completions,
    a concurrency limit) is. Not served (no docs routes); tests and clients can use it.
    """
    from pydantic.json_schema import models_json_schema

    refs, defs = models_json_schema(
        [
            (ChatCompletionRequest, "validation"),
            (ResponsesRequest, "validation"),
            (CompletionsRequest, "validation"),
            (ChatCompletionResponse, "serialization"),
            (ModelList, "serialization"),
            (ErrorResponse, "serialization"),
        ],
        ref_template="#/components/schemas/{model}",
    )
    request_ref = refs[(ChatCompletionRequest, "validation")]
    responses_ref = refs[(ResponsesRequest, "validation")]
    completions_ref = refs[(CompletionsRequest, "validation")]
    response_ref = refs[(ChatCompletionResponse, "serialization")]
    models_ref = refs[(ModelList, "serialization")]
    error_ref = refs[(ErrorResponse, "serialization")]
    request_id = {
        "X-Request-ID": {
            "description": "The client's request id when it sent a sane one, else a fresh one.",
            "required": True,
            "schema": {"type": "string", "pattern": SANE_REQUEST_ID.pattern},
        }
    }

    def json_body(schema: dict[str, Any], description: str, **extra_headers: Any):
        return {
            "description": description,
            "headers": {**request_id, **extra_headers},
            "content": {"application/json": {"schema": schema}},
        }

    def errors(*statuses: str, limited: bool = rate_limited) -> dict[str, Any]:
        out = {}
        for status in statuses:
            if (status == "401" and not auth_enabled) or (status == "429" and not limited):
                continue
            headers = {}
            if status == "429":
                headers["Retry-After"] = {
                    "description": "Whole seconds to wait before retrying.",
                    "required": True,
                    "schema": {"type": "integer", "minimum": 1},
                }
            elif status.startswith("4") and int(status) not in RETRYABLE_STATUSES:
                headers[SHOULD_RETRY_HEADER] = {
                    "description": "`false`: the same request cannot succeed (the OpenAI SDKs "
                    "then do not retry).",
                    "required": True,
                    "schema": {"const": "false"},
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
            "200": json_body(
                readiness,
                "This replica can serve: started, not draining, and the Conductor answered "
                "within the cached window (the workers are not asked).",
            ),
            "503": json_body(
                readiness, "Not ready (starting, draining, or the Conductor does not answer)."
            ),
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
            **errors(
                "400",
                "401",
                "404",
                "408",
                "413",
                "429",
                "500",
                "502",
                "504",
                limited=rate_limited or concurrency_limited,
            ),
        },
    }
    operations[("/v1/responses", "post")] = {
        **operations[("/v1/chat/completions", "post")],  # the same errors, as the same path
        "200": {
            "description": "A response object (OpenAI's Responses API, text only), or with "
            "`stream: true` its server-sent events, from `response.created` to "
            "`response.completed` (`response.incomplete` when cut to `max_output_tokens`; "
            "`error` after a failure).",
            "headers": request_id,
            "content": {
                "application/json": {"schema": RESPONSE_SCHEMA},
                "text/event-stream": {"schema": sse_event},
            },
        },
    }
    operations[("/v1/completions", "post")] = {
        **operations[("/v1/chat/completions", "post")],
        "200": {
            "description": "A text_completion, or with `stream: true` its server-sent chunks "
            "ending with `data: [DONE]`.",
            "headers": request_id,
            "content": {
                "application/json": {"schema": {"type": "object", "required": ["choices"]}},
                "text/event-stream": {"schema": sse_event},
            },
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
    question = "What is 6 times 7?"
    bodies = {  # path -> (request body schema, example)
        "/v1/chat/completions": (
            request_ref,
            {"model": config.model_name, "messages": [{"role": "user", "content": question}]},
        ),
        "/v1/completions": (completions_ref, {"model": config.model_name, "prompt": question}),
        "/v1/responses": (responses_ref, {"model": config.model_name, "input": question}),
    }
    for (path, method), responses in operations.items():
        operation = dict(paths.get(path, {}).get(method, {}))
        operation["responses"] = responses
        if path.startswith("/v1/") and auth_enabled:
            operation["security"] = [{"apiKey": []}]
        if path in bodies:
            body_schema, example = bodies[path]
            operation["requestBody"] = {
                "required": True,
                "content": {"application/json": {"schema": body_schema, "example": example}},
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
