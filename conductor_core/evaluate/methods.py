"""Methods that the runner evaluates: the Conductor and the paper's baselines.

A method turns one problem into an :class:`Attempt`. Most baselines are plan sources (a fixed or
random workflow) run through the same solve loop and executor as the Conductor, so they share
budgets, traces and cost accounting; self-consistency, which votes over independent samples, is a
small strategy object of its own.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from conductor_core.policy.base import PlanRequest, PlanResult, PlanSource
from conductor_core.solve import SolveOptions, solve
from conductor_core.tasks.problem import Problem
from conductor_core.workflow.executor import WorkerCaller, execute
from conductor_core.workflow.model import ALL, AccessMode, Step, Workflow
from conductor_core.workflow.trace import SolveTrace

SOLVE = "Solve the question. Give your final answer in the format the question asks for."


@dataclass
class Attempt:
    """One method's outcome on one problem (before grading)."""

    answer: str | None
    format_error: bool = False
    format_error_code: str | None = None
    infra_error: bool = False
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    plan_len: int | None = None
    workers: list[int] = field(default_factory=list)
    all_access_steps: int = 0
    rounds: int = 0
    raw_plan: str | None = None
    trace: dict[str, Any] | None = None

    @classmethod
    def from_solve(cls, trace: SolveTrace, keep_trace: bool = True) -> Attempt:
        """Summarise a solve-loop trace."""
        first = trace.rounds[0] if trace.rounds else None
        executed = [r.workflow for r in trace.rounds if r.workflow is not None]
        steps = [s for wf in executed for s in wf.steps if s.skipped is None]
        plan = first.workflow.plan if first and first.workflow else None
        return cls(
            answer=trace.answer,
            format_error=trace.format_error,
            format_error_code=(first.plan_error or {}).get("code") if first else None,
            infra_error=trace.infra_error,
            calls=trace.calls,
            input_tokens=trace.input_tokens,
            output_tokens=trace.output_tokens,
            cost=trace.cost,
            plan_len=len(plan["model_id"]) if plan else None,
            workers=[s.worker for s in steps],
            all_access_steps=sum(1 for s in steps if s.access == [ALL]),
            rounds=len(trace.rounds),
            raw_plan=first.raw_plan if first else None,
            trace=trace.model_dump(mode="json") if keep_trace else None,
        )


class Method(Protocol):
    """Something the runner can evaluate."""

    name: str

    async def attempt(self, problem: Problem, pool: WorkerCaller, sample_index: int) -> Attempt:
        """Answer ``problem`` once."""
        ...

    async def aclose(self) -> None:
        """Release resources."""
        ...


class PlanSourceMethod:
    """Any plan source (the Conductor or a plan-shaped baseline) run through the solve loop."""

    def __init__(
        self,
        name: str,
        source: PlanSource,
        options: SolveOptions | None = None,
        keep_trace: bool = True,
    ) -> None:
        self.name = name
        self.source = source
        self.options = options or SolveOptions(answer_fallback=True)
        self.keep_trace = keep_trace

    async def prefetch(self, items: Sequence[tuple[Problem, int]], pool_size: int) -> int:
        """Plan the first round of many (problem, sample index) pairs in one batch when the plan
        source supports it (vLLM offline batch, local transformers); returns how many."""
        from conductor_core.policy.batched import PrePlanned, supports_batching
        from conductor_core.solve import plan_request

        if not supports_batching(self.source):
            return 0
        if not isinstance(self.source, PrePlanned):
            self.source = PrePlanned(self.source)
        requests = [plan_request(p.question, pool_size, self.options, k) for p, k in items]
        return await self.source.prefetch(requests)

    async def attempt(self, problem: Problem, pool: WorkerCaller, sample_index: int) -> Attempt:
        trace = await solve(
            problem.question, self.source, pool, options=self.options, sample_index=sample_index
        )
        return Attempt.from_solve(trace, self.keep_trace)

    async def aclose(self) -> None:
        await self.source.aclose()


class FixedPlanSource:
    """A plan source that writes the same workflow for every question (labelled in its text)."""

    def __init__(self, label: str, build: Callable[[PlanRequest], Workflow]) -> None:
        self.label = label
        self.build = build

    async def plan(self, request: PlanRequest) -> PlanResult:
        if request.previous is not None:  # baselines never refine: keep the answer
            return PlanResult(
                raw=f"# {self.label}: keep\n" + Workflow().render(), workflow=Workflow()
            )
        wf = self.build(request)
        return PlanResult(raw=f"# {self.label}\n{wf.render()}", workflow=wf)

    async def aclose(self) -> None:
        return None


def single_worker(worker: int) -> FixedPlanSource:
    """Baseline: one worker answers alone."""
    return FixedPlanSource(
        f"single worker {worker}",
        lambda _r: Workflow(steps=(Step(worker=worker, subtask=SOLVE),)),
    )


def mixture_of_agents(
    proposers: Sequence[int], aggregator: int, layers: int = 1
) -> FixedPlanSource:
    """Baseline: every proposer answers independently (per layer, seeing the previous layer),
    then the aggregator synthesises the last layer's answers
    (``len(proposers) * layers + 1`` calls).
    """
    if layers < 1 or not proposers:
        raise ValueError("mixture_of_agents needs at least one proposer and one layer")

    def build(_r: PlanRequest) -> Workflow:
        steps: list[Step] = []
        prev: tuple[int, ...] = ()
        for layer in range(layers):
            subtask = (
                SOLVE
                if layer == 0
                else (
                    "Several agents answered the question. Using their answers as "
                    "references, write your own best answer."
                )
            )
            start = len(steps)
            steps += [Step(worker=w, subtask=subtask, access=prev) for w in proposers]
            prev = tuple(range(start, len(steps)))
        steps.append(
            Step(
                worker=aggregator,
                subtask="Synthesise the agents' answers into one correct final answer; check them "
                "critically and keep the question's required format.",
                access=prev,
            )
        )
        return Workflow(steps=tuple(steps), access_mode=AccessMode.INDEX)

    return FixedPlanSource(f"mixture-of-agents x{layers}", build)


def self_reflection(worker: int, rounds: int) -> FixedPlanSource:
    """Baseline: one worker answers, then critiques and revises its answer ``rounds`` times."""

    def build(_r: PlanRequest) -> Workflow:
        steps = [Step(worker=worker, subtask=SOLVE)]
        steps += [
            Step(
                worker=worker,
                access=ALL,
                subtask=(
                    "Review the previous answer critically, find any mistake, and give a corrected "
                    "final answer in the required format."
                ),
            )
            for _ in range(rounds)
        ]
        return Workflow(steps=tuple(steps))

    return FixedPlanSource(f"self-reflection x{rounds}", build)


class RandomPlanSource:
    """Sanity floor: random workers and binary access, plan length drawn from a distribution
    (e.g. the Conductor's measured plan lengths). Deterministic per (question, sample)."""

    def __init__(self, length_weights: dict[int, float] | None = None, seed: int = 0) -> None:
        self.lengths = length_weights or {1: 0.2, 2: 0.3, 3: 0.3, 4: 0.2}
        self.seed = seed

    async def plan(self, request: PlanRequest) -> PlanResult:
        if request.previous is not None:
            return PlanResult(raw=Workflow().render(), workflow=Workflow())
        rng = random.Random(f"{self.seed}|{request.question}|{request.sample_index}")
        n = rng.choices(list(self.lengths), weights=list(self.lengths.values()))[0]
        n = max(1, min(n, request.max_steps))
        ids = [w.id for w in request.workers]
        steps = tuple(
            Step(
                worker=rng.choice(ids),
                subtask=SOLVE if i == 0 else "Improve the answer.",
                access=ALL if i and rng.random() < 0.5 else (),
            )
            for i in range(n)
        )
        wf = Workflow(steps=steps)
        return PlanResult(raw="# random plan (sanity floor)\n" + wf.render(), workflow=wf)

    async def aclose(self) -> None:
        return None


class SelfConsistencyMethod:
    """Baseline: ``n`` independent samples of one worker, majority vote over extracted answers."""

    def __init__(self, worker: int, n: int = 5, name: str | None = None) -> None:
        self.worker = worker
        self.n = n
        self.name = name or f"self-consistency w{worker} x{n}"

    async def attempt(self, problem: Problem, pool: WorkerCaller, sample_index: int) -> Attempt:
        from conductor_core.evaluate.voting import vote_key

        wf = Workflow(steps=(Step(worker=self.worker, subtask=SOLVE),))
        traces = await asyncio.gather(
            *(
                execute(wf, problem.question, pool, sample_index=sample_index * self.n + k)
                for k in range(self.n)
            )
        )
        answers = [t.answer for t in traces if t.answer is not None]
        attempt = Attempt(
            answer=None,
            infra_error=not answers,
            calls=sum(t.calls for t in traces),
            input_tokens=sum(t.input_tokens for t in traces),
            output_tokens=sum(t.output_tokens for t in traces),
            cost=sum(t.cost for t in traces),
            plan_len=self.n,
            workers=[self.worker] * sum(t.calls for t in traces),
        )
        if answers:
            keys = [vote_key(problem, a) for a in answers]
            winner, _ = (
                Counter(k for k in keys if k is not None).most_common(1)[0]
                if any(k is not None for k in keys)
                else (None, 0)
            )
            attempt.answer = next(
                (a for a, k in zip(answers, keys, strict=True) if k == winner), answers[0]
            )
        return attempt

    async def aclose(self) -> None:
        return None
