"""Providers over mocked HTTP (``httpx.MockTransport``): request shape, error mapping, usage, key
hygiene; key lookup; the provider factory (the Anthropic provider, whose SDK takes seconds to
import, and the local transformers provider: tests/integration/test_providers.py)."""

from __future__ import annotations

import asyncio
import logging
import random
import traceback
from typing import Any

import httpx
import pytest

from conductor_core.errors import ConfigError
from conductor_core.workers.config import WorkerConfig, parse_pool
from conductor_core.workers.keys import LOCAL_DUMMY_KEY, redact, resolve_key
from conductor_core.workers.pool import WorkerPool
from conductor_core.workers.providers import build_provider, error_for_status
from conductor_core.workers.providers.gemini_provider import GeminiProvider
from conductor_core.workers.providers.gemini_provider import build_request as gemini_request
from conductor_core.workers.providers.openai_compat import OpenAIProvider, build_request
from conductor_core.workers.types import ErrorKind
from tests.support.mock_providers import MSG, SECRET, Server, call_error, complete


def chat_body(text: str | None = "4", *, choices: bool = True) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": (
            [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": text},
                }
            ]
            if choices
            else []
        ),
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }


def openai_worker(**kw: Any) -> WorkerConfig:
    base: dict[str, Any] = {
        "provider": "openai",
        "model": "m",
        "endpoint": "http://127.0.0.1:9/v1",
        "api_key_env": "TEST_OPENAI_KEY",
    }
    base.update(kw)
    return WorkerConfig.model_validate(base)


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_OPENAI_KEY", SECRET)


# --- OpenAI-compatible -----------------------------------------------------------------------


def test_openai_success_usage_and_request_shape() -> None:
    server = Server(httpx.Response(200, json=chat_body("four")))
    worker = openai_worker(
        params={"max_tokens": 64, "temperature": 0.3, "top_p": 0.9, "extra": {"top_k": 5}}
    )
    out = complete(OpenAIProvider(worker, http_client=server.client()))
    assert out.text == "four"
    assert (out.usage.input_tokens, out.usage.output_tokens) == (12, 3)
    req = server.requests[0]
    assert req.url.path == "/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {SECRET}"
    body = server.body()
    assert body["model"] == "m" and body["messages"] == MSG
    assert body["max_tokens"] == 64 and "max_completion_tokens" not in body
    assert body["temperature"] == 0.3 and body["top_p"] == 0.9 and body["top_k"] == 5
    assert "reasoning_effort" not in body


def test_openai_official_endpoint_uses_max_completion_tokens() -> None:
    w = openai_worker(
        endpoint="https://api.openai.com/v1",
        params={"max_tokens": 100, "reasoning_effort": "high"},
    )
    req = build_request(w, MSG)
    assert req["max_completion_tokens"] == 100 and "max_tokens" not in req
    assert req["reasoning_effort"] == "high" and "temperature" not in req
    plain = build_request(openai_worker(endpoint="https://api.openai.com/v1"), MSG)
    assert "temperature" in plain and "max_completion_tokens" in plain
    vllm = build_request(openai_worker(params={"reasoning_effort": "low"}), MSG)
    assert vllm["reasoning_effort"] == "low" and "max_tokens" in vllm and "temperature" in vllm


def test_openai_429_with_retry_after_seconds() -> None:
    server = Server(httpx.Response(429, headers={"retry-after": "7"}, json={"error": {}}))
    e = call_error(OpenAIProvider(openai_worker(), http_client=server.client()))
    assert e.kind == ErrorKind.RATE_LIMIT and e.retryable and e.status == 429
    assert e.retry_after == 7.0


def test_openai_429_with_retry_after_http_date() -> None:
    server = Server(
        httpx.Response(429, headers={"retry-after": "Wed, 01 Foo 20xx"}, json={}),
    )
    e = call_error(OpenAIProvider(openai_worker(), http_client=server.client()))
    assert e.kind == ErrorKind.RATE_LIMIT and e.retry_after is None  # unparsable -> none
    server = Server(
        httpx.Response(429, headers={"retry-after": "Wed, 01 Jan 2099 00:00:00 GMT"}, json={}),
    )
    e = call_error(OpenAIProvider(openai_worker(), http_client=server.client()))
    assert e.retry_after is not None and e.retry_after > 1e6


def test_openai_500_is_retryable_server_error() -> None:
    server = Server(httpx.Response(500, json={"error": {"message": "upstream exploded"}}))
    e = call_error(OpenAIProvider(openai_worker(), http_client=server.client()))
    assert e.kind == ErrorKind.SERVER and e.retryable and e.status == 500
    assert "upstream exploded" in str(e)


def test_openai_401_is_auth_and_never_leaks_the_key() -> None:
    echoed = {"error": {"message": f"Incorrect API key provided: {SECRET}. Check it."}}
    server = Server(httpx.Response(401, json=echoed))
    provider = OpenAIProvider(openai_worker(), http_client=server.client())
    assert SECRET not in repr(provider)
    e = call_error(provider)
    assert e.kind == ErrorKind.AUTH and not e.retryable and e.status == 401
    rendered = "".join(traceback.format_exception(e)) + repr(e) + str(e.args)
    assert SECRET not in rendered and SECRET[-8:] not in rendered
    assert e.__cause__ is None and e.__context__ is None


def test_openai_other_4xx_is_client_error() -> None:
    server = Server(httpx.Response(400, json={"error": {"message": "bad param"}}))
    e = call_error(OpenAIProvider(openai_worker(), http_client=server.client()))
    assert e.kind == ErrorKind.CLIENT and not e.retryable


def test_openai_bad_json_and_empty_replies_are_malformed() -> None:
    bodies = [
        httpx.Response(200, content=b"{not json", headers={"content-type": "application/json"}),
        httpx.Response(200, content=b"plain text", headers={"content-type": "text/plain"}),
        httpx.Response(200, json=chat_body(choices=False)),
        httpx.Response(200, json=chat_body(None)),
        httpx.Response(200, json=chat_body("  ")),
    ]
    for resp in bodies:
        server = Server(resp)
        e = call_error(OpenAIProvider(openai_worker(), http_client=server.client()))
        assert e.kind == ErrorKind.MALFORMED and e.retryable, resp.content


def test_openai_connection_and_timeout_errors() -> None:
    server = Server(httpx.ConnectError("refused"))
    e = call_error(OpenAIProvider(openai_worker(), http_client=server.client()))
    assert e.kind == ErrorKind.CONNECTION and e.retryable
    server = Server(httpx.ReadTimeout("slow"))
    e = call_error(OpenAIProvider(openai_worker(), http_client=server.client()))
    assert e.kind == ErrorKind.TIMEOUT and e.retryable


def test_pool_retries_openai_429_honouring_retry_after(caplog: pytest.LogCaptureFixture) -> None:
    server = Server(
        httpx.Response(429, headers={"retry-after": "3"}, json={"error": {"message": SECRET}}),
        httpx.Response(503, json={}),
        httpx.Response(200, json=chat_body("ok")),
    )
    cfg = parse_pool(
        {
            "workers": [
                {
                    "provider": "openai",
                    "model": "m",
                    "endpoint": "http://127.0.0.1:9/v1",
                    "api_key_env": "TEST_OPENAI_KEY",
                    "price": {"input_per_mtok": 1.0, "output_per_mtok": 2.0},
                }
            ],
            "retry": {"backoff_base_s": 0.1, "backoff_max_s": 1.0},
        }
    )
    delays: list[float] = []

    async def fake_sleep(d: float) -> None:
        delays.append(d)

    async def main():
        provider = OpenAIProvider(cfg.workers[0], http_client=server.client())
        async with WorkerPool(
            cfg, providers=[provider], sleep=fake_sleep, rng=random.Random(0)
        ) as pool:
            return await pool.call(0, MSG)

    with caplog.at_level(logging.DEBUG, logger="conductor.workers"):
        res = asyncio.run(main())
    assert res.ok and res.text == "ok" and res.retries == 2
    assert delays[0] == 3.0 and 0 <= delays[1] <= 0.2
    assert res.cost == pytest.approx((12 * 1.0 + 3 * 2.0) / 1e6)
    assert SECRET not in caplog.text and SECRET not in res.model_dump_json()


# --- Gemini (mocked HTTP) -----------------------------------------------------------------------


def test_gemini_success_and_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_GEMINI_KEY", SECRET)
    worker = WorkerConfig.model_validate(
        {
            "provider": "gemini",
            "model": "gemini-x",
            "api_key_env": "TEST_GEMINI_KEY",
            "params": {"reasoning_effort": "low"},
        }
    )
    req = gemini_request(worker, MSG)
    assert req["config"]["system_instruction"] == "be brief"
    assert req["config"]["thinking_config"] == {"thinking_level": "LOW"}
    reply = {
        "candidates": [{"content": {"role": "model", "parts": [{"text": "four"}]}}],
        "usageMetadata": {
            "promptTokenCount": 9,
            "candidatesTokenCount": 2,
            "thoughtsTokenCount": 5,
        },
    }
    server = Server(httpx.Response(200, json=reply))
    out = complete(GeminiProvider(worker, http_client=server.client()))
    assert out.text == "four" and out.usage.input_tokens == 9 and out.usage.output_tokens == 7
    limited = {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}}
    server = Server(httpx.Response(429, json=limited))
    e = call_error(GeminiProvider(worker, http_client=server.client()))
    assert e.kind == ErrorKind.RATE_LIMIT and e.retryable
    assert len(server.requests) == 1  # the SDK's own retries are off


# --- keys and factory ---------------------------------------------------------------------------


def test_missing_key_env_var_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_OPENAI_KEY")
    with pytest.raises(ConfigError, match="TEST_OPENAI_KEY is not set") as info:
        resolve_key(openai_worker(name="gpt-5"), worker_id=2)
    assert str(info.value).startswith("worker 2 (gpt-5): environment variable TEST_OPENAI_KEY")
    monkeypatch.setenv("TEST_OPENAI_KEY", "   ")
    with pytest.raises(ConfigError, match="TEST_OPENAI_KEY"):
        build_provider(openai_worker(), worker_id=0)


def test_key_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    assert resolve_key(openai_worker(api_key_env=None)) == LOCAL_DUMMY_KEY
    assert resolve_key(openai_worker()) == SECRET
    sim = WorkerConfig(provider="simulated", model="s")
    assert resolve_key(sim) is None
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        resolve_key(WorkerConfig(provider="anthropic", model="c"))
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "g-key")
    assert resolve_key(WorkerConfig(provider="gemini", model="g")) == "g-key"


def test_redact() -> None:
    text = f"bad key {SECRET} (…{SECRET[-8:]})"
    out = redact(text, [SECRET, None])
    assert SECRET not in out and SECRET[-8:] not in out and "***" in out
    assert redact("EMPTY stays", ["EMPTY"]) == "EMPTY stays"


def test_error_for_status_table() -> None:
    cases = {
        429: (ErrorKind.RATE_LIMIT, True),
        408: (ErrorKind.TIMEOUT, True),
        401: (ErrorKind.AUTH, False),
        403: (ErrorKind.AUTH, False),
        404: (ErrorKind.NOT_FOUND, False),
        400: (ErrorKind.CLIENT, False),
        500: (ErrorKind.SERVER, True),
        501: (ErrorKind.SERVER, False),
        529: (ErrorKind.SERVER, True),
    }
    for status, (kind, retryable) in cases.items():
        e = error_for_status(status, "x")
        assert (e.kind, e.retryable, e.status) == (kind, retryable, status)


def test_a_worker_that_is_not_deployed_is_infrastructure_not_the_plans_fault() -> None:
    """A 404 (a misconfigured model name or endpoint) must not score plans 0 in training."""
    from conductor_core.workers.types import is_plan_fault

    assert not is_plan_fault(error_for_status(404, "model 'gpt-9' does not exist").kind)
    assert is_plan_fault(error_for_status(400, "bad request").kind)


def test_a_prompt_longer_than_the_context_is_a_context_overflow_and_the_plans_fault() -> None:
    """413, or a 400/422 worded as a context overflow by OpenAI, vLLM, Anthropic or Gemini, is a
    context overflow (not retried); it and other rejected requests are the plan's fault, while
    rate limits, server errors, timeouts and credentials are the infrastructure's."""
    from conductor_core.workers.types import is_plan_fault

    overflows = [
        (400, "This model's maximum context length is 4096 tokens. However, you requested 5000"),
        (400, "context_length_exceeded: reduce the length of the messages"),
        (400, "prompt is too long: 210000 tokens > 200000 maximum"),
        (400, "The input token count (1200000) exceeds the maximum number of tokens allowed"),
        (422, "Input is too long for this model"),
        (413, "Request Entity Too Large"),
    ]
    for status, message in overflows:
        e = error_for_status(status, message)
        assert (e.kind, e.retryable) == (ErrorKind.CONTEXT_OVERFLOW, False), message
    assert error_for_status(400, "temperature must be at most 2").kind == ErrorKind.CLIENT
    plan = [ErrorKind.CONTEXT_OVERFLOW, ErrorKind.CLIENT, ErrorKind.DEADLINE]
    assert all(is_plan_fault(k) for k in plan)
    for status in (401, 403, 408, 429, 500, 503):
        assert not is_plan_fault(error_for_status(status, "maximum context length").kind)
    for kind in (ErrorKind.CONNECTION, ErrorKind.CIRCUIT_OPEN, ErrorKind.MALFORMED, None):
        assert not is_plan_fault(kind)


def test_build_provider_dispatch(tmp_path) -> None:
    p = build_provider(openai_worker(), worker_id=0)
    assert isinstance(p, OpenAIProvider) and SECRET not in repr(p)
    asyncio.run(p.aclose())
    from conductor_core.simulation.provider import SimulatedProvider

    assert isinstance(
        build_provider(WorkerConfig(provider="simulated", model="s")), SimulatedProvider
    )
    with pytest.raises(ConfigError, match="not a local directory"):
        build_provider(
            WorkerConfig(provider="transformers", model=str(tmp_path / "none")), worker_id=1
        )
