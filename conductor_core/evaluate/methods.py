"""Methods that the runner evaluates: the Conductor and the paper's baselines.

A method turns one problem into an :class:`Attempt`. Every method runs its plans through the solve
loop, the one place a plan is executed: most baselines are plan sources (a fixed or random
workflow) run like the Conductor, so they share budgets, traces and cost accounting;
self-consistency solves the question several times with one worker and votes.

Single workers and self-consistency ask the worker the bare question (``bare_question``), as a
model is asked when it works alone: :class:`BareQuestionCaller` replaces the multi-agent worker
message of their one-step plans with the question text. A Conductor's workflow steps (and every
multi-step baseline) still receive the full worker message.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, NamedTuple, Protocol

from conductor_core.evaluate.voting import vote_key
from conductor_core.policy.base import PlanRequest, PlanResult, PlanSource
from conductor_core.policy.batched import PrePlanned, supports_batching
from conductor_core.policy.fixed import FixedPlanSource, one_step
from conductor_core.sample_streams import draw_index
from conductor_core.solve import SolveOptions, plan_request, solve
from conductor_core.tasks.problem import Problem
from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.types import CallResult, Messages
from conductor_core.workflow.executor import WorkerCaller
from conductor_core.workflow.model import ALL, AccessMode, Step, Workflow
from conductor_core.workflow.prompts import worker_message
from conductor_core.workflow.trace import SolveTrace, TraceSummary

SOLVE = "Solve the question. Give your final answer in the format the question asks for."


class Attempt(NamedTuple):
    """One method's outcome on one problem, before grading: the summary, and the trace (a
    :class:`SolveTrace` as JSON) when the method keeps one."""

    summary: TraceSummary
    trace: dict[str, Any] | None = None

    @classmethod
    def from_solve(cls, trace: SolveTrace, keep_trace: bool = True) -> Attempt:
        """Summarise a solve-loop trace."""
        return cls(
            TraceSummary.from_trace(trace), trace.model_dump(mode="json") if keep_trace else None
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


class BareQuestionCaller:
    """A pool view for one question that asks a worker the bare question text.

    The executor builds the multi-agent worker message (preamble, ``<question>`` block, subtask);
    a single model working alone is asked the question itself. Only a message for a step that
    reads nothing (no earlier steps, no previous answer) is replaced, so a step with context is
    never stripped of it; the baselines that use this run one-step plans (single worker,
    self-consistency samples). The trace's ``prompt_digest`` still names the message the executor
    built.
    """

    def __init__(self, pool: WorkerCaller, question: str) -> None:
        self.pool = pool
        self.question = question

    def _reads_nothing(self, messages: Messages) -> bool:
        if len(messages) != 1:
            return False
        text = str(messages[0].get("content") or "")
        mark = "Your assigned subtask:\n"
        cut = text.rfind(mark)
        return cut >= 0 and text == worker_message(self.question, [], text[cut + len(mark) :])

    def __len__(self) -> int:
        return len(self.pool)

    def worker(self, worker_id: int) -> WorkerConfig:
        return self.pool.worker(worker_id)

    async def call(
        self,
        worker_id: int,
        messages: Messages,
        *,
        sample_index: int = 0,
        deadline: float | None = None,
        priority: float = 0.0,
    ) -> CallResult:
        if self._reads_nothing(messages):
            messages = [{"role": "user", "content": self.question}]
        return await self.pool.call(
            worker_id,
            messages,
            sample_index=sample_index,
            deadline=deadline,
            priority=priority,
        )


OfferedFor = Callable[[Problem, int], Sequence[int]]
"""``offered_for(problem, sample_index)``: the pool ids offered for one attempt."""


class PlanSourceMethod:
    """Any plan source (the Conductor or a plan-shaped baseline) run through the solve loop.

    ``offered_for`` offers each attempt its own subset of workers (an adaptive-pool evaluation);
    by default every attempt gets ``options.worker_ids``. ``bare_question`` sends workers the
    bare question instead of the worker message (only for one-step plans: see
    :class:`BareQuestionCaller`).
    """

    def __init__(
        self,
        name: str,
        source: PlanSource,
        options: SolveOptions | None = None,
        keep_trace: bool = True,
        offered_for: OfferedFor | None = None,
        bare_question: bool = False,
    ) -> None:
        self.name = name
        self.source = source
        self.options = options or SolveOptions(answer_fallback=True)
        self.keep_trace = keep_trace
        self.offered_for = offered_for
        self.bare_question = bare_question

    def options_for(self, problem: Problem, sample_index: int) -> SolveOptions:
        """The solve options of one attempt."""
        if self.offered_for is None:
            return self.options
        return replace(self.options, worker_ids=tuple(self.offered_for(problem, sample_index)))

    async def prefetch(self, items: Sequence[tuple[Problem, int]], pool_size: int) -> int:
        """Plan the first round of many (problem, sample index) pairs in one batch when the plan
        source supports it (vLLM offline batch, local transformers); returns how many."""
        if not supports_batching(self.source):
            return 0
        if not isinstance(self.source, PrePlanned):
            self.source = PrePlanned(self.source)
        requests = [
            plan_request(p.question, pool_size, self.options_for(p, k), k) for p, k in items
        ]
        return await self.source.prefetch(requests)

    async def attempt(self, problem: Problem, pool: WorkerCaller, sample_index: int) -> Attempt:
        options = self.options_for(problem, sample_index)
        caller = BareQuestionCaller(pool, problem.question) if self.bare_question else pool
        trace = await solve(
            problem.question, self.source, caller, options=options, sample_index=sample_index
        )
        return Attempt.from_solve(trace, self.keep_trace)

    async def aclose(self) -> None:
        await self.source.aclose()


def single_worker(worker: int) -> FixedPlanSource:
    """Baseline: one worker answers alone."""
    return one_step(worker, SOLVE)


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


def failure_of_samples(summaries: Sequence[TraceSummary]) -> tuple[str | None, bool]:
    """Why independent samples of one question left no answer to choose from (self-consistency's
    votes, Smoothie's candidates): ``(plan failure, infrastructure failure)``, at most one set,
    as :func:`~conductor_core.workflow.executor.failure_cause` gives them for one step.

    Each sample's cause was decided when it ran (its ``plan_failure``: a worker request it made
    was rejected, a context overflow, its budget; decided by
    :func:`~conductor_core.workers.types.is_plan_fault`). A plan failure decides, as in
    ``failure_cause``: the samples that infrastructure spoiled are left out (as
    :func:`conductor_core.outcome.combine` leaves them out) and the others failed by the
    request's own fault, so the attempt is a failure (scored), not an infrastructure one
    (excluded). Infrastructure otherwise, also when no sample recorded a cause."""
    plan = next((s.plan_failure for s in summaries if s.plan_failure is not None), None)
    return plan, plan is None


class SelfConsistencyMethod:
    """Baseline: ``n`` independent samples of one worker, majority vote over extracted answers.
    Each sample is asked the bare question unless ``bare_question`` is False."""

    def __init__(
        self, worker: int, n: int = 5, name: str | None = None, bare_question: bool = True
    ) -> None:
        self.worker = worker
        self.n = n
        self.name = name or f"self-consistency w{worker} x{n}"
        self.source = single_worker(worker)
        self.bare_question = bare_question

    async def attempt(self, problem: Problem, pool: WorkerCaller, sample_index: int) -> Attempt:
        caller = BareQuestionCaller(pool, problem.question) if self.bare_question else pool
        traces = await asyncio.gather(
            *(
                solve(
                    problem.question,
                    self.source,
                    caller,
                    sample_index=draw_index(sample_index, self.n, k),
                )
                for k in range(self.n)
            )
        )
        summaries = [TraceSummary.from_trace(t) for t in traces]
        answers = [t.answer for t in summaries if not t.infra_error and t.answer is not None]
        plan_failure, infra_error = (None, False) if answers else failure_of_samples(summaries)
        summary = TraceSummary(
            infra_error=infra_error,
            plan_failure=plan_failure,
            calls=sum(t.calls for t in summaries),
            input_tokens=sum(t.input_tokens for t in summaries),
            output_tokens=sum(t.output_tokens for t in summaries),
            cost=sum(t.cost for t in summaries),
            plan_len=self.n,
            workers=[w for t in summaries for w in t.workers],
            rounds=1,
        )
        if answers:
            keys = [vote_key(problem, a) for a in answers]
            counted = Counter(k for k in keys if k is not None)
            winner = counted.most_common(1)[0][0] if counted else None
            summary.answer = next(
                (a for a, k in zip(answers, keys, strict=True) if k == winner), answers[0]
            )
        return Attempt(summary)

    async def aclose(self) -> None:
        return None
