"""Property-based fuzzing of the gateway from its own OpenAPI description (schemathesis).

The gateway serves no docs routes, so the description comes from ``app.openapi()``. The app runs
in uvicorn on loopback (lifespan on) with the bundled simulated pool, the embedded scripted plan
source, an API key and a small body limit. Every generated request (valid and invalid bodies,
every route) must get no 5xx, a declared status code and content type, the declared headers
(``X-Request-ID``) and a body that conforms to the schema: the OpenAI error object for every
4xx. Invalid bodies must be rejected, and the key must be enforced. Deterministic
(``derandomize``) and bounded (``max_examples``): about 15 s on two cores.
"""

from __future__ import annotations

import json
import os
from unittest import mock

import httpx
import pytest

from conductor_core.serve.app import create_app
from conductor_core.serve.config import API_KEYS_FILE_ENV, GatewayConfig
from conductor_core.serve.protocol import ChatCompletionChunk
from conductor_core.simulation.server import running_app
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

pytest.importorskip("prometheus_client")
schemathesis = pytest.importorskip("schemathesis")
hypothesis = pytest.importorskip("hypothesis")

from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance,
    ignored_auth,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

pytestmark = pytest.mark.slow

KEY = "sk-fuzz-0123456789abcdef"
KEYS_ENV = "CONDUCTOR_FUZZ_TEST_KEYS"
MAX_BODY = 2048
MAX_EXAMPLES = 150
QUESTION = "What is 6 times 7?"
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    ignored_auth,
]
AUTH = {"Authorization": f"Bearer {KEY}"}


def build_app(**overrides):
    """A gateway app whose only API key is ``KEY`` (read from a variable at creation, so that
    the schema can be built at import time, as ``schema.parametrize`` needs)."""
    config = GatewayConfig(api_keys_env=KEYS_ENV, **overrides)
    environ = {KEYS_ENV: KEY} if "rate_limit_per_minute" not in overrides else {}
    with mock.patch.dict(os.environ, environ):
        os.environ.pop(API_KEYS_FILE_ENV, None)
        return create_app(config, pool=load_pool(bundled_pool_path()))


APP = build_app(max_body_bytes=MAX_BODY)
schema = schemathesis.openapi.from_dict(APP.openapi())
schema.config.generation.update(
    modes=["positive", "negative"], max_examples=MAX_EXAMPLES, deterministic=True
)
# A stream is read whole (schemathesis stops at 20 events by default): the workflow's events
# and the answer in pieces as it is written are more than that.
schema.config.max_stream_events = 1000
# An invalid body may also be rejected for its size before it is parsed.
_rejection = schema.config.checks.negative_data_rejection
_rejection.expected_statuses = [*_rejection.expected_statuses, "413"]


@pytest.fixture(scope="module")
def served():
    """(root URL, app) of ``APP`` in uvicorn on loopback."""
    with running_app(APP, lifespan="on") as url:
        yield url.removesuffix("/v1"), APP


@pytest.fixture(scope="module")
def api_schema():
    return schema


@schema.parametrize()
@hypothesis.settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=list(hypothesis.HealthCheck),
)
def test_every_route_conforms_to_its_openapi_description(case, served):
    root, _ = served
    response = case.call_and_validate(base_url=root, headers=AUTH, checks=CHECKS, timeout=30)
    if 400 <= response.status_code < 500:
        error = response.json()["error"]
        assert error["message"] and error["type"]


# -- targeted cases the random search may not reach -----------------------------------------------


def _chat_case(api_schema, body):
    return api_schema["/v1/chat/completions"]["POST"].Case(body=body, media_type="application/json")


def test_a_valid_question_is_answered_within_the_schema(api_schema, served):
    root, _ = served
    case = _chat_case(api_schema, {"messages": [{"role": "user", "content": QUESTION}]})
    response = case.call_and_validate(base_url=root, headers=AUTH, checks=CHECKS)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"]


def test_a_body_over_the_limit_is_413_in_openai_format(api_schema, served):
    root, _ = served
    big = {"messages": [{"role": "user", "content": "x" * (2 * MAX_BODY)}]}
    case = _chat_case(api_schema, big)
    response = case.call_and_validate(base_url=root, headers=AUTH, checks=CHECKS)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


def test_a_chunked_body_over_the_limit_is_413(served):
    root, _ = served
    payload = json.dumps({"messages": [{"role": "user", "content": "y" * 4 * MAX_BODY}]}).encode()
    chunks = (payload[i : i + 512] for i in range(0, len(payload), 512))  # no Content-Length
    response = httpx.post(f"{root}/v1/chat/completions", content=chunks, headers=AUTH, timeout=10)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-key"},
        {"Authorization": KEY},
        {"Authorization": "Bearer"},
    ],
)
def test_requests_without_the_key_are_401_within_the_schema(api_schema, served, headers):
    root, _ = served
    case = _chat_case(api_schema, {"messages": [{"role": "user", "content": QUESTION}]})
    response = case.call(base_url=root, headers=headers)
    case.validate_response(response, checks=CHECKS[:-2])
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert KEY not in response.text


def test_the_production_app_serves_no_schema_route(served):
    root, app = served
    assert httpx.get(f"{root}/openapi.json", timeout=10).status_code == 404
    assert httpx.get(f"{root}/docs", timeout=10).status_code == 404
    description = app.openapi()
    assert description["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"
    chat = description["paths"]["/v1/chat/completions"]["post"]
    assert {"400", "401", "413"} <= set(chat["responses"])
    # no rate limit here: only chat completions, under the default concurrency limits, list 429
    assert "429" in chat["responses"]
    assert "429" not in description["paths"]["/v1/models"]["get"]["responses"]
    assert chat["requestBody"]["required"] is True


def test_an_open_gateway_describes_no_key():
    description = build_app(rate_limit_per_minute=60).openapi()
    chat = description["paths"]["/v1/chat/completions"]["post"]
    assert "securitySchemes" not in description["components"] and "security" not in chat
    assert "401" not in chat["responses"]
    assert chat["responses"]["429"]["headers"]["Retry-After"]["required"] is True


def test_a_streamed_answer_is_a_sequence_of_valid_chunks(api_schema, served):
    root, _ = served
    body = {"messages": [{"role": "user", "content": QUESTION}], "stream": True}
    body["stream_options"] = {"include_usage": True}
    response = _chat_case(api_schema, body).call_and_validate(
        base_url=root, headers=AUTH, checks=CHECKS
    )
    assert response.headers["content-type"][0].startswith("text/event-stream")
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(json.loads(d)) for d in data[:-1]]
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-2].choices[0].finish_reason == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


@pytest.mark.parametrize("deadline_s", [5e-324, 1e-6])
def test_a_request_deadline_that_expires_is_a_budget_stop_not_a_502(api_schema, served, deadline_s):
    """Found by the fuzzer: a tiny ``conductor.budget.deadline_s`` used to be answered 502
    "a worker failed" although no worker failed (the executor marks a deadline stop as an
    infrastructure error). It is the request's own budget: 200, empty content, ``length``."""
    root, app = served
    body = {
        "messages": [{"role": "user", "content": QUESTION}],
        "conductor": {"budget": {"deadline_s": deadline_s}},
    }
    before = app.state.metrics.value("conductor_gateway_workflows_total", {"outcome": "no_answer"})
    response = _chat_case(api_schema, body).call_and_validate(
        base_url=root, headers=AUTH, checks=CHECKS
    )
    choice = response.json()["choices"][0]
    assert response.status_code == 200
    assert choice["finish_reason"] == "length" and choice["message"]["content"] == ""
    after = app.state.metrics.value("conductor_gateway_workflows_total", {"outcome": "no_answer"})
    assert after == (before or 0) + 1


@pytest.mark.parametrize(
    ("field", "value", "param"),
    [
        ("stream", "yes", "stream"),
        ("n", "1", "n"),
        ("seed", 1.5, "seed"),
        ("conductor", {"return_trace": "true"}, "conductor.return_trace"),
        ("conductor", {"budget": {"max_tokens": "100"}}, "conductor.budget.max_tokens"),
        ("messages", [{"role": "robot", "content": QUESTION}], "messages.0.role"),
        ("messages", [{"role": "user", "content": [QUESTION]}], "messages.0.content.0"),
        ("messages", [{"role": "user", "content": [{"text": "x"}]}], "messages.0.content.0.type"),
        (
            "messages",
            [{"role": "user", "content": [{"type": "text", "text": 42}]}],
            "messages.0.content.0.text",
        ),
    ],
)
def test_fields_that_violate_the_schema_are_400_not_coerced(
    api_schema, served, field, value, param
):
    """Found by the fuzzer: lax validation accepted ``"true"`` for booleans, ``"5"`` for
    integers, any role and any content-part list, although the schema says otherwise."""
    root, _ = served
    body = {"messages": [{"role": "user", "content": QUESTION}], field: value}
    response = _chat_case(api_schema, body).call_and_validate(
        base_url=root, headers=AUTH, checks=CHECKS
    )
    assert response.status_code == 400
    assert response.json()["error"]["param"] == param
