"""Measuring workflows in the workflow world: accuracy, calls, and what the plans are made of.

:func:`plan_shape` reads a plan against its question with the world's own rules
(:func:`~conductor_core.simulation.workflow_world.step_role`): how many steps check, whether each
check can see an answer to every part it checks, and whether a composite question is split
(every part named by some step). :func:`run_questions` solves questions with a plan source
through :func:`~conductor_core.solve.solve` (the one loop every caller uses) and grades them;
:func:`summarize` gives the figures of ``bench/bench_workflows.py``; :func:`plan_success`
simulates a plan many times with the world's rules, and :func:`oracle_choices` picks each
question's best plan among candidates with it (the upper bound of the baselines).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from random import Random

from conductor_core.policy.base import PlanSource
from conductor_core.simulation.workflow_baselines import Roles, topology_workflow
from conductor_core.simulation.workflow_world import (
    WorldQuestion,
    part_answers,
    respond,
    step_role,
    world_question,
)
from conductor_core.solve import SolveOptions, solve
from conductor_core.tasks.grading import grade, reward
from conductor_core.tasks.problem import Problem
from conductor_core.workers.config import PoolConfig, SimulationProfile, WorkflowRules
from conductor_core.workflow.model import ALL, Step, Workflow

__all__ = [
    "PlanShape",
    "QuestionResult",
    "oracle_choices",
    "plan_shape",
    "plan_success",
    "run_questions",
    "summarize",
]


@dataclass(frozen=True)
class PlanShape:
    """What a plan does with its question, read with the world's rules."""

    steps: int
    checks: int
    checks_seeing: int
    split: bool


def _scope(step_part: int | None, question: WorldQuestion) -> set[int]:
    return set(range(len(question.parts))) if step_part is None else {step_part}


def plan_shape(workflow: Workflow, question: WorldQuestion) -> PlanShape:
    """The shape of ``workflow`` on ``question``: steps, checking steps, those that can see an
    answer to every part they check (some visible step has that part in its scope), and whether
    every part of a composite question is the scope of some step."""
    roles = [step_role(s.subtask, question) for s in workflow.steps]
    scopes = [_scope(r.part, question) for r in roles]
    checks = seeing = 0
    for i, (step, role) in enumerate(zip(workflow.steps, roles, strict=True)):
        if not role.checks:
            continue
        checks += 1
        covered = set().union(*(scopes[j] for j in step.visible(i) if j < i))
        seeing += scopes[i] <= covered
    named = {r.part for r in roles if r.part is not None}
    split = question.composite and named >= set(range(len(question.parts)))
    return PlanShape(steps=len(workflow.steps), checks=checks, checks_seeing=seeing, split=split)


@dataclass(frozen=True)
class QuestionResult:
    """One question solved by one method."""

    id: str
    difficulty: int
    parts: int
    right: bool
    reward: float
    format_error: bool
    calls: int
    cost: float
    steps: int
    checks: int
    checks_seeing: int
    split: bool


async def _one(
    problem: Problem,
    plan_source: PlanSource,
    pool,
    options: SolveOptions,
    sample_index: int,
) -> QuestionResult:
    question = world_question(problem.metadata)
    if question is None:
        raise ValueError(f"{problem.id}: not a workflow-world question (no metadata.world)")
    trace = await solve(
        problem.question, plan_source, pool, options=options, sample_index=sample_index
    )
    verdict = grade(problem, trace.answer) if trace.answer is not None else None
    right = bool(verdict and verdict.correct)
    wf_trace = trace.rounds[0].workflow if trace.rounds else None
    shape = PlanShape(steps=0, checks=0, checks_seeing=0, split=False)
    if wf_trace is not None and not trace.format_error:
        shape = plan_shape(_written(wf_trace.plan), question)
    return QuestionResult(
        id=problem.id,
        difficulty=question.difficulty,
        parts=len(question.parts),
        right=right,
        # The simulated pool injects no infrastructure failure, so the reward is never None.
        reward=reward(plan_ok=not trace.format_error, verdict=verdict) or 0.0,
        format_error=trace.format_error,
        calls=trace.calls,
        cost=trace.cost,
        steps=shape.steps,
        checks=shape.checks,
        checks_seeing=shape.checks_seeing,
        split=shape.split,
    )


def _written(plan: dict) -> Workflow:
    """The workflow a trace's ``plan`` (:meth:`Workflow.to_dict`) records."""
    steps = [
        Step(worker=w, subtask=t, access=ALL if a == [ALL] else tuple(a))
        for w, t, a in zip(plan["model_id"], plan["subtasks"], plan["access_list"], strict=True)
    ]
    return Workflow(steps=tuple(steps))


async def run_questions(
    problems: Sequence[Problem],
    plan_source: PlanSource,
    pool,
    options: SolveOptions,
    *,
    sample_index: int = 0,
    concurrency: int = 32,
) -> list[QuestionResult]:
    """Solve and grade every problem with ``plan_source`` on ``pool`` (a
    :class:`~conductor_core.workers.pool.WorkerPool`), at most ``concurrency`` at once."""
    gate = asyncio.Semaphore(concurrency)

    async def bounded(p: Problem) -> QuestionResult:
        async with gate:
            return await _one(p, plan_source, pool, options, sample_index)

    return list(await asyncio.gather(*(bounded(p) for p in problems)))


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def summarize(results: Sequence[QuestionResult]) -> dict[str, float | None]:
    """Accuracy, calls and cost per question, mean plan steps on the easiest (difficulty 1) and
    hardest (3) questions, the share of checking steps that can see what they check, the share
    of composite questions split into their parts, and the format-error rate."""
    executed = [r for r in results if not r.format_error]
    checks = sum(r.checks for r in executed)
    composite = [r for r in executed if r.parts > 1]
    return {
        "accuracy": _mean([float(r.right) for r in results]),
        "calls_per_question": _mean([r.calls for r in results]),
        "cost_per_question": _mean([r.cost for r in results]),
        "steps_easy": _mean([r.steps for r in executed if r.difficulty == 1]),
        "steps_hard": _mean([r.steps for r in executed if r.difficulty == 3]),
        "check_with_access_share": sum(r.checks_seeing for r in executed) / checks
        if checks
        else None,
        "composite_split_share": _mean([float(r.split) for r in composite]),
        "format_errors": _mean([float(r.format_error) for r in results]),
    }


def plan_success(
    question: WorldQuestion,
    workflow: Workflow,
    profiles: Sequence[SimulationProfile],
    *,
    draws: int = 1000,
    seed: int = 0,
) -> float:
    """The share of ``draws`` runs of ``workflow`` on ``question`` that end right, simulated
    with the world's rules directly (no solve loop: fast enough to score many plans). A run
    ends right when its last step has the whole question in scope and answers every part right,
    which is when the stated answer matches the reference. ``profiles`` are the workers'
    simulation profiles by pool id (each with its ``workflow`` rules)."""
    rng = Random(seed)
    last = step_role(workflow.steps[-1].subtask, question) if workflow.steps else None
    if last is None or last.part is not None:
        return 0.0
    rules = [p.workflow or WorkflowRules() for p in profiles]
    right = 0
    for draw in range(draws):
        texts: list[str] = []
        for i, step in enumerate(workflow.steps):
            visible = [texts[j] for j in step.visible(i)]
            profile, own_key = profiles[step.worker], (seed, draw, step.worker)
            texts.append(
                respond(question, profile, rules[step.worker], step.subtask, visible, rng, own_key)
            )
        found = part_answers(texts[-1], question)
        right += all(found.get(k) == p.answer for k, p in enumerate(question.parts))
    return right / draws


def oracle_choices(
    problems: Sequence[Problem],
    candidates: Sequence[str],
    pool_config: PoolConfig,
    *,
    draws: int = 1000,
    roles: Roles | None = None,
) -> dict[str, str]:
    """For each problem, the candidate topology most likely to end right
    (:func:`plan_success`; a tie goes to the earlier candidate, so list cheaper ones first)."""
    profiles = [w.simulation or SimulationProfile() for w in pool_config.workers]
    out: dict[str, str] = {}
    for p in problems:
        question = world_question(p.metadata)
        if question is None:
            raise ValueError(f"{p.id}: not a workflow-world question (no metadata.world)")
        scores = [
            plan_success(
                question,
                topology_workflow(name, p.question, roles),
                profiles,
                draws=draws,
                seed=k,
            )
            for k, name in enumerate(candidates)
        ]
        out[p.id] = candidates[scores.index(max(scores))]
    return out
