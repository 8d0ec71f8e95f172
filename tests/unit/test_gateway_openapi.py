"""The gateway's OpenAPI description comes from its routes and models: every route is on the
module-level router, each answer's schema is its response model's, each error the OpenAI error
object, each request body the request model's schema; only the deployment's narrowing (keys,
limits, the served model) is applied on top."""

from __future__ import annotations

import pytest

from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig

pytest.importorskip("fastapi")

KEYS_ENV = "OPENAPI_TEST_KEYS"

ANSWERS = {  # path, method -> the model of its JSON answer
    ("/healthz", "get"): "HealthStatus",
    ("/readyz", "get"): "ReadinessStatus",
    ("/v1/models", "get"): "ModelList",
    ("/v1/chat/completions", "post"): "ChatCompletionResponse",
    ("/v1/responses", "post"): "ResponseObject",
    ("/v1/completions", "post"): "TextCompletion",
}
BODIES = {
    "/v1/chat/completions": "ChatCompletionRequest",
    "/v1/responses": "ResponsesRequest",
    "/v1/completions": "CompletionsRequest",
}


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def test_every_route_is_on_the_module_level_router():
    from conductor_core.serve.routes import router

    described = create_app(GatewayConfig()).openapi()["paths"]
    served = {(path, method.upper()) for path, item in described.items() for method in item}
    declared = {(r.path, m) for r in router.routes for m in r.methods}
    assert declared == served
    assert {path for path, _ in declared} == {p for p, _ in ANSWERS} | {"/metrics"}


def test_answers_errors_and_bodies_come_from_the_models(monkeypatch):
    monkeypatch.setenv(KEYS_ENV, "sk-openapi-test-key-0123456789")
    config = GatewayConfig(api_keys_env=KEYS_ENV, rate_limit_per_minute=60, model_name="m-1")
    described = create_app(config).openapi()
    paths, schemas = described["paths"], described["components"]["schemas"]
    for (path, method), model in ANSWERS.items():
        responses = paths[path][method]["responses"]
        assert responses["200"]["content"]["application/json"]["schema"] == ref(model)
        assert model in schemas
        for status, response in responses.items():
            assert "X-Request-ID" in response["headers"], (path, status)
            assert not any(key.startswith("x-") for key in response), (path, status)
            if int(status) >= 400 and status != "503":
                assert response["content"] == {"application/json": {"schema": ref("ErrorResponse")}}
    for path, model in BODIES.items():
        body = paths[path]["post"]["requestBody"]
        assert body["required"] is True
        assert body["content"]["application/json"]["schema"] == ref(model)
        assert body["content"]["application/json"]["example"]["model"] == "m-1"  # narrowed
        assert model in schemas
    assert paths["/metrics"]["get"]["responses"]["200"]["content"] == {
        "text/plain": {"schema": {"type": "string"}}
    }
    assert schemas["ChatCompletionRequest"]["properties"]["model"]["anyOf"][0] == {"enum": ["m-1"]}
    # the stream of each chat route is described as events, beside its JSON answer
    for path in BODIES:
        assert "text/event-stream" in paths[path]["post"]["responses"]["200"]["content"]


def test_a_deployment_without_limits_lists_no_429_and_one_without_keys_no_401():
    bare = GatewayConfig(max_concurrent_requests=None, max_concurrent_requests_per_key=None)
    paths = create_app(bare).openapi()["paths"]
    for item in paths.values():
        for operation in item.values():
            assert "401" not in operation["responses"] and "429" not in operation["responses"]
    concurrent = create_app(GatewayConfig(max_concurrent_requests=8)).openapi()["paths"]
    assert "429" in concurrent["/v1/chat/completions"]["post"]["responses"]
    assert "429" in concurrent["/v1/responses"]["post"]["responses"]
    assert "429" not in concurrent["/v1/models"]["get"]["responses"]  # no concurrency limit there
