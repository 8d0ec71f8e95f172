"""A solved question, graded: the one record that the training reward and evaluation share.

:class:`Outcome` is the :class:`~conductor_core.workflow.trace.TraceSummary` of a
:func:`~conductor_core.solve.solve` trace plus its verdict and the paper's reward
(:func:`conductor_core.tasks.grading.reward`): 0 for a plan that does not parse (in round 1 or,
continuing a round, in a later one) or that failed by its own fault, 0.5 wrong, 1 right, ``None``
only when infrastructure spoiled it. Evaluation records extend it with where they came from (a
plan failure is a wrong answer there, not an infrastructure failure); the reward averages several
executions of one plan with :func:`combine`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from conductor_core.tasks import grading
from conductor_core.tasks.grading import WRONG_REWARD
from conductor_core.tasks.problem import Problem
from conductor_core.workflow.trace import SolveTrace, TraceSummary


class Outcome(TraceSummary):
    """A graded :class:`TraceSummary`."""

    domain: str = ""
    correct: bool = False
    reward: float | None = Field(
        default=None,
        description="0 format error or plan failure, 0.5 wrong, 1 right; None: infrastructure.",
    )
    verdict_reason: str = ""
    answer_reward: float | None = Field(
        default=None,
        description="With several executions averaged (combine()): the reward of the one answer "
        "kept as `answer`, the first usable execution's (what a recursion round shows and may "
        "keep). None: `reward` is that answer's.",
    )

    @property
    def kept_reward(self) -> float | None:
        """The reward of keeping ``answer`` in a later round: its own grade. A round that left no
        answer (its plan did not parse or failed, reward 0) has nothing to keep: keeping is then
        a parsed plan without an answer, a wrong one (0.5), as a later round's keep scores it."""
        if self.answer is None and self.reward is not None:
            return WRONG_REWARD
        return self.reward if self.answer_reward is None else self.answer_reward


async def grade(
    problem: Problem, summary: TraceSummary | SolveTrace, *, timeout_s: float = 10.0
) -> Outcome:
    """Grade a solved question's answer for ``problem`` (no grading after a format error, a plan
    failure or an infrastructure failure of the first round run: those decide the reward alone,
    whatever answer an earlier round left)."""
    if isinstance(summary, SolveTrace):
        summary = TraceSummary.from_trace(summary)
    out = Outcome(**summary.model_dump(), domain=str(problem.domain))
    if summary.infra_error:
        out.verdict_reason = "infrastructure failure"
        out.reward = grading.reward(plan_ok=True, verdict=None, infra_error=True)
    elif summary.format_error:
        out.verdict_reason = f"format error: {summary.format_error_code}"
        out.reward = grading.reward(plan_ok=False, verdict=None)
    elif summary.plan_failure is not None:
        out.verdict_reason = f"plan failure: {summary.plan_failure}"
        out.reward = grading.reward(plan_ok=True, verdict=None, plan_failure=True)
    else:
        verdict = await grading.agrade(problem, summary.answer, timeout_s=timeout_s)
        out.correct = bool(verdict.correct)
        out.verdict_reason = verdict.reason
        out.reward = grading.reward(plan_ok=True, verdict=verdict)
    return out


def combine(outcomes: Sequence[Outcome]) -> Outcome:
    """Several executions of one plan as one outcome: the mean reward and majority verdict of
    those not spoiled by infrastructure (``None`` and ``infra_error`` when all were), the first
    usable execution's answer and plan figures (with the reward of that answer alone,
    ``answer_reward``, when several were averaged), and the calls, tokens and cost of all of
    them."""
    if not outcomes:
        raise ValueError("combine(): no outcomes")
    scored = [o for o in outcomes if o.reward is not None]
    base = scored[0] if scored else outcomes[0]
    out = base.model_copy(deep=True)
    out.calls = sum(o.calls for o in outcomes)
    out.input_tokens = sum(o.input_tokens for o in outcomes)
    out.output_tokens = sum(o.output_tokens for o in outcomes)
    out.cost = sum(o.cost for o in outcomes)
    out.wall_s = sum(o.wall_s for o in outcomes)
    if not scored:
        out.infra_error = True
        out.reward = None
        return out
    out.infra_error = False
    if len(scored) > 1:  # averaged: the mean is no longer the shown answer's grade
        out.answer_reward = base.kept_reward
    out.reward = sum(o.reward or 0.0 for o in scored) / len(scored)
    out.correct = sum(o.correct for o in scored) * 2 > len(scored)
    return out
