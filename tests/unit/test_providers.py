"""Providers over mocked HTTP (``httpx.MockTransport``): request shape, error mapping, usage, key
hygiene; key lookup; the provider factory."""

from __future__ import annotations

import asyncio
import json
import logging
import random
import traceback
from typing import Any

import httpx
import httpx2
import pytest

from conductor_core.errors import ConfigError
from conductor_core.workers.config import WorkerConfig, parse_pool
from conductor_core.workers.keys import LOCAL_DUMMY_KEY, redact, resolve_key
from conductor_core.workers.pool import WorkerPool
from conductor_core.workers.providers import build_provider, error_for_status
from conductor_core.workers.providers.anthropic_provider import (
    AnthropicProvider,
    thinking_budget,
)
from conductor_core.workers.providers.anthropic_provider import build_request as anthropic_request
from conductor_core.workers.providers.gemini_provider import GeminiProvider
from conductor_core.workers.providers.gemini_provider import build_request as gemini_request
from conductor_core.workers.providers.openai_compat import OpenAIProvider, build_request
from conductor_core.workers.types import ErrorKind, ProviderError

SECRET = "sk-test-SUPERSECRET-0123456789abcdef"
MSG = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]


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


class Server:
    """A scripted mock HTTP server recording requests."""

    def __init__(self, *responses: Any) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.responses[min(len(self.requests), len(self.responses)) - 1]
        if isinstance(item, Exception):
            raise item
        return item

    def client(self, http: Any = httpx) -> Any:
        """An async client of ``http`` (``httpx``, or ``httpx2`` for SDKs that require it)."""
        return http.AsyncClient(transport=http.MockTransport(self))

    def body(self, i: int = -1) -> dict[str, Any]:
        return json.loads(self.requests[i].content)


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


def complete(provider: Any, messages=MSG) -> Any:
    async def main():
        try:
            return await provider.complete(messages)
        finally:
            await provider.aclose()

    return asyncio.run(main())


def call_error(provider: Any) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        complete(provider)
    return info.value


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


# --- Anthropic and Gemini (mocked HTTP) ---------------------------------------------------------


def anthropic_worker(**kw: Any) -> WorkerConfig:
    base = {"provider": "anthropic", "model": "claude-x", "api_key_env": "TEST_ANTHROPIC_KEY"}
    base.update(kw)
    return WorkerConfig.model_validate(base)


@pytest.mark.slow  # the first anthropic import takes ~5 s here
def test_anthropic_success_and_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", SECRET)
    reply = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-x",
        "content": [{"type": "text", "text": "four"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 20, "output_tokens": 4},
    }
    server = Server(httpx2.Response(200, json=reply))
    out = complete(AnthropicProvider(anthropic_worker(), http_client=server.client(httpx2)))
    assert out.text == "four" and out.usage.input_tokens == 20 and out.usage.output_tokens == 4
    body = server.body()
    assert body["system"] == "be brief"
    assert body["messages"] == [{"role": "user", "content": "2+2?"}]
    headers = server.requests[0].headers
    assert SECRET in (
        headers.get("x-api-key"),
        headers.get("authorization", "").removeprefix("Bearer "),
    )
    assert "thinking" not in body and "temperature" not in body
    worker = anthropic_worker(
        params={"max_tokens": 4096, "reasoning_effort": "low", "extra": {"temperature": 1.0}}
    )
    req = anthropic_request(worker, MSG)
    assert req["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert req["extra_body"] == {"temperature": 1.0}


@pytest.mark.slow
def test_anthropic_errors_and_thinking(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", SECRET)
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    server = Server(httpx2.Response(529, json=overloaded, headers={"retry-after": "2"}))
    e = call_error(AnthropicProvider(anthropic_worker(), http_client=server.client(httpx2)))
    assert e.kind == ErrorKind.SERVER and e.retryable and e.retry_after == 2.0
    server = Server(httpx2.Response(401, json={"type": "error", "error": {"message": SECRET}}))
    e = call_error(AnthropicProvider(anthropic_worker(), http_client=server.client(httpx2)))
    assert e.kind == ErrorKind.AUTH and SECRET not in str(e)
    assert thinking_budget(None, 4096) is None
    assert thinking_budget("medium", 4096) == 4095
    assert thinking_budget("low", 512) is None


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
        404: (ErrorKind.CLIENT, False),
        500: (ErrorKind.SERVER, True),
        501: (ErrorKind.SERVER, False),
        529: (ErrorKind.SERVER, True),
    }
    for status, (kind, retryable) in cases.items():
        e = error_for_status(status, "x")
        assert (e.kind, e.retryable, e.status) == (kind, retryable, status)


def test_build_provider_dispatch(tmp_path) -> None:
    p = build_provider(openai_worker(), worker_id=0)
    assert isinstance(p, OpenAIProvider) and SECRET not in repr(p)
    asyncio.run(p.aclose())
    from conductor_core.workers.simulated import SimulatedProvider

    assert isinstance(
        build_provider(WorkerConfig(provider="simulated", model="s")), SimulatedProvider
    )
    with pytest.raises(ConfigError, match="not a local directory"):
        build_provider(
            WorkerConfig(provider="transformers", model=str(tmp_path / "none")), worker_id=1
        )


# --- local transformers ---------------------------------------------------------------------------


def _tiny_model(path) -> None:
    """Save a tiny random Qwen2 model with a locally trained byte-level BPE tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    specials = ["<|im_start|>", "<|im_end|>", "<pad>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(["what is two plus two? the answer is four."] * 20, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<pad>", bos_token=None
    )
    fast.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    fast.save_pretrained(path)
    cfg = Qwen2Config(
        vocab_size=len(fast),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
    )
    import torch

    torch.manual_seed(0)
    Qwen2ForCausalLM(cfg).save_pretrained(path)


@pytest.mark.slow  # imports torch + transformers and builds a model (~10 s on 2 cores)
def test_transformers_provider_generates_counts_tokens_and_is_seeded(tmp_path) -> None:
    from conductor_core.workers.providers.transformers_provider import TransformersProvider

    model_dir = tmp_path / "tiny"
    _tiny_model(model_dir)
    worker = WorkerConfig.model_validate(
        {
            "provider": "transformers",
            "model": str(model_dir),
            "params": {"max_tokens": 6, "temperature": 1.0, "extra": {"min_new_tokens": 6}},
        }
    )
    provider = build_provider(worker)
    assert isinstance(provider, TransformersProvider)

    async def main():
        a = await provider.complete(MSG, sample_index=0)
        b = await provider.complete(MSG, sample_index=0)
        c = await asyncio.gather(*(provider.complete(MSG, sample_index=i) for i in range(1, 4)))
        await provider.aclose()
        return a, b, c

    a, b, others = asyncio.run(main())
    assert a.text and a.text == b.text  # same sample index -> same reply
    assert a.usage.output_tokens == 6 and a.usage.input_tokens > 5
    assert len({o.text for o in others} | {a.text}) > 1
