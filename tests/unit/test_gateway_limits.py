"""The gateway's limits and its refusals, over in-process ASGI (httpx's ``ASGITransport``, no
socket): the operator's limits are ceilings a request cannot raise, concurrency and failed
authentications are limited, hostile input is a 400 naming the field (never a 500), parameters
the gateway does not honour are refused by name, ``max_tokens`` cuts the answer, upstream
refusals are 400s that name no internal URL, and metric labels take known values only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import httpx
import openai
import pytest

from conductor_core.policy.base import PlanRequest, PlanResult
from conductor_core.policy.openai_policy import OpenAIPlanSource
from conductor_core.policy.scripted import ScriptedPlanSource
from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.protocol import ConductorOptions, RequestError, parse_chat_request
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

pytest.importorskip("prometheus_client")

QUESTION = "What is 6 times 7?"
KEY = "sk-limits-0123456789"
KEYS_ENV = "CONDUCTOR_LIMITS_TEST_KEYS"
INTERNAL_URL = "http://10.1.2.3:8000/v1"


@pytest.fixture(scope="module")
def pool():
    return load_pool(bundled_pool_path())


def body(**fields: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model": "conductor",
        "messages": [{"role": "user", "content": QUESTION}],
    }
    data.update(fields)
    return data


@contextlib.asynccontextmanager
async def gateway(pool, config: GatewayConfig | None = None, source: Any = None):
    """A started gateway app (lifespan run in-process)."""
    app = create_app(config or GatewayConfig(), pool=pool, plan_source=source)
    async with app.router.lifespan_context(app):
        yield app


def client(app, address: str = "127.0.0.1", **headers: str) -> httpx.AsyncClient:
    """An in-process client whose requests come from ``address``."""
    transport = httpx.ASGITransport(app=app, client=(address, 50000))
    return httpx.AsyncClient(transport=transport, base_url="http://gateway", headers=headers)


async def post(app, payload: dict[str, Any] | str, address: str = "127.0.0.1", **headers):
    """POST /v1/chat/completions (a str payload is sent as is: JSON the encoder would refuse)."""
    content = payload if isinstance(payload, str) else json.dumps(payload)
    async with client(app, address, **headers) as c:
        return await c.post(
            "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
        )


def run(coro):
    return asyncio.run(coro)


def assert_openai_error(response: httpx.Response, status: int, param: str | None = None):
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    if param is not None:
        assert error["param"] == param, error
    return error


# -- 1. operators set the limits ------------------------------------------------------------------


LIMITED = {"max_steps": 3, "max_tokens": 5000, "max_cost": 0.001, "deadline_s": 20}


@pytest.mark.parametrize(
    ("options", "param"),
    [
        ({"budget": {"max_cost": 1e9}}, "conductor.budget.max_cost"),
        ({"budget": {"max_tokens": 10**9}}, "conductor.budget.max_tokens"),
        ({"budget": {"deadline_s": 3600}}, "conductor.budget.deadline_s"),
        ({"max_steps": 4}, "conductor.max_steps"),
        ({"max_rounds": 4}, "conductor.max_rounds"),
    ],
)
def test_a_request_cannot_raise_the_servers_limits(pool, options, param):
    async def go():
        async with gateway(pool, GatewayConfig(**LIMITED)) as app:
            return await post(app, body(conductor=options))

    error = assert_openai_error(run(go()), 400, param)
    assert error["message"].startswith(param) and "not raise" in error["message"]


@pytest.mark.parametrize("number", ["Infinity", "-Infinity", "NaN", "1e999"])
def test_a_non_finite_budget_is_400_naming_the_field(pool, number):
    raw = json.dumps(body(conductor={"budget": {"max_cost": 1.0}})).replace("1.0", number)

    async def go():
        async with gateway(pool) as app:  # no server max_cost: any finite value would do
            return await post(app, raw)

    assert_openai_error(run(go()), 400, "conductor.budget.max_cost")


def test_lower_values_are_applied_and_unlimited_fields_take_any_finite_value(pool):
    from conductor_core.serve.metrics import GatewayMetrics
    from conductor_core.serve.serving import ConductorServing

    serving = ConductorServing(
        GatewayConfig(**LIMITED), pool, ScriptedPlanSource(), metrics=GatewayMetrics()
    )
    lower = ConductorOptions.model_validate(
        {"max_steps": 2, "budget": {"max_cost": 0.0005, "max_tokens": 100, "deadline_s": 5}}
    )
    options, _ = serving.solve_options_for(lower)
    assert options.max_steps == 2 and options.budget.max_steps == 2
    assert options.budget.max_cost == 0.0005 and options.budget.max_tokens == 100
    assert options.budget.deadline_s == 5
    same, _ = serving.solve_options_for(ConductorOptions(return_trace=True))
    assert same.budget.max_cost == 0.001 and same.budget.deadline_s == 20

    open_server = ConductorServing(
        GatewayConfig(request_timeout_s=60), pool, ScriptedPlanSource(), metrics=GatewayMetrics()
    )
    big = ConductorOptions.model_validate({"budget": {"max_cost": 1e9, "max_tokens": 10**9}})
    options, _ = open_server.solve_options_for(big)
    assert options.budget.max_cost == 1e9  # the operator set no dollar limit
    with pytest.raises(RequestError) as info:  # without a deadline, request_timeout_s bounds it
        open_server.solve_options_for(
            ConductorOptions.model_validate({"budget": {"deadline_s": 61}})
        )
    assert info.value.param == "conductor.budget.deadline_s"
    with pytest.raises(RequestError) as info:  # built in code, not parsed: still refused
        open_server.solve_options_for(
            ConductorOptions.model_construct(budget=_budget(max_cost=float("inf")))
        )
    assert info.value.param == "conductor.budget.max_cost"
    run(serving.aclose(0))
    run(open_server.aclose(0))


def _budget(**fields):
    from conductor_core.serve.protocol import BudgetOptions

    return BudgetOptions.model_construct(
        **{"max_tokens": None, "max_cost": None, "deadline_s": None, **fields}
    )


class GatedSource:
    """The scripted plan source, holding every plan until ``gate`` opens."""

    def __init__(self) -> None:
        self.inner = ScriptedPlanSource()
        self.gate = asyncio.Event()
        self.waiting = 0

    async def plan(self, request: PlanRequest) -> PlanResult:
        self.waiting += 1
        await self.gate.wait()
        return await self.inner.plan(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def until(predicate, timeout_s: float = 10.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.005)


def test_concurrency_limits_answer_429_with_retry_after(pool):
    config = GatewayConfig(max_concurrent_requests=2, max_concurrent_requests_per_key=1)

    async def go():
        source = GatedSource()
        async with gateway(pool, config, source) as app:
            first = asyncio.create_task(post(app, body(), "10.0.0.1"))
            await until(lambda: source.waiting == 1)
            same_caller = await post(app, body(), "10.0.0.1")  # per-key limit (open: address)
            second = asyncio.create_task(post(app, body(stream=True), "10.0.0.2"))
            await until(lambda: source.waiting == 2)
            server_full = await post(app, body(), "10.0.0.3")  # global limit
            in_flight = app.state.concurrency.total
            source.gate.set()
            done = await asyncio.gather(first, second)
            after = await post(app, body(), "10.0.0.1")
            return same_caller, server_full, in_flight, done, after, app.state.concurrency.total

    same_caller, server_full, in_flight, done, after, left = run(go())
    for refused in (same_caller, server_full):
        error = assert_openai_error(refused, 429)
        assert error["type"] == "rate_limit_error"
        assert error["code"] == "concurrency_limit_exceeded"
        assert int(refused.headers["retry-after"]) >= 1
    assert "this API key" in same_caller.json()["error"]["message"]
    assert "the server" in server_full.json()["error"]["message"]
    assert in_flight == 2
    assert [r.status_code for r in done] == [200, 200]
    assert done[1].text.rstrip().endswith("data: [DONE]")  # the stream released its slot
    assert after.status_code == 200 and left == 0


def test_concurrency_limits_are_configurable_and_described():
    config = GatewayConfig()
    assert config.max_concurrent_requests and config.max_concurrent_requests_per_key
    for name in ("max_concurrent_requests", "max_concurrent_requests_per_key"):
        assert GatewayConfig.model_fields[name].description
        with pytest.raises(ValueError, match=name):
            GatewayConfig(**{name: 0})
    assert GatewayConfig(max_concurrent_requests=None).max_concurrent_requests is None

    from conductor_core.cli.serve import command

    flags = {opt for p in command.params for opt in p.opts}
    assert {"--max-concurrent-requests", "--max-concurrent-requests-per-key"} <= flags


def test_failed_authentications_are_rate_limited_per_address(pool, monkeypatch):
    monkeypatch.setenv(KEYS_ENV, KEY)
    config = GatewayConfig(api_keys_env=KEYS_ENV, rate_limit_per_minute=1, rate_limit_burst=2)

    async def go():
        async with gateway(pool, config) as app:
            guesses = []
            for i in range(3):
                async with client(app, "10.9.9.9", authorization=f"Bearer sk-guess-{i}") as c:
                    guesses.append(await c.get("/v1/models"))
            async with client(app, "10.9.9.9", authorization=f"Bearer {KEY}") as c:
                right_key_same_address = await c.get("/v1/models")
            async with client(app, "10.8.8.8", authorization=f"Bearer {KEY}") as c:
                elsewhere = await c.get("/v1/models")
            return guesses, right_key_same_address, elsewhere

    guesses, right_key_same_address, elsewhere = run(go())
    assert [r.status_code for r in guesses] == [401, 401, 429]
    assert guesses[0].headers["x-should-retry"] == "false"
    assert int(guesses[2].headers["retry-after"]) >= 1
    assert guesses[2].json()["error"]["type"] == "rate_limit_error"
    # only failures are throttled: a valid key from the throttled address (every client behind
    # one ingress shares it) is still served
    assert right_key_same_address.status_code == 200
    assert elsewhere.status_code == 200


def test_forwarded_allow_ips_must_be_addresses_or_ranges():
    assert GatewayConfig().forwarded_allow_ips == ["127.0.0.1", "::1"]
    config = GatewayConfig(forwarded_allow_ips=["10.0.0.0/8", "fd00::/8", "192.168.1.5", "*"])
    assert config.forwarded_allow_ips[0] == "10.0.0.0/8"
    for bad in ("10.0.0.1/8", "ingress-nginx", "10.0.0.0/33"):
        with pytest.raises(ValueError, match="forwarded_allow_ips") as info:
            GatewayConfig(forwarded_allow_ips=[bad])
        assert bad in str(info.value)


def test_a_spent_quota_is_429_naming_the_limit_until_the_period_ends(pool, monkeypatch):
    monkeypatch.setenv(KEYS_ENV, f"{KEY},{KEY}-other")
    # a tiny quota: the first answer of the bundled (priced) pool spends it
    config = GatewayConfig(api_keys_env=KEYS_ENV, spend_quota=1e-9, spend_quota_period_s=3600)

    async def go():
        async with gateway(pool, config) as app:
            first = await post(app, body(), authorization=f"Bearer {KEY}")
            spent = await post(app, body(), authorization=f"Bearer {KEY}")
            spent_stream = await post(app, body(stream=True), authorization=f"Bearer {KEY}")
            other_stream = await post(app, body(stream=True), authorization=f"Bearer {KEY}-other")
            after_stream = await post(app, body(), authorization=f"Bearer {KEY}-other")
            described = app.openapi()["paths"]
            return first, spent, spent_stream, other_stream, after_stream, described

    first, spent, spent_stream, other_stream, after_stream, described = run(go())
    for path, method in (("/v1/chat/completions", "post"), ("/v1/models", "get")):
        assert "spend_quota_exceeded" in described[path][method]["responses"]["429"]["description"]
    assert first.status_code == 200 and first.json()["conductor"]["cost"] > 0
    assert other_stream.status_code == 200  # a quota per key
    assert other_stream.text.rstrip().endswith("data: [DONE]")
    for refused in (spent, spent_stream, after_stream):  # a stream's cost is charged too
        error = assert_openai_error(refused, 429)
        assert error["type"] == "insufficient_quota"
        assert error["code"] == "spend_quota_exceeded"
        assert "spend quota exceeded" in error["message"] and "spend_quota" in error["message"]
        assert "per 3600s" in error["message"]
        assert 1 <= int(refused.headers["retry-after"]) <= 3600
        assert refused.headers["x-should-retry"] == "false"


def test_spend_quota_resets_each_period_and_keeps_a_bounded_table():
    from conductor_core.serve.auth import SpendQuota

    now = [7200.0 + 10]
    quota = SpendQuota(1.0, 3600, clock=lambda: now[0], max_callers=2)
    quota.check("a")
    quota.charge("a", 0.6)
    quota.check("a")
    quota.charge("a", 0.6)
    with pytest.raises(RequestError) as info:
        quota.check("a")
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "3590"
    assert "$1.2000 of its $1 per 3600s" in info.value.message
    quota.check("b")  # another caller has its own
    now[0] = 10800.0  # the next period
    quota.check("a")
    assert quota.spent("a") == 0.0
    quota.charge("b", 1)
    quota.charge("c", 1)  # evicts the least recently charged ("a")
    assert len(quota._spent) == 2
    with pytest.raises(ValueError):
        SpendQuota(0, 3600)


# -- 2. hostile input -----------------------------------------------------------------------------


SURROGATE = "\\ud800"  # as it appears in JSON text: a lone high surrogate


@pytest.mark.parametrize(
    ("template", "param"),
    [
        ('{"messages": [{"role": "user", "content": "hi @"}]}', "messages.0.content"),
        (
            '{"messages": [{"role": "user", "content": [{"type": "text", "text": "@"}]}]}',
            "messages.0.content.0.text",
        ),
        (
            '{"messages": [{"role": "system", "content": "@"}, {"role": "user", "content": "q"}]}',
            "messages.0.content",
        ),
        ('{"model": "@", "messages": [{"role": "user", "content": "q"}]}', "model"),
        ('{"user": "@", "messages": [{"role": "user", "content": "q"}]}', "user"),
        (
            '{"stream": true, "messages": [{"role": "user", "content": "x@"}]}',
            "messages.0.content",
        ),
        (
            '{"conductor": {"workers": ["@"]}, "messages": [{"role": "user", "content": "q"}]}',
            "conductor.workers.0",
        ),
        ('{"metadata": {"@": 1}, "messages": [{"role": "user", "content": "q"}]}', None),
    ],
)
def test_a_lone_surrogate_anywhere_is_a_400_naming_the_field(pool, template, param):
    raw = template.replace("@", SURROGATE)

    async def go():
        async with gateway(pool) as app:
            return await post(app, raw)

    response = run(go())
    error = assert_openai_error(response, 400)
    if param is not None:
        assert error["param"] == param
    else:  # a key holding a surrogate: named, escaped
        assert error["param"] == "metadata.\\ud800"
    assert "Unicode" in error["message"]
    assert response.headers["content-type"].startswith("application/json")


def test_non_finite_numbers_are_refused_in_any_field():
    with pytest.raises(RequestError) as info:
        parse_chat_request(json.dumps(body(temperature=1.0)).replace("1.0", "1e999"))
    assert info.value.status == 400 and info.value.param == "temperature"


@pytest.mark.parametrize(
    ("fields", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"function_call": {"name": "f"}}, "function_call"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"n": 2}, "n"),
        ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "What is in the picture?"},
                            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                        ],
                    }
                ]
            },
            "messages.0.content.1.type",
        ),
    ],
)
def test_parameters_the_gateway_does_not_honour_are_refused(pool, fields, param):
    async def go():
        async with gateway(pool) as app:
            return await post(app, body(**fields))

    response = run(go())
    error = assert_openai_error(response, 400, param)
    assert error["code"] == "unsupported_parameter"
    assert response.headers["x-should-retry"] == "false"


def test_harmless_values_of_those_parameters_are_accepted(pool):
    harmless = {
        "tool_choice": "none",
        "logprobs": False,
        "response_format": {"type": "text"},
        "n": 1,
        "stop": None,
        "modalities": ["text"],
        "temperature": 0.3,  # sampling parameters: accepted, documented as not applied
    }

    async def go():
        async with gateway(pool) as app:
            return await post(app, body(**harmless))

    assert run(go()).status_code == 200


def streamed_answer(response) -> tuple[str, list[str | None]]:
    """A streamed chat completion's content and the finish reasons of its chunks."""
    chunks = [
        json.loads(line.removeprefix("data: "))
        for line in response.text.splitlines()
        if line.startswith("data: {")
    ]
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    return content, [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]


def test_max_tokens_cuts_the_answer_with_finish_reason_length(pool):
    async def go():
        async with gateway(pool) as app:
            full = await post(app, body())
            cut = await post(app, body(max_tokens=3))
            newer = await post(app, body(max_completion_tokens=3))
            roomy = await post(app, body(max_tokens=10_000))
            streamed = await post(app, body(max_tokens=3, stream=True))
            return full, cut, newer, roomy, streamed

    full, cut, newer, roomy, streamed = run(go())
    answer = full.json()["choices"][0]["message"]["content"]
    assert len(answer.split()) > 3
    for response in (cut, newer):
        choice = response.json()["choices"][0]
        assert choice["finish_reason"] == "length"
        assert choice["message"]["content"].split() == answer.split()[:3]
        assert answer.startswith(choice["message"]["content"])
    assert roomy.json()["choices"][0]["message"]["content"] == answer
    assert roomy.json()["choices"][0]["finish_reason"] == "stop"
    content, finish = streamed_answer(streamed)
    assert content.split() == answer.split()[:3] and finish[-1] == "length"


def test_cut_to_tokens_counts_whitespace_separated_words():
    from conductor_core.serve.serving import cut_to_tokens

    assert cut_to_tokens("a  b\nc d", 2) == ("a  b", True)
    assert cut_to_tokens("a b ", 2) == ("a b ", False)
    assert cut_to_tokens("a b", None) == ("a b", False)
    assert cut_to_tokens("", 1) == ("", False)


def test_text_parts_join_with_a_newline(pool):
    parts = [{"type": "text", "text": "What is 6"}, {"type": "text", "text": "times 7?"}]

    async def go():
        async with gateway(pool) as app:
            payload = body(
                messages=[{"role": "user", "content": parts}], conductor={"return_trace": True}
            )
            return await post(app, payload)

    response = run(go())
    assert response.json()["conductor"]["trace"]["question"] == "What is 6\ntimes 7?"


def test_completion_ids_are_unique_per_request(pool):
    async def go():
        async with gateway(pool) as app:
            same_id = {"x-request-id": "client-id-1"}
            a = await post(app, body(), **same_id)
            b = await post(app, body(), **same_id)
            s = await post(app, body(stream=True), **same_id)
            return a, b, s

    a, b, s = run(go())
    assert a.headers["x-request-id"] == b.headers["x-request-id"] == "client-id-1"
    assert a.json()["id"] != b.json()["id"]
    assert a.json()["conductor"]["request_id"] == "client-id-1"
    ids = {
        json.loads(line.removeprefix("data: "))["id"]
        for line in s.text.splitlines()
        if line.startswith("data: {")
    }
    assert len(ids) == 1 and ids.isdisjoint({a.json()["id"], b.json()["id"]})


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ({"stream": "yes"}, False),
        ({"n": "1"}, False),
        ({"seed": True}, False),
        ({"logprobs": "true"}, False),
        ({"stream_options": {"include_usage": "yes"}}, False),
        ({"messages": [{"role": "robot", "content": "q"}]}, False),
        ({"messages": [{"role": "user", "content": [{"text": "q"}]}]}, False),
        ({"messages": [{"role": "user", "content": ["q"]}]}, False),
        ({"messages": [{"role": "user", "content": [{"type": {"x": 1}, "text": "q"}]}]}, False),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]}, False),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]}]}, True),
        ({"max_tokens": 0}, False),
        ({"max_tokens": 5}, True),
        ({"stop": "x"}, True),
        ({"stop": ["a", "b", "c", "d"]}, True),
        ({"stop": ["a", "b", "c", "d", "e"]}, False),  # OpenAI's limit: 4
        ({"stop": ""}, False),
        ({"stop": []}, True),
        ({"stop": None}, True),
        ({"tools": []}, True),  # what LangChain and lm-eval send for "no tools"
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, False),
        ({"n": None, "stream": None, "functions": []}, True),
        (
            {
                "messages": [
                    {"role": "user", "content": "q"},
                    {"role": "assistant", "content": None},
                    {"role": "user", "content": "and?"},
                ]
            },
            True,
        ),
        ({"messages": [{"role": "user", "content": None}]}, False),
        ({"response_format": {"type": "text"}}, True),
        ({"response_format": {"type": "json_object"}}, True),
        ({"response_format": {"type": "json_schema"}}, False),  # json_schema required
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            True,
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "a b"}}},
            False,
        ),
        ({"response_format": {"type": "xml"}}, False),
        ({"conductor": {"max_steps": 4}}, False),  # above the server's max_steps (3)
        ({"conductor": {"max_steps": 2}}, True),
        ({"conductor": {"budget": {"max_cost": 0.01}}}, False),  # above max_cost (0.001)
        ({"conductor": {"budget": {"max_cost": 0.0001}}}, True),
        ({"temperature": 0.5, "user": "u-1"}, True),
    ],
)
def test_a_request_is_accepted_exactly_when_it_matches_the_published_schema(pool, value, accepted):
    """The docs' claim: validation is strict, and the OpenAPI description says what passes."""
    jsonschema = pytest.importorskip("jsonschema")
    from conductor_core.serve.metrics import GatewayMetrics
    from conductor_core.serve.serving import ConductorServing

    config = GatewayConfig(**LIMITED)
    app = create_app(config, pool=pool, plan_source=ScriptedPlanSource())
    described = app.openapi()
    document = {
        "$ref": "#/components/schemas/ChatCompletionRequest",
        "components": described["components"],
    }
    payload = body(**value)
    matches = jsonschema.Draft202012Validator(document).is_valid(payload)
    serving = ConductorServing(config, pool, ScriptedPlanSource(), metrics=GatewayMetrics())
    try:
        serving.prepare(parse_chat_request(json.dumps(payload)), "r")
        served = True
    except RequestError as exc:
        assert exc.status == 400
        served = False
    finally:
        run(serving.aclose(0))
    assert matches == served == accepted


def _openai_error_source(status: int, message: str) -> OpenAIPlanSource:
    """A real OpenAIPlanSource whose server (mocked HTTP, no socket) answers ``status``."""

    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            status,
            json={"object": "error", "message": message, "type": "BadRequestError", "code": status},
        )

    source = OpenAIPlanSource(INTERNAL_URL, "conductor-7b", max_retries=0)
    source._client = openai.AsyncOpenAI(
        base_url=source.base_url,
        api_key="EMPTY",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(answer)),
    )
    return source


def test_an_upstream_4xx_is_a_400_that_names_no_internal_url(pool):
    too_long = (
        "This model's maximum context length is 2048 tokens. However, you requested 9000 "
        f"tokens. See {INTERNAL_URL}/docs"
    )

    async def go():
        rejected = _openai_error_source(400, too_long)
        async with gateway(pool, source=rejected) as app:
            plain = await post(app, body())
            streamed = await post(app, body(stream=True))
            metrics = (await client(app).get("/metrics")).text
        async with gateway(pool, source=_openai_error_source(503, "overloaded")) as app:
            down = await post(app, body())
        return plain, streamed, metrics, down

    plain, streamed, metrics, down = run(go())
    error = assert_openai_error(plain, 400)
    assert error["code"] == "conductor_rejected_request"
    assert "maximum context length is 2048" in error["message"]
    assert plain.headers["x-should-retry"] == "false"
    assert 'outcome="rejected"' in metrics
    stream_error = [line for line in streamed.text.splitlines() if '"error"' in line]
    assert stream_error and "conductor_rejected_request" in stream_error[0]
    assert_openai_error(down, 502)
    assert "x-should-retry" not in down.headers  # a 503 upstream may recover: retryable
    for response in (plain, streamed, down):
        assert "10.1.2.3" not in response.text and "http://" not in response.text


def test_errors_streamed_to_the_client_name_no_upstream(pool):
    from conductor_core.serve.redaction import redact_urls
    from conductor_core.serve.workflow_events import EventTranslator

    hosts = ("workers.internal:8443",)
    text = (
        "connection error: cannot reach https://workers.internal:8443/v1/chat "
        "(workers.internal:8443)"
    )
    assert redact_urls(text, hosts) == "connection error: cannot reach <url> (<host>)"
    translate = EventTranslator(["w0"], lambda t: redact_urls(t, hosts))
    event = translate({"type": "step_end", "step": {"worker": 0, "error": text}})
    assert "workers.internal" not in json.dumps(event.data)


def test_metric_labels_take_known_values_only(pool):
    async def go():
        async with gateway(pool) as app:
            async with client(app) as c:
                await c.request("FOO", "/v1/models")
                await c.request("PROPFIND", "/whatever/x1")
                await c.get("/v1/models")
                text = (await c.get("/metrics")).text
            return text, app.state.metrics

    text, metrics = run(go())

    def count(route: str, method: str, status: str) -> float | None:
        labels = {"route": route, "method": method, "status": status}
        return metrics.value("conductor_gateway_requests_total", labels)

    assert count("/v1/models", "other", "405") == 1
    assert count("other", "other", "404") == 1
    assert count("/v1/models", "GET", "200") == 1
    series = [line for line in text.splitlines() if line.startswith("conductor_gateway_requests")]
    assert series and all("FOO" not in s and "PROPFIND" not in s and "x1" not in s for s in series)


def test_the_cli_sets_the_quota_and_the_trusted_proxies(monkeypatch):
    import uvicorn
    from click.testing import CliRunner

    from conductor_core.cli.serve import command

    ran: dict[str, Any] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.update(app=app, **kw))
    args = ["--spend-quota", "5", "--forwarded-allow-ips", "10.0.0.0/8, 192.168.1.1"]
    result = CliRunner().invoke(command, args)
    assert result.exit_code == 0, result.output
    assert ran["app"].state.config.spend_quota == 5
    assert ran["proxy_headers"] is True
    assert ran["forwarded_allow_ips"] == ["10.0.0.0/8", "192.168.1.1"]
    result = CliRunner().invoke(command, ["--forwarded-allow-ips", "ingress"])
    assert result.exit_code != 0
    assert "forwarded_allow_ips: 'ingress' is neither an IP address" in str(result.exception)


def test_stop_sequences_end_the_answer_before_them_streamed_or_not(pool):
    """CrewAI, LangChain's ReAct agents and lm-eval send stop sequences with every call."""

    async def go():
        async with gateway(pool) as app:
            full = await post(app, body())
            words = full.json()["choices"][0]["message"]["content"].split()
            stop = f" {words[2]}"  # before the third word
            stopped = await post(app, body(stop=[stop, "never-in-an-answer"]))
            streamed = await post(app, body(stop=stop, stream=True))
            both = await post(app, body(stop=stop, max_tokens=1))
            return full, stop, stopped, streamed, both

    full, stop, stopped, streamed, both = run(go())
    answer = full.json()["choices"][0]["message"]["content"]
    expected = answer[: answer.index(stop)]
    choice = stopped.json()["choices"][0]
    assert choice["message"]["content"] == expected and choice["finish_reason"] == "stop"
    content, finish = streamed_answer(streamed)
    assert content == expected and finish[-1] == "stop"
    # the word limit cuts first when it comes first
    assert both.json()["choices"][0]["finish_reason"] == "length"
    assert both.json()["choices"][0]["message"]["content"].split() == answer.split()[:1]
