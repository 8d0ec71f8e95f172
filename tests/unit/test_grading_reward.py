"""The reward mapping and the grade() dispatch basics."""

from __future__ import annotations

import pytest

from conductor_core.tasks.grading import Verdict, grade, reward
from conductor_core.tasks.problem import Problem


def test_reward_mapping_follows_the_paper() -> None:
    assert reward(plan_ok=False, verdict=None) == 0.0
    assert reward(plan_ok=True, verdict=Verdict(False, "wrong")) == 0.5
    assert reward(plan_ok=True, verdict=Verdict(True, "right")) == 1.0


def test_infrastructure_failures_are_excluded() -> None:
    assert reward(plan_ok=True, verdict=Verdict(True, "x"), infra_error=True) is None
    assert reward(plan_ok=True, verdict=Verdict(False, "sandbox", infra_error=True)) is None
    assert reward(plan_ok=False, verdict=None, infra_error=True) is None


def test_a_plan_failure_scores_zero_like_a_format_error() -> None:
    """A plan that parsed but failed by its own fault scores 0 whatever its verdict; only
    infrastructure is left out."""
    assert reward(plan_ok=True, verdict=None, plan_failure=True) == 0.0
    assert reward(plan_ok=True, verdict=Verdict(True, "x"), plan_failure=True) == 0.0
    assert reward(plan_ok=True, verdict=None, plan_failure=True, infra_error=True) is None


def test_parsed_plan_without_verdict_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="verdict is required"):
        reward(plan_ok=True, verdict=None)


def test_verdict_to_dict_round_trip() -> None:
    v = Verdict(True, "ok", "42", {"k": 1})
    assert v.to_dict() == {
        "correct": True,
        "reason": "ok",
        "extracted": "42",
        "details": {"k": 1},
        "infra_error": False,
    }


@pytest.mark.parametrize(
    ("domain", "ref", "answer", "correct"),
    [
        ("math", "4", "\\boxed{4}", True),
        ("mcq", "A", "Answer: A", True),
        ("freeform", "Paris", "paris", True),
        ("math", "4", "\\boxed{5}", False),
    ],
)
def test_dispatch_by_domain(domain: str, ref: str, answer: str, correct: bool) -> None:
    choices = ["x", "y", "z", "w"] if domain == "mcq" else []
    p = Problem(id="p", source="t", domain=domain, question="q", reference=ref, choices=choices)
    assert grade(p, answer).correct is correct
