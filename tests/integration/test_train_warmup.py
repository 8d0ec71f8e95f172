"""Format warm-up training: a dozen optimizer steps on the tiny model lower the loss (the
synthetic plans and the encoding: tests/unit/test_train_warmup.py)."""

from __future__ import annotations

import pytest

from conductor_core.tasks.problem import read_problems
from conductor_core.train.config import build_config
from conductor_core.train.data import select_problems
from conductor_core.train.warmup import run_warmup
from conductor_core.workers.bundled import bundled_train_problems_path

PROBLEMS = select_problems(read_problems(bundled_train_problems_path()), "train", 60)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from conductor_core.policy.tiny import build_tiny_conductor

    path = build_tiny_conductor(
        tmp_path_factory.mktemp("tiny") / "m", hidden=64, heads=2, kv_heads=1, layers=1, vocab=300
    )
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


@pytest.mark.slow  # a dozen optimizer steps on the tiny model (4-20 s on 2 shared cores)
def test_run_warmup_lowers_the_loss(tiny):
    model, tok = tiny
    config = build_config(
        {"warmup": {"steps": 12, "batch_size": 8, "learning_rate": 3e-3}}, profile="tiny"
    )
    losses: list[float] = []
    stats = run_warmup(model, tok, PROBLEMS, 4, config, on_step=lambda i, v: losses.append(v))
    assert stats["steps"] == 12 and len(losses) == 12
    assert sum(losses[-3:]) / 3 < sum(losses[:3]) / 3


def _own(steps: int = 2, tokens: int = 48, **warmup):
    return build_config(
        {
            "warmup": {
                "enabled": True,
                "targets": "own",
                "samples": 8,
                "steps": steps,
                "batch_size": 4,
                "prompt_loss": False,
                "max_subtask_chars": 12,
                **warmup,
            },
            "generation": {"max_completion_length": tokens},
        },
        profile="tiny",
    )


@pytest.mark.slow  # 8 plans sampled under the grammar, 2 LoRA steps (seconds)
def test_own_plans_are_the_models_plans_under_the_grammar_as_the_stage_asks(tiny):
    from conductor_core.train.warmup import own_plan_texts
    from conductor_core.workflow.parser import try_parse_plan

    model, tok = tiny
    config = _own()
    kept = own_plan_texts(model, tok, PROBLEMS, 4, config, 8, seed=1)
    assert 0 < len(kept) <= 8  # an untrained model still finishes some plans in 48 tokens
    for messages, plan in kept:
        assert messages[-1]["role"] == "user" and "Models:" in messages[-1]["content"]
        workflow, error = try_parse_plan(plan, workers=None, max_steps=5, access_mode="binary")
        assert workflow is not None, error
    again = own_plan_texts(model, tok, PROBLEMS, 4, config, 8, seed=1)
    assert again == kept  # seeded: a rerun samples the same plans


@pytest.mark.slow  # 16 plans sampled under the grammar (seconds)
def test_own_plans_are_sampled_in_batches_of_sample_batch_size(tiny):
    from conductor_core.train.warmup import own_plan_texts

    model, tok = tiny
    lines: list[str] = []
    own_plan_texts(model, tok, PROBLEMS, 4, _own(), 8, seed=1, log=lines.append)
    assert [line.split()[2] for line in lines] == ["4/8", "8/8"]  # batch_size 4
    lines.clear()
    own_plan_texts(model, tok, PROBLEMS, 4, _own(sample_batch_size=8), 8, seed=1, log=lines.append)
    assert [line.split()[2] for line in lines] == ["8/8"]


@pytest.mark.slow
def test_a_lora_warmup_merges_its_update_into_the_weights(tiny):
    import copy

    model, tok = tiny
    model = copy.deepcopy(model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    lines: list[str] = []
    stats = run_warmup(
        model, tok, PROBLEMS, 4, _own(lora=True, learning_rate=1e-2), log=lines.append
    )
    assert stats["steps"] == 2 and 0 < stats["parsed"] <= stats["sampled"] == 8
    assert lines[-1] == f"warm-up: sampled 8/8 own plans, {stats['parsed']:.0f} parse"
    after = dict(model.named_parameters())
    assert set(after) == set(before)  # merged: no adapter left in the model
    moved = [n for n in before if not (after[n].detach() == before[n]).all()]
    assert any("q_proj" in n for n in moved)  # the adapters' layers took the update
    assert not any("embed" in n for n in moved)  # only they did


@pytest.mark.slow
def test_no_own_plan_that_parses_is_a_clear_error(tiny):
    from conductor_core.errors import ConfigError

    model, tok = tiny
    with pytest.raises(ConfigError, match=r"none of the 8 plans .* parsed"):
        run_warmup(model, tok, PROBLEMS, 4, _own(tokens=8))
