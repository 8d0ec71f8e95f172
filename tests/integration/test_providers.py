"""Providers whose first use takes seconds: the Anthropic provider over mocked HTTP
(``httpx.MockTransport``; importing the Anthropic SDK takes 1.5-3 s here), and the local
transformers provider generating on a tiny random Qwen2 model (the other providers:
tests/unit/test_providers.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx2
import pytest

from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.providers import build_provider
from conductor_core.workers.providers.anthropic_provider import (
    AnthropicProvider,
    thinking_budget,
)
from conductor_core.workers.providers.anthropic_provider import build_request as anthropic_request
from conductor_core.workers.types import ErrorKind
from tests.support.mock_providers import MSG, SECRET, Server, call_error, complete

# --- Anthropic (mocked HTTP) ---------------------------------------------------------------------


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


@pytest.mark.slow  # imports torch + transformers
def test_a_local_model_that_cannot_load_is_infrastructure_not_the_plans_fault(tmp_path) -> None:
    """A folder with no model in it fails every call as a server error (not retried): the
    deployment's fault, left out of training, not a client error that would score the plan 0."""
    from conductor_core.workers.types import ProviderError, is_plan_fault

    provider = build_provider(WorkerConfig(provider="transformers", model=str(tmp_path)))
    with pytest.raises(ProviderError) as failed:
        asyncio.run(provider.complete(MSG))
    assert "could not load or run model" in str(failed.value)
    assert failed.value.kind == ErrorKind.SERVER and not failed.value.retryable
    assert not is_plan_fault(failed.value.kind)
