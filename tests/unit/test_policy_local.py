"""TransformersPlanSource on the tiny random Conductor."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conductor_core.errors import ConfigError
from conductor_core.policy import tiny
from conductor_core.policy.base import PlanRequest, PlanSource, PreviousRound, WorkerInfo
from conductor_core.policy.local import TransformersPlanSource
from conductor_core.workflow.errors import PlanFormatError
from conductor_core.workflow.prompts import plan_messages

WORKERS = (WorkerInfo(0, "math"), WorkerInfo(1, "code"), WorkerInfo(2, "general"))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return tiny.build_tiny_conductor(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def source(model_dir: Path) -> TransformersPlanSource:
    src = TransformersPlanSource(model_dir, max_new_tokens=6, seed=7)
    src.load()
    return src


def _request(question: str = "What is 12 * 7?", **kw) -> PlanRequest:
    return PlanRequest(question=question, workers=WORKERS, **kw)


def test_plan_returns_a_result_without_raising(source: TransformersPlanSource) -> None:
    assert isinstance(source, PlanSource)
    result = asyncio.run(source.plan(_request()))
    assert isinstance(result.raw, str)
    # Random weights: almost surely not a plan, but then a format error with a reason code.
    assert result.ok or isinstance(result.error, PlanFormatError)
    if not result.ok:
        assert result.error.code.value
    assert 1 <= result.output_tokens <= 6
    assert result.input_tokens > 100
    assert result.latency_s > 0


def test_respects_max_new_tokens(model_dir: Path) -> None:
    src = TransformersPlanSource(model_dir, max_new_tokens=3, seed=0)
    results = asyncio.run(src.plan_many([_request(sample_index=i) for i in range(3)]))
    assert all(1 <= r.output_tokens <= 3 for r in results)
    for r in results:
        assert r.extra["finish_reason"] == ("length" if r.output_tokens == 3 else "stop")


def test_seed_makes_plans_replayable(source: TransformersPlanSource) -> None:
    first = asyncio.run(source.plan(_request(sample_index=2)))
    second = asyncio.run(source.plan(_request(sample_index=2)))
    assert first.raw == second.raw
    assert first.output_tokens == second.output_tokens


def test_greedy_is_deterministic_without_seed(model_dir: Path) -> None:
    src = TransformersPlanSource(model_dir, max_new_tokens=4, temperature=0.0)
    a = asyncio.run(src.plan(_request()))
    b = asyncio.run(src.plan(_request()))
    assert a.raw == b.raw


def test_plan_many_batches_with_left_padding(source: TransformersPlanSource) -> None:
    requests = [_request("Hi?"), _request("A much longer question " * 5, sample_index=1)]
    results = asyncio.run(source.plan_many(requests))
    assert len(results) == 2
    assert results[0].input_tokens < results[1].input_tokens
    assert all(r.extra["batch_size"] == 2 for r in results)
    assert source._tokenizer.padding_side == "left"
    assert asyncio.run(source.plan_many([])) == []


def test_concurrent_plans_queue_on_the_lock(source: TransformersPlanSource) -> None:
    async def go():
        return await asyncio.gather(*(source.plan(_request(sample_index=i)) for i in range(2)))

    results = asyncio.run(go())
    assert len(results) == 2
    assert all(r.output_tokens >= 1 for r in results)


def test_prompt_uses_chat_template_and_recursion_turns(source: TransformersPlanSource) -> None:
    first = source.prompt_text(_request())
    assert first.startswith("<|im_start|>user\n")
    assert first.endswith("<|im_start|>assistant\n")
    assert "What is 12 * 7?" in first
    previous = PreviousRound(plan="model_id = [0]", answer="ANSWER-84")
    request = _request(previous=previous)
    again = source.prompt_text(request)
    # round 1's prompt (less its generation prompt), the plan as the model's own turn, the
    # recursion turn with the answer, then the generation prompt
    turn = plan_messages(request)[-1]["content"]
    assert "ANSWER-84" in turn and "ANSWER-84" not in first
    head = first.removesuffix("<|im_start|>assistant\n")
    assert again == (
        f"{head}<|im_start|>assistant\nmodel_id = [0]<|im_end|>\n"
        f"<|im_start|>user\n{turn}<|im_end|>\n<|im_start|>assistant\n"
    )


def test_plan_messages_descriptor_mode() -> None:
    plain = plan_messages(_request())
    described = plan_messages(_request(descriptors=True))
    assert len(plain) == 1 and plain[0]["role"] == "user"
    assert "Model 2" in plain[0]["content"]
    assert "general" in described[0]["content"]


def test_recursion_round_accepts_the_keep_plan(model_dir: Path, monkeypatch) -> None:
    src = TransformersPlanSource(model_dir, max_new_tokens=4)
    keep = "Keep it.\nmodel_id = []\nsubtasks = []\naccess_list = []"
    monkeypatch.setattr(src, "_generate", lambda prompts, **_: [(keep, 10, 4, True)])
    src.load()
    result = asyncio.run(src.plan(_request(previous=PreviousRound(plan="x", answer="y"))))
    assert result.ok and result.workflow.is_keep
    first_round = asyncio.run(src.plan(_request()))
    assert not first_round.ok and first_round.error.code.value == "empty_plan"


def test_missing_model_dir_is_a_config_error(tmp_path: Path) -> None:
    src = TransformersPlanSource(tmp_path / "nope")
    with pytest.raises(ConfigError, match=r"model_dir: .* has no config\.json"):
        asyncio.run(src.plan(_request()))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"temperature": -1}, "temperature"),
        ({"top_p": 0}, "top_p"),
    ],
)
def test_bad_settings_are_config_errors(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        TransformersPlanSource("x", **kwargs)


def test_from_loaded_and_aclose(source: TransformersPlanSource) -> None:
    wrapped = TransformersPlanSource.from_loaded(source._model, source._tokenizer, max_new_tokens=2)
    result = asyncio.run(wrapped.plan(_request()))
    assert 1 <= result.output_tokens <= 2
    asyncio.run(wrapped.aclose())
    assert wrapped._model is None


def test_a_trained_model_is_asked_in_the_style_saved_with_it(model_dir: Path, tmp_path) -> None:
    """A request in the full style reaches a model trained on the compact prompt as compact."""
    import shutil

    from conductor_core.workflow.prompts import compact_prompt, save_prompt_spec

    trained = tmp_path / "trained"
    shutil.copytree(model_dir, trained)
    save_prompt_spec(trained, "compact")
    src = TransformersPlanSource(trained, max_new_tokens=2)
    assert src.prompt_style == "compact"
    assert compact_prompt("What is 12 * 7?", 3) in src.prompt_text(_request())
    plain = TransformersPlanSource(model_dir, max_new_tokens=2)
    assert plain.prompt_style is None
    assert "What is 12 * 7?" in plain.prompt_text(_request())
    assert compact_prompt("What is 12 * 7?", 3) not in plain.prompt_text(_request())
    forced = TransformersPlanSource(model_dir, max_new_tokens=2, prompt_style="compact")
    assert compact_prompt("What is 12 * 7?", 3) in forced.prompt_text(_request())


def test_a_model_of_an_older_prompt_version_is_asked_its_recursion_round_as_it_learned(
    model_dir: Path, tmp_path
) -> None:
    """A model saved with prompt version 2 learned the recursion round as one user message."""
    import json
    import shutil

    from conductor_core.workflow.prompts import PROMPT_SPEC_FILE, save_prompt_spec
    from scripts.vllm_batch import VLLMBatchPlanSource

    older = tmp_path / "older"
    shutil.copytree(model_dir, older)
    save_prompt_spec(older, "full")
    spec = older / PROMPT_SPEC_FILE
    spec.write_text(json.dumps({**json.loads(spec.read_text()), "prompt_version": "2"}))
    request = _request(previous=PreviousRound(plan="model_id = [0]", answer="ANSWER-84"))
    src = TransformersPlanSource(older, max_new_tokens=2)
    assert src.prompt_version == "2"
    text = src.prompt_text(request)
    assert text.count("<|im_start|>") == 2  # one user message, then the generation prompt
    assert "<previous_plan>\nmodel_id = [0]\n</previous_plan>" in text
    current = TransformersPlanSource(model_dir, max_new_tokens=2, prompt_version="3")
    assert current.prompt_text(request).count("<|im_start|>") == 4
    assert VLLMBatchPlanSource(older).prompt_version == "2"  # reads the spec; no vLLM needed


def test_a_model_trained_in_descriptor_mode_is_shown_the_descriptions(
    model_dir: Path, tmp_path
) -> None:
    """``data.descriptors`` is saved with the weights: the model is then asked with the workers'
    descriptions even when a request does not ask for them."""
    import json
    import shutil

    from conductor_core.workflow.prompts import PROMPT_SPEC_FILE, save_prompt_spec

    trained = tmp_path / "described"
    shutil.copytree(model_dir, trained)
    save_prompt_spec(trained, "compact", descriptors=True)
    assert json.loads((trained / PROMPT_SPEC_FILE).read_text())["descriptors"] is True
    text = TransformersPlanSource(trained, max_new_tokens=2).prompt_text(_request())
    described = ", ".join(f"{w.description}: {w.id}" for w in WORKERS)
    assert f"Models: {described}." in text
    save_prompt_spec(trained, "compact")
    assert "descriptors" not in json.loads((trained / PROMPT_SPEC_FILE).read_text())
    bare = TransformersPlanSource(trained, max_new_tokens=2).prompt_text(_request())
    assert "Models: 0, 1, 2." in bare
