"""The recursive stage's expert start: executed round-2 contexts become keep or new-plan targets,
drawn in proportion to what the better decision gains, so the targets of contexts the model cannot
tell apart settle on the decision worth more on average (the executions:
tests/integration/test_train_expert_start.py)."""

from __future__ import annotations

from random import Random

import pytest

from conductor_core.errors import ConfigError
from conductor_core.tasks.problem import read_problems
from conductor_core.train.config import build_config
from conductor_core.train.data import select_problems
from conductor_core.train.recursion_start import Context, recursion_examples
from conductor_core.train.warmup import KEEP_PLAN
from conductor_core.workers.bundled import bundled_train_problems_path

PROBLEMS = select_problems(read_problems(bundled_train_problems_path()), "train", 4)
PLAN = "model_id = [2]\nsubtasks = ['Answer the question.']\naccess_list = [[]]"
CONFIG = build_config({"stage": "recursive", "expert_start": {"enabled": True}}, profile="tiny")


def contexts(answer: str, right: int, wrong: int, new_plan_value: float) -> list[Context]:
    """``right`` + ``wrong`` executions of one plan on the first problem that all answered
    ``answer`` (one observation), graded 1 or 0, a new plan worth ``new_plan_value`` after each."""
    pid = PROBLEMS[0].id
    return [Context(pid, PLAN, answer, 1.0, new_plan_value) for _ in range(right)] + [
        Context(pid, PLAN, answer, 0.0, new_plan_value) for _ in range(wrong)
    ]


def round2_targets(examples: list[tuple[list[dict[str, str]], str]], answer: str) -> list[str]:
    """The targets of the round-2 examples whose prompt shows ``answer``."""
    return [target for messages, target in examples if answer in messages[-1]["content"]]


def test_targets_settle_on_the_decision_worth_more_for_what_the_model_sees():
    # A plain answer is right 98 times in 100 and a hedged one 70 in 100; a new plan is right
    # 0.9 of the time. Keeping is worth more after the plain one (0.98 > 0.9), less after the
    # hedged one (0.7 < 0.9), although the hedged one is usually right.
    plain, hedged = "The answer is 12.", "The answer is 7. I am not sure."
    pool = contexts(plain, 98, 2, 0.9) + contexts(hedged, 70, 30, 0.9)
    examples = recursion_examples(
        Random(0), PROBLEMS, {PROBLEMS[0].id: PLAN}, pool, 4, CONFIG, 8000
    )
    for answer, worth_keeping in ((plain, True), (hedged, False)):
        targets = round2_targets(examples, answer)
        keep = sum(t == KEEP_PLAN for t in targets) / len(targets)
        assert set(targets) == {KEEP_PLAN, PLAN}
        # keep share = E[max(-A, 0)] / E[|A|]: 0.98 x 0.1 / (0.98 x 0.1 + 0.02 x 0.9) = 0.845
        # after the plain answer, 0.7 x 0.1 / (0.07 + 0.3 x 0.9) = 0.206 after the hedged one
        assert keep == pytest.approx(0.845 if worth_keeping else 0.206, abs=0.05)
        assert (keep > 0.5) is worth_keeping


def test_half_the_examples_keep_round_one_and_ties_are_never_drawn():
    pid = PROBLEMS[0].id
    tie = Context(pid, PLAN, "A tie.", 1.0, 1.0)
    pool = [tie, Context(pid, PLAN, "Wrong.", 0.0, 1.0)]
    examples = recursion_examples(Random(1), PROBLEMS, {pid: PLAN}, pool, 4, CONFIG, 100)
    round1 = [m for m, _ in examples if "Wrong." not in m[-1]["content"]]
    assert len(round1) == 50
    assert not round2_targets(examples, "A tie.")  # nothing to learn from a tie
    assert set(round2_targets(examples, "Wrong.")) == {PLAN}
    assert all(target == PLAN for _, target in examples)


def test_contexts_without_a_decision_worth_making_are_refused():
    pid = PROBLEMS[0].id
    ties = [Context(pid, PLAN, "Same.", 1.0, 1.0), Context(pid, PLAN, "Same.", 0.0, 0.0)]
    with pytest.raises(ConfigError, match="expert_start"):
        recursion_examples(Random(0), PROBLEMS, {pid: PLAN}, ties, 4, CONFIG, 10)
