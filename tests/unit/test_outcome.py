"""Grading a solved question (conductor_core.outcome): a plan's own failure scores 0 and is a
wrong answer in evaluation, infrastructure alone is left out."""

from __future__ import annotations

import asyncio

from conductor_core.evaluate.aggregate import aggregate
from conductor_core.evaluate.methods import Attempt
from conductor_core.evaluate.runner import RunConfig, evaluate_one
from conductor_core.outcome import Outcome, combine, grade
from conductor_core.tasks.problem import Problem
from conductor_core.workflow.trace import TraceSummary

PROBLEM = Problem(id="p", source="bench", domain="math", question="1+1?", reference="2")


def test_a_plan_failure_scores_zero_whatever_answer_an_earlier_round_left() -> None:
    """A recursion round whose plan failed keeps the previous (right) answer in deployment; its
    reward is still 0, with the failure as the verdict's reason."""
    summary = TraceSummary(answer="\\boxed{2}", plan_failure="context_overflow", plan_len=2)
    out = asyncio.run(grade(PROBLEM, summary))
    assert out.reward == 0.0 and not out.correct and not out.infra_error
    assert out.verdict_reason == "plan failure: context_overflow"
    infra = asyncio.run(grade(PROBLEM, TraceSummary(infra_error=True)))
    assert infra.reward is None and infra.verdict_reason == "infrastructure failure"


def test_executions_average_a_plan_failure_as_zero() -> None:
    failed = Outcome(reward=0.0, domain="math", plan_failure="deadline_exceeded")
    right = Outcome(reward=1.0, domain="math", answer="\\boxed{2}", correct=True)
    spoiled = Outcome(reward=None, domain="math", infra_error=True)
    assert combine([failed, right, spoiled]).reward == 0.5
    assert combine([spoiled, failed]).reward == 0.0


class _Failing:
    """An evaluation method whose every attempt is a plan failure; counts its attempts."""

    name = "failing"

    def __init__(self) -> None:
        self.attempts = 0

    async def attempt(self, problem: Problem, pool: object, sample_index: int) -> Attempt:
        self.attempts += 1
        return Attempt(TraceSummary(plan_failure="client_error", plan_len=1, calls=1))

    async def aclose(self) -> None:
        return None


def test_evaluation_counts_a_plan_failure_as_wrong_not_as_infrastructure() -> None:
    """Not retried as an infrastructure failure, recorded as a graded wrong answer."""
    method = _Failing()
    config = RunConfig(infra_retries=2, progress=False)
    record = asyncio.run(evaluate_one(method, PROBLEM, 0, pool=None, config=config))
    assert method.attempts == 1 and record.infra_attempts == 1
    assert not record.infra_error and not record.correct and record.reward == 0.0
    row = aggregate([record]).get("failing", "bench")
    assert row.accuracy == 0.0 and row.infra_failure_rate == 0.0 and row.repeats == 1
