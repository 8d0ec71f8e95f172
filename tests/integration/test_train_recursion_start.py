"""The recursive stage's expert start on the simulated pool: each execution of a round-1 plan is a
round-2 context whose keep value is its answer's grade, and the new plan after it is a fresh draw
(the targets: tests/unit/test_train_recursion_start.py; a stage run:
tests/integration/test_train_grpo.py)."""

from __future__ import annotations

import asyncio

import pytest

from conductor_core.simulation.answers import HEDGES
from conductor_core.train.config import build_config
from conductor_core.train.expert_start import one_step_plan
from conductor_core.train.grpo import load_inputs
from conductor_core.train.recursion_start import executed_contexts
from conductor_core.train.reward import best_workers

pytestmark = pytest.mark.slow  # 30 questions x 16 executions x (1 + 4) simulated runs (2-6 s)


def test_each_execution_is_a_context_and_a_new_plan_draws_afresh(tmp_path):
    config = build_config(
        {
            "stage": "recursive",
            "output_dir": str(tmp_path),
            "expert_start": {"enabled": True, "executions": 16},
            "tracking": {"backend": "none"},
        },
        profile="tiny",
    )
    train, _, pool = load_inputs(config)
    train = train[:30]
    # a generalist's plan: wrong often enough to give both decisions something to win
    generalist = min(
        range(len(pool.workers)), key=lambda w: list(best_workers(pool).values()).count(w)
    )
    plan = one_step_plan(generalist, config.data.access_mode)
    plans = {p.id: plan for p in train}
    contexts = asyncio.run(executed_contexts(train, plans, pool, config))
    assert len(contexts) == 30 * 16  # every execution answered
    runs = config.reward.executions_per_plan
    assert {c.keep_value for c in contexts} == {0.5, 1.0}  # a wrong answer scores 0.5
    halves = [c.new_plan_value * runs * 2 for c in contexts]  # means of `runs` rewards 0.5 or 1
    assert all(h == round(h) for h in halves) and min(halves) >= runs
    wrong = [c for c in contexts if c.keep_value == 0.5]
    right = [c for c in contexts if c.keep_value == 1.0]
    mean = lambda cs: sum(c.new_plan_value for c in cs) / len(cs)  # noqa: E731
    # a new plan after a wrong answer is right about as often as after a right one: fresh draws
    assert mean(wrong) > 0.6 and abs(mean(wrong) - mean(right)) < 0.1
    assert all(c.advantage <= 0 for c in right) and all(c.advantage >= 0 for c in wrong)
    # the simulated workers hedge most wrong answers and few right ones: a cue the model can read
    hedged = lambda cs: sum(any(h in c.answer for h in HEDGES) for c in cs) / len(cs)  # noqa: E731
    assert hedged(wrong) > 0.6 and hedged(right) < 0.25
