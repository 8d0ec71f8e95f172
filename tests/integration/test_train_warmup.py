"""Format warm-up training: a dozen optimizer steps on the tiny model lower the loss (the
synthetic plans and the encoding: tests/unit/test_train_warmup.py)."""

from __future__ import annotations

import pytest

from conductor_core.tasks.problem import read_problems
from conductor_core.train.config import build_config
from conductor_core.train.data import select_problems
from conductor_core.train.problems import bundled_train_problems_path
from conductor_core.train.warmup import run_warmup

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
