"""The gateway's pieces without HTTP: protocol parsing, option mapping, keys, rate limits, logs,
configuration and trace sampling."""

from __future__ import annotations

import asyncio
import json
import logging
import random

import pytest

from conductor_core.errors import ConfigError
from conductor_core.policy.scripted import ScriptedPlanSource
from conductor_core.serve.auth import ApiKeyAuth, TokenBucketLimiter, key_id, load_api_keys
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.logs import JsonFormatter
from conductor_core.serve.protocol import (
    ChatCompletionChunk,
    ChatCompletionStreamChoice,
    ChatMessage,
    ConductorEvent,
    DeltaMessage,
    RequestError,
    parse_chat_request,
)
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

QUESTION = "What is 6 times 7?"


def body(**fields) -> bytes:
    data = {"model": "conductor", "messages": [{"role": "user", "content": QUESTION}]}
    data.update(fields)
    return json.dumps(data).encode()


def rejected(raw: bytes | str) -> RequestError:
    with pytest.raises(RequestError) as info:
        parse_chat_request(raw)
    assert info.value.status == 400
    return info.value


# -- protocol -------------------------------------------------------------------------------------


def test_parse_accepts_openai_requests_and_flattens_content_parts():
    raw = body(
        messages=[
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [{"type": "text", "text": "6 x"}, {"type": "text", "text": "7?"}],
            },
        ],
        temperature=0.2,  # an OpenAI field the gateway does not use is accepted
        seed=7,
        conductor={"workers": [1, "sim-generalist"], "budget": {"max_cost": 0.5}},
    )
    request = parse_chat_request(raw)
    assert [m.content for m in request.messages] == ["Be brief.", "6 x\n7?"]  # as vLLM joins
    assert request.sample == 7 and request.sample_given
    assert request.conductor.workers == [1, "sim-generalist"]
    assert request.conductor.budget.max_cost == 0.5
    assert parse_chat_request(body(sample_index=3, seed=9)).sample == 3
    assert not parse_chat_request(body()).sample_given


@pytest.mark.parametrize(
    ("raw", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b"[" * 5000 + b"]" * 5000, None),
        (json.dumps({"model": "conductor"}).encode(), "messages"),
        (body(messages=[]), "messages"),
        (body(messages=[{"role": "user", "content": 5}]), "messages.0.content"),
        (body(messages=[{"content": "x"}]), "messages.0.role"),
        (body(n=0), "n"),
        (body(seed=-1), "seed"),
        (body(conductor={"max_round": 2}), "conductor.max_round"),
        (body(conductor={"workers": [True]}), "conductor.workers.0"),
        (body(conductor={"workers": []}), "conductor.workers"),
        (body(conductor={"max_steps": 99}), "conductor.max_steps"),
        (body(conductor={"budget": {"deadline_s": 0}}), "conductor.budget.deadline_s"),
        (body(conductor={"budget": {"dollars": 1}}), "conductor.budget.dollars"),
    ],
)
def test_parse_rejects_bad_requests_naming_the_field(raw, param):
    error = rejected(raw)
    assert error.param == param
    assert error.body()["error"]["type"] == "invalid_request_error"
    if param:
        assert error.message.startswith(param)


def test_error_for_unknown_conductor_field_says_how_to_fix():
    error = rejected(body(conductor={"return_traces": True}))
    assert "unknown field" in error.message and "spelling" in error.message


def test_chunk_json_omits_unset_delta_keys_and_extensions():
    plain = ChatCompletionChunk(
        id="c1", created=1, model="m", choices=[ChatCompletionStreamChoice()]
    ).to_json()
    assert plain["choices"][0]["delta"] == {} and "conductor" not in plain and "usage" not in plain
    event = ChatCompletionChunk(
        id="c1",
        created=1,
        model="m",
        choices=[ChatCompletionStreamChoice(delta=DeltaMessage(content="hi"))],
        conductor=ConductorEvent(type="plan", round=0, data={"workers": [1]}),
    ).to_json()
    assert event["choices"][0]["delta"] == {"content": "hi"}
    assert event["conductor"] == {"type": "plan", "round": 0, "data": {"workers": [1]}}
    assert event["object"] == "chat.completion.chunk"


# -- serving: questions and options ---------------------------------------------------------------


@pytest.fixture(scope="module")
def pool():
    return load_pool(bundled_pool_path())


def make_serving(pool, **config):
    from conductor_core.serve.metrics import GatewayMetrics
    from conductor_core.serve.serving import ConductorServing

    return ConductorServing(
        GatewayConfig(**config), pool, ScriptedPlanSource(), metrics=GatewayMetrics()
    )


def test_compose_question_uses_earlier_turns_as_context():
    from conductor_core.serve.serving import compose_question

    one = [ChatMessage(role="user", content=QUESTION)]
    assert compose_question(one) == QUESTION
    many = [
        ChatMessage(role="system", content="Use metric units."),
        ChatMessage(role="user", content="Earlier question"),
        ChatMessage(role="assistant", content="Earlier answer"),
        ChatMessage(role="user", content=QUESTION),
    ]
    text = compose_question(many)
    assert text.index("Use metric units.") < text.index("Earlier answer") < text.index(QUESTION)
    with pytest.raises(RequestError) as info:
        compose_question([*many, ChatMessage(role="assistant", content="x")])
    assert info.value.param == "messages.4.role"
    with pytest.raises(RequestError) as info:
        compose_question([ChatMessage(role="user", content="   ")])
    assert info.value.param == "messages.0.content"


def test_conductor_options_map_onto_solve_options(pool):
    serving = make_serving(pool, max_steps=4, max_cost=2.0, deadline_s=60)
    default, with_trace = serving.solve_options_for(None)
    assert default.max_steps == 4 and default.budget.max_cost == 2.0 and not with_trace
    assert default.worker_ids is None and len(default.descriptions) == 4

    from conductor_core.serve.protocol import ConductorOptions

    extra = ConductorOptions.model_validate(
        {
            "workers": ["sim-generalist", 1],
            "max_rounds": 2,
            "max_steps": 3,
            "budget": {"max_tokens": 500},
            "return_trace": True,
        }
    )
    options, with_trace = serving.solve_options_for(extra)
    assert with_trace and options.max_rounds == 2 and options.max_steps == 3
    assert options.worker_ids == (3, 1)
    # descriptions stay indexed by pool id: the request offers workers 3 and 1 under those ids
    assert options.descriptions == tuple(w.description for w in pool.workers)
    from conductor_core.solve import plan_request

    request = plan_request("Q?", len(pool.workers), options)
    assert [(w.id, w.description) for w in request.workers] == [
        (3, pool.workers[3].description),
        (1, pool.workers[1].description),
    ]
    assert options.budget.max_tokens == 500 and options.budget.max_steps == 3
    assert options.budget.max_cost == 2.0 and options.budget.deadline_s == 60  # defaults kept
    asyncio.run(serving.aclose(0))


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"workers": [4]}, "conductor.workers.0"),
        ({"workers": [0, "nobody"]}, "conductor.workers.1"),
        ({"workers": [1, "sim-knowledge-expert"]}, "conductor.workers"),  # listed twice
        ({"max_rounds": 4}, "conductor.max_rounds"),
    ],
)
def test_invalid_conductor_options_name_the_field(pool, extra, param):
    from conductor_core.serve.protocol import ConductorOptions

    serving = make_serving(pool)
    with pytest.raises(RequestError) as info:
        serving.solve_options_for(ConductorOptions.model_validate(extra))
    assert info.value.status == 400 and info.value.param == param
    asyncio.run(serving.aclose(0))


def test_prepare_rejects_another_model_and_several_choices(pool):
    serving = make_serving(pool, model_name="my-conductor", sample_index=5)
    with pytest.raises(RequestError) as info:
        serving.prepare(parse_chat_request(body(model="gpt-4o")), "r1")
    assert info.value.status == 404 and info.value.code == "model_not_found"
    with pytest.raises(RequestError) as info:
        serving.prepare(parse_chat_request(body(model="my-conductor", n=2)), "r1")
    assert info.value.param == "n"
    job = serving.prepare(parse_chat_request(body(model=None)), "r1")
    assert job.model == "my-conductor" and job.sample_index == 5 and job.question == QUESTION
    asyncio.run(serving.aclose(0))


def test_trace_sampling_follows_the_configured_rate(pool):
    from conductor_core.serve.metrics import GatewayMetrics
    from conductor_core.serve.serving import ConductorServing

    async def run(rate: float) -> list[tuple]:
        logged: list[tuple] = []
        serving = ConductorServing(
            GatewayConfig(trace_sample_rate=rate),
            pool,
            ScriptedPlanSource(),
            metrics=GatewayMetrics(),
            rng=random.Random(0),
            trace_logger=lambda trace, **kw: logged.append((trace, kw)),
        )
        job = serving.prepare(parse_chat_request(body()), "req-9")
        for _ in range(4):
            await serving.run(job)
        await serving.aclose(5)  # waits for the uploads in flight
        return logged

    assert asyncio.run(run(0.0)) == []
    logged = asyncio.run(run(1.0))
    assert len(logged) == 4
    trace, kw = logged[0]
    assert trace.question == QUESTION and trace.answer
    assert kw["name"] == "gateway req-9" and kw["attributes"]["request_id"] == "req-9"


def test_a_failing_trace_upload_never_fails_the_request(pool, caplog):
    from conductor_core.serve.metrics import GatewayMetrics
    from conductor_core.serve.serving import ConductorServing

    def broken(trace, **kw):
        raise RuntimeError("tracking server down")

    async def run():
        serving = ConductorServing(
            GatewayConfig(trace_sample_rate=1.0),
            pool,
            ScriptedPlanSource(),
            metrics=GatewayMetrics(),
            trace_logger=broken,
        )
        trace = await serving.run(serving.prepare(parse_chat_request(body()), "r"))
        await serving.aclose(5)
        return trace

    with caplog.at_level(logging.WARNING, logger="conductor.gateway"):
        trace = asyncio.run(run())
    assert trace.answer
    assert any("could not log the trace" in r.getMessage() for r in caplog.records)


# -- keys, limits, logs, config -------------------------------------------------------------------


def test_keys_come_from_the_file_and_the_environment(tmp_path):
    path = tmp_path / "keys"
    path.write_text("# comment\nsk-aaaaaaaa\n\n  sk-bbbbbbbb  \n")
    config = GatewayConfig(api_keys_file=str(path))
    env = {"CONDUCTOR_API_KEYS": "sk-cccccccc, sk-aaaaaaaa"}
    assert load_api_keys(config, env) == ("sk-aaaaaaaa", "sk-bbbbbbbb", "sk-cccccccc")
    from_env_file = {"CONDUCTOR_API_KEYS_FILE": str(path)}
    assert load_api_keys(GatewayConfig(), from_env_file) == ("sk-aaaaaaaa", "sk-bbbbbbbb")
    assert load_api_keys(GatewayConfig(), {}) == ()
    (tmp_path / "empty").write_text("# nothing\n")
    with pytest.raises(ConfigError, match="holds no key"):
        load_api_keys(GatewayConfig(api_keys_file=str(tmp_path / "empty")), {})
    with pytest.raises(ConfigError, match="CONDUCTOR_API_KEYS_FILE"):
        load_api_keys(GatewayConfig(), {"CONDUCTOR_API_KEYS_FILE": str(tmp_path / "nope")})


def test_a_keys_file_line_is_one_key_even_with_a_comma(tmp_path):
    """A file holds one key per line: a comma inside a key must not make two shorter keys that
    each authenticate (the variable, documented as comma-separated, still splits)."""
    path = tmp_path / "keys"
    path.write_text("sk-long-key-part-one,ab\n")
    keys = load_api_keys(GatewayConfig(api_keys_file=str(path)), {})
    assert keys == ("sk-long-key-part-one,ab",)
    env = {"CONDUCTOR_API_KEYS": "sk-cccccccc,sk-dddddddd"}
    assert load_api_keys(GatewayConfig(), env) == ("sk-cccccccc", "sk-dddddddd")


def test_auth_accepts_only_configured_bearer_keys():
    auth = ApiKeyAuth(("sk-aaaaaaaa", "sk-bbbbbbbb"))
    assert auth.authenticate("Bearer sk-bbbbbbbb") == key_id("sk-bbbbbbbb")
    assert "sk-" not in key_id("sk-bbbbbbbb")
    for header in (None, "", "Bearer ", "Basic sk-aaaaaaaa", "Bearer sk-aaaaaaa", "sk-aaaaaaaa"):
        with pytest.raises(RequestError) as info:
            auth.authenticate(header)
        assert info.value.status == 401 and info.value.type == "authentication_error"
    assert ApiKeyAuth(()).authenticate(None) is None  # open


def test_token_bucket_allows_bursts_and_refills():
    now = [0.0]
    limiter = TokenBucketLimiter(per_minute=60, burst=2, clock=lambda: now[0], max_callers=2)
    limiter.acquire("a")
    limiter.acquire("a")
    with pytest.raises(RequestError) as info:
        limiter.acquire("a")
    assert info.value.status == 429 and info.value.headers["Retry-After"] == "1"
    limiter.acquire("b")  # another caller has its own bucket
    now[0] = 1.0  # one token back after a second at 60/min
    limiter.acquire("a")
    with pytest.raises(RequestError):
        limiter.acquire("a")
    limiter.acquire("c")  # evicts the least recently used bucket ("b")
    assert len(limiter._buckets) == 2


def test_json_logs_scrub_keys():
    formatter = JsonFormatter(secrets=["sk-live-0123456789"])
    record = logging.LogRecord(
        "conductor.gateway", logging.INFO, __file__, 1, "got %s", ("sk-live-0123456789",), None
    )
    record.request_id = "r-1"
    record.header = "Bearer sk-live-0123456789"
    line = json.loads(formatter.format(record))
    assert line["request_id"] == "r-1" and line["level"] == "INFO"
    assert "sk-live" not in json.dumps(line)
    assert line["message"] == "got ***"


def test_gateway_config_validates_fields():
    with pytest.raises(ValueError, match="max_rounds_limit"):
        GatewayConfig(max_rounds=4, max_rounds_limit=3)
    # a round past the sample index's round field would fail inside the solve loop
    with pytest.raises(ValueError, match="max_rounds_limit"):
        GatewayConfig(max_rounds_limit=257)
    with pytest.raises(ValueError, match="NAME"):
        GatewayConfig(api_keys_env="sk-not-a-name!")
    with pytest.raises(ValueError, match="trace_sample_rate"):
        GatewayConfig(trace_sample_rate=1.5)
    with pytest.raises(ValueError, match=r"unknown_field|Extra inputs"):
        GatewayConfig(unknown_field=1)
    assert all(f.description for f in GatewayConfig.model_fields.values())


def test_cli_config_file_and_flags(tmp_path):
    from conductor_core.cli.serve import gateway_config

    path = tmp_path / "gateway.yaml"
    path.write_text("model_name: c-7b\nrate_limit_per_minute: 30\nmax_steps: 4\n")
    config = gateway_config(path, {"max_steps": 3, "max_cost": None})
    assert config.model_name == "c-7b" and config.rate_limit_per_minute == 30
    assert config.max_steps == 3 and config.max_cost is None
    path.write_text("max_stepz: 4\n")
    with pytest.raises(ConfigError, match="max_stepz: unknown field"):
        gateway_config(path, {})
