"""Expert start: a target names the offered worker whose share of right answers beats the
runner-up's significantly, under the id the prompt shows (the executions and a stage run:
tests/integration/test_train_expert_start.py, tests/integration/test_train_grpo.py)."""

from __future__ import annotations

from random import Random

import pytest

from conductor_core.errors import ConfigError
from conductor_core.tasks.problem import read_problems
from conductor_core.train.config import build_config
from conductor_core.train.data import select_problems
from conductor_core.train.expert_start import expert_examples, one_step_plan, significant_best
from conductor_core.workers.bundled import bundled_train_problems_path
from conductor_core.workflow.parser import parse_plan

PROBLEMS = select_problems(read_problems(bundled_train_problems_path()), "train", 40)
DESCRIPTIONS = ("desc zero", "desc one", "desc two", "desc three")
RATES = [0.25, 0.4, 0.9, 0.6]  # worker 2 first, then 3, 1, 0: every gap significant in 32 runs
EXECUTIONS = {"executions": 32, "z": 1.645}


def shown_workers(prompt: str) -> dict[int, str]:
    """The compact prompt's offered workers: shown id -> description ("" without descriptions)."""
    listed = prompt.split("Models: ", 1)[1].split(". Write", 1)[0]
    out = {}
    for entry in listed.split(", "):
        description, _, shown = entry.rpartition(": ")
        out[int(shown)] = description
    return out


def test_significant_best_needs_a_gap_the_executions_can_tell():
    assert significant_best([0.25, 0.9], [0, 1], 32, 1.645) == 1
    assert significant_best([0.25, 0.9, 0.85], [0, 1, 2], 32, 1.645) is None  # 0.9 vs 0.85
    assert significant_best([0.25, 0.9, 0.85], [0, 1, 2], 2000, 1.645) == 1  # more runs tell
    assert significant_best([0.25, 0.4], [0, 1], 32, 1.645) is None
    assert significant_best([0.25, 0.4], [0, 1], 32, 0.5) == 1  # a weaker test accepts it
    assert significant_best([1.0, 1.0], [0, 1], 32, 0.0) is None  # no spread: a tie
    assert significant_best([0.9, None], [0, 1], 32, 1.645) is None  # unknown: every run spoiled
    assert significant_best([0.9, 0.1], [0], 32, 1.645) is None  # one offered worker: no choice


def test_targets_name_the_best_offered_pool_id():
    config = build_config({"stage": "adaptive", "expert_start": EXECUTIONS}, profile="tiny")
    rates = {p.id: RATES for p in PROBLEMS}
    pairs = expert_examples(Random(0), PROBLEMS, rates, 4, config, 60)
    assert len(pairs) == 60
    for messages, plan in pairs:
        offered = list(shown_workers(messages[-1]["content"]))
        worker = parse_plan(plan, workers=4).steps[0].worker
        assert worker == max(offered, key=RATES.__getitem__)


def test_renumbered_targets_name_the_best_workers_shown_id():
    config = build_config(
        {
            "stage": "adaptive",
            "data": {"descriptors": True},
            "adaptive": {"renumber": True},
            "expert_start": EXECUTIONS,
        },
        profile="tiny",
    )
    rates = {p.id: RATES for p in PROBLEMS}
    pairs = expert_examples(Random(3), PROBLEMS, rates, 4, config, 80, descriptions=DESCRIPTIONS)
    rank = dict(zip(DESCRIPTIONS, RATES, strict=True))
    targets, ids = set(), set()
    for messages, plan in pairs:
        shown = shown_workers(messages[-1]["content"])
        worker = parse_plan(plan, workers=10).steps[0].worker
        assert shown[worker] == max(shown.values(), key=rank.__getitem__)
        targets.add(shown[worker])
        ids.update(shown)
    assert {"desc two", "desc three"} <= targets  # subsets with and without worker 2
    assert len(ids) > 4  # random ids, not pool ids


def test_rates_that_never_separate_workers_are_refused():
    config = build_config({"stage": "adaptive", "expert_start": EXECUTIONS}, profile="tiny")
    close = {p.id: [0.5, 0.55, 0.5, 0.45] for p in PROBLEMS}
    with pytest.raises(ConfigError, match="expert_start"):
        expert_examples(Random(0), PROBLEMS, close, 4, config, 5)


def test_one_step_plan_parses():
    plan = parse_plan(one_step_plan(3, "binary"), workers=4)
    assert len(plan.steps) == 1 and plan.steps[0].worker == 3


def test_descriptor_modes_recipe_is_a_valid_adaptive_config(tmp_path):
    from bench.experiment import DESCRIPTOR_MODE, learning_config

    config = learning_config(tmp_path, steps=None, stage="adaptive", extra=DESCRIPTOR_MODE)
    assert config.data.descriptors and config.adaptive.renumber
    assert config.warmup.enabled and config.expert_start.enabled
    assert config.steps == 160  # the tiny profile's adaptive stage
    assert config.expert_start.executions == 128


def test_subsets_that_never_hold_a_best_worker_stop_with_a_clear_error():
    # worker 0 beats worker 1 only; offering all four, 2 and 3 tie at the top: no target ever
    config = build_config({"expert_start": EXECUTIONS}, profile="tiny")  # base: the whole pool
    rates = {p.id: [0.9, 0.1, 0.95, 0.95] for p in PROBLEMS}
    with pytest.raises(ConfigError, match="draws"):
        expert_examples(Random(0), PROBLEMS, rates, 4, config, 5)
