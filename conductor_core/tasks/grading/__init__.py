"""Graders: is an answer right for a Problem, and the reward that follows.

``grade``/``agrade`` dispatch on ``problem.domain``:

- ``math``: :mod:`.math` (extraction, normalised equality, math-verify off the main thread);
- ``mcq``: :mod:`.mcq` (robust letter extraction; ambiguous answers are wrong);
- ``code``: :mod:`.code` (the program runs against the tests in the sandbox);
- ``freeform``: :mod:`.freeform` (normalised / numeric match, then the optional judge).

``reward`` maps a plan's parse outcome, its failure if any, and the verdict to the paper's reward.
"""

from __future__ import annotations

import asyncio
from typing import Any

from conductor_core.tasks.grading.code import agrade_code, grade_code
from conductor_core.tasks.grading.freeform import rule_match
from conductor_core.tasks.grading.math import grade_math
from conductor_core.tasks.grading.mcq import grade_mcq
from conductor_core.tasks.grading.verdict import Verdict
from conductor_core.tasks.problem import Domain, Problem

__all__ = ["Verdict", "agrade", "grade", "reward"]


def _no_answer(answer: str | None) -> Verdict | None:
    if answer is None or not str(answer).strip():
        return Verdict(False, "no answer")
    return None


def _grade_rules(problem: Problem, answer: str, timeout_s: float) -> Verdict:
    """Every non-code, non-judge grading path (pure Python, may block up to timeout_s)."""
    if problem.domain == Domain.MATH:
        ok, reason, extracted = grade_math(problem.reference, answer, timeout_s=timeout_s)
        return Verdict(ok, reason, extracted)
    if problem.domain == Domain.MCQ:
        ok, reason, extracted = grade_mcq(problem.reference, answer, choices=problem.choices)
        return Verdict(ok, reason, extracted)

    ok, reason, extracted = rule_match(problem.reference, answer)
    return Verdict(ok, reason, extracted)


async def _ask_judge(problem: Problem, answer: str, rules: Verdict, judge: Any) -> Verdict:
    try:
        ok = bool(await judge(problem.question, problem.reference, answer))
    except Exception as exc:
        return Verdict(
            False,
            f"judge failed: {type(exc).__name__}: {exc}",
            rules.extracted,
            {"rule_reason": rules.reason},
            infra_error=True,
        )
    reason = "judge: matches the reference" if ok else "judge: does not match the reference"
    return Verdict(ok, reason, rules.extracted, {"rule_reason": rules.reason, "judged": True})


async def agrade(
    problem: Problem, answer: str | None, *, judge: Any = None, timeout_s: float = 10
) -> Verdict:
    """Grade ``answer`` for ``problem`` without blocking the event loop.

    ``judge`` (free-form only): ``async judge(question, reference, answer) -> bool``, asked
    when no rule matched. ``timeout_s``: math-verify's budget, or the code tests' time limit.
    """
    empty = _no_answer(answer)
    if empty is not None:
        return empty
    assert answer is not None
    if problem.domain == Domain.CODE:
        return await agrade_code(problem, answer, timeout_s=timeout_s)
    verdict = await asyncio.to_thread(_grade_rules, problem, answer, timeout_s)
    if problem.domain == Domain.FREEFORM and judge is not None and not verdict.correct:
        return await _ask_judge(problem, answer, verdict, judge)
    return verdict


def grade(
    problem: Problem, answer: str | None, *, judge: Any = None, timeout_s: float = 10
) -> Verdict:
    """Grade ``answer`` for ``problem`` (blocking). See :func:`agrade` for the arguments.

    With a ``judge``, this runs its coroutine with ``asyncio.run``; inside a running event loop
    call :func:`agrade` instead.
    """
    empty = _no_answer(answer)
    if empty is not None:
        return empty
    assert answer is not None
    if problem.domain == Domain.CODE:
        return grade_code(problem, answer, timeout_s=timeout_s)
    verdict = _grade_rules(problem, answer, timeout_s)
    if problem.domain == Domain.FREEFORM and judge is not None and not verdict.correct:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(_ask_judge(problem, answer, verdict, judge))
        raise RuntimeError("grade() with a judge cannot run inside an event loop; use agrade()")
    return verdict


WRONG_REWARD = 0.5
"""The reward of a plan that parsed and ran but answered wrong."""
RIGHT_REWARD = 1.0
"""The reward of a right answer."""


FAILED_REWARD = 0.0
"""The reward of a plan that does not parse (in any round), or that failed by its own fault."""


def reward(
    *,
    plan_ok: bool,
    verdict: Verdict | None,
    infra_error: bool = False,
    plan_failure: bool = False,
) -> float | None:
    """The paper's reward: 0.0 for a plan that does not parse, 0.5 parsed but wrong, 1.0 right.

    A plan that parsed but failed by its own fault (``plan_failure``: it ran out of its budget,
    its deadline included, or made a worker request that was rejected, such as a prompt longer
    than the worker's context) scores 0.0 as well: the failure is the plan's, as a format error
    is. ``None`` for infrastructure failures only (``infra_error`` or ``verdict.infra_error``:
    rate limits, server and connection errors, a worker's timeout, a sandbox or judge that
    failed): such samples are left out of training rather than scored. A parsed plan that did
    not fail needs a verdict.
    """
    if infra_error or (verdict is not None and verdict.infra_error):
        return None
    if not plan_ok or plan_failure:
        return FAILED_REWARD
    if verdict is None:
        raise ValueError("reward(): a verdict is required when plan_ok is True")
    return RIGHT_REWARD if verdict.correct else WRONG_REWARD
