"""The executor: runs one parsed plan on a worker pool. It never calls the Conductor.

Each step starts as soon as the steps it may read are done: with binary access a ``[]`` step starts
at once and an ``["all"]`` step after every earlier step; with index access after the listed steps.
Because a step only ever sees the steps its access grants, this gives the same results as running
the steps strictly in order, and it is much faster when steps are independent.

A step whose call finally fails is recorded in the trace (never raised), with whose fault it was
(``StepTrace.plan_fault``, decided by :func:`~conductor_core.workers.types.is_plan_fault`); steps
that would read it are skipped. Budgets (steps, tokens, cost, wall-clock deadline) end the workflow
early with a recorded reason: steps not yet started are skipped, steps in flight finish (a call
still running at the deadline fails as ``deadline_exceeded``).

A workflow left without an answer is either the plan's own failure (``plan_failure``: a budget it
ran out of, or a worker error it caused, such as a prompt longer than the worker's context) or
spoiled by infrastructure (``infra_error``: rate limits, server and connection errors, a worker's
timeout); :func:`failure_cause` decides which, from the step the answer was to come from.

``on_answer_delta`` streams the answer: the last step's worker is called with ``on_delta`` (see
:meth:`WorkerCaller.call`), so its reply reaches the caller piece by piece while it is written.

An answer format (``answer_format``, else the context variable :data:`ANSWER_FORMAT`, which the
gateway sets for a request with a JSON ``response_format``) is asked of the last step's worker
(``pool.call(..., output_format=...)``): its reply is the answer. Earlier steps write free text.
Every round's last step is asked, since a later round may keep an earlier round's answer.

Where a tracer is bound (:mod:`conductor_core.telemetry`), each executed step is a
``conductor.step`` span around its worker call (skipped steps have none).
"""

from __future__ import annotations

import asyncio
import contextvars
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from conductor_core import telemetry
from conductor_core.sample_streams import REPEAT_STRIDE as REPEAT_STRIDE
from conductor_core.sample_streams import repeat_index
from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.types import (
    CallResult,
    DeltaHandler,
    ErrorKind,
    Messages,
    OutputFormat,
)
from conductor_core.workflow.model import ALL, Workflow
from conductor_core.workflow.prompts import prompt_digest, worker_message
from conductor_core.workflow.trace import StepTrace, WorkflowTrace

ANSWER_FORMAT: contextvars.ContextVar[OutputFormat | None] = contextvars.ContextVar(
    "conductor_answer_format", default=None
)
"""The form of the answer (the last step's reply) when :func:`execute` is not given one: set by
the gateway in the context of a request's workflow (``solve`` passes no format of its own)."""

EventHandler = Callable[[dict[str, Any]], None]
"""Receives executor events: ``step_start``, ``step_end``, ``step_skipped``, ``workflow_end``."""


class WorkerCaller(Protocol):
    """What the executor needs of a pool (``WorkerPool`` satisfies it)."""

    def __len__(self) -> int: ...

    def worker(self, worker_id: int) -> WorkerConfig:
        """A worker's configuration (its model name goes into traces)."""
        ...

    async def call(
        self,
        worker_id: int,
        messages: Messages,
        *,
        sample_index: int = 0,
        deadline: float | None = None,
        priority: float = 0.0,
        on_delta: DeltaHandler | None = None,
        output_format: OutputFormat | None = None,
    ) -> CallResult:
        """Call a worker; failures are returned as a CallResult with ``error`` set. Waiting calls
        are served highest ``priority`` first. ``on_delta`` (passed only for the last step of a
        workflow whose answer is streamed) gets the reply's text in pieces as it arrives; an
        attempt that fails after a piece is not retried (``WorkerPool.call``).
        ``output_format`` (passed only for the last step, when the answer has a format) is the
        form the reply must take."""
        ...


@dataclass(frozen=True)
class Budget:
    """Per-workflow limits; ``None`` means unlimited.

    ``max_tokens`` counts input plus output tokens of every worker call; ``deadline_s`` is wall
    time from the start of the workflow (calls still running then fail as ``deadline_exceeded``).
    """

    max_steps: int | None = None
    max_tokens: int | None = None
    max_cost: float | None = None
    deadline_s: float | None = None

    def minus(self, tokens: int, cost: float, wall_s: float) -> Budget:
        """The budget left after spending ``tokens``, ``cost`` and ``wall_s`` (for later rounds)."""
        return Budget(
            max_steps=self.max_steps,
            max_tokens=None if self.max_tokens is None else max(0, self.max_tokens - tokens),
            max_cost=None if self.max_cost is None else max(0.0, self.max_cost - cost),
            deadline_s=None if self.deadline_s is None else max(0.0, self.deadline_s - wall_s),
        )


UNLIMITED = Budget()


async def execute(
    workflow: Workflow,
    question: str,
    pool: WorkerCaller,
    *,
    budget: Budget = UNLIMITED,
    previous_answer: str | None = None,
    sample_index: int = 0,
    answer_fallback: bool = False,
    on_event: EventHandler | None = None,
    on_answer_delta: DeltaHandler | None = None,
    answer_format: OutputFormat | None = None,
) -> WorkflowTrace:
    """Run ``workflow`` for ``question`` on ``pool`` and return its trace.

    ``previous_answer`` is the final answer of the previous recursion round: steps with ``"all"``
    access see it. ``answer_fallback`` takes the last non-empty step output as the answer when the
    last step produced none (useful in evaluation). ``on_answer_delta`` gets the last step's reply
    in pieces as its worker writes it (``pool.call(..., on_delta=...)``). ``answer_format``
    (default: :data:`ANSWER_FORMAT`) is asked of the last step's worker. Never raises for worker
    failures.
    """
    run = _Run(
        workflow, question, pool, budget, previous_answer, sample_index, on_event, on_answer_delta
    )
    run.answer_format = answer_format if answer_format is not None else ANSWER_FORMAT.get()
    return await run.go(answer_fallback)


def step_sample_indices(workflow: Workflow, sample_index: int) -> list[int]:
    """Each step's sample index. Steps that make the same request (same worker, subtask and
    visible steps, so the same prompt) are new samples of it, as a sampled API gives: the ``n``-th
    repeat draws :func:`~conductor_core.sample_streams.repeat_index` of ``sample_index`` and ``n``
    (``REPEAT_STRIDE`` apart, re-exported here). A request made once keeps ``sample_index``, so
    plans without repeats run as they always did (seeds, traces and cached replies)."""
    seen: dict[tuple[int, str, tuple[int, ...]], int] = {}
    out: list[int] = []
    for i, step in enumerate(workflow.steps):
        key = (step.worker, step.subtask, step.visible(i))
        repeat = seen.get(key, 0)
        seen[key] = repeat + 1
        out.append(repeat_index(sample_index, repeat))
    return out


def _chain_lengths(workflow: Workflow) -> list[int]:
    """For each step, the length of the longest chain of steps that starts at it and follows
    readers (1 for a step nothing reads). Used as the step's call priority: critical path first."""
    deps = workflow.dependencies()
    length = [1] * len(deps)
    for i in range(len(deps) - 1, -1, -1):
        for j in deps[i]:
            length[j] = max(length[j], 1 + length[i])
    return length


class _Run:
    """State of one execution: per-step completion events, results and budget accounting."""

    def __init__(
        self,
        workflow: Workflow,
        question: str,
        pool: WorkerCaller,
        budget: Budget,
        previous_answer: str | None,
        sample_index: int,
        on_event: EventHandler | None,
        on_answer_delta: DeltaHandler | None = None,
    ) -> None:
        self.wf = workflow
        self.question = question
        self.pool = pool
        self.budget = budget
        self.previous_answer = previous_answer
        self.sample_indices = step_sample_indices(workflow, sample_index)
        self.on_event = on_event
        self.on_answer_delta = on_answer_delta
        self.answer_format: OutputFormat | None = None
        n = len(workflow.steps)
        self.priority = _chain_lengths(workflow)
        self.done = [asyncio.Event() for _ in range(n)]
        self.traces: list[StepTrace | None] = [None] * n
        self.tokens = 0
        self.cost = 0.0
        self.stopped: str | None = None
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.deadline = None if budget.deadline_s is None else self.t0 + budget.deadline_s

    def _emit(self, event: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def _now(self) -> float:
        return self.loop.time() - self.t0

    async def go(self, answer_fallback: bool) -> WorkflowTrace:
        wall0 = time.perf_counter()
        if self.wf.steps:
            await asyncio.gather(*(self._step(i) for i in range(len(self.wf.steps))))
        steps = [t for t in self.traces if t is not None]
        trace = self._finish(steps, answer_fallback)
        trace.wall_s = time.perf_counter() - wall0
        self._emit({"type": "workflow_end", "answer": trace.answer, "stopped": trace.stopped})
        return trace

    def _budget_exceeded(self) -> str | None:
        b = self.budget
        if b.max_tokens is not None and self.tokens >= b.max_tokens:
            return "max_tokens"
        if b.max_cost is not None and self.cost >= b.max_cost:
            return "max_cost"
        if self.deadline is not None and self.loop.time() >= self.deadline:
            return "deadline"
        return None

    async def _step(self, i: int) -> None:
        step = self.wf.steps[i]
        visible = step.visible(i)
        try:
            for j in visible:
                await self.done[j].wait()
            base = StepTrace(
                index=i,
                worker=step.worker,
                model=self.pool.worker(step.worker).model,
                subtask=step.subtask,
                access=step.access_literal(),
                visible=list(visible),
            )
            skip = self._skip_reason(i, visible)
            if skip is not None:
                base.skipped = skip
                self.traces[i] = base
                self._emit({"type": "step_skipped", "index": i, "reason": skip})
                return
            sees_previous = self.previous_answer is not None and step.access == ALL
            shown = [(j, self.wf.steps[j].subtask, self.traces[j].response or "") for j in visible]
            prompt = worker_message(
                self.question,
                shown,
                step.subtask,
                previous_answer=self.previous_answer if sees_previous else None,
            )
            base.prompt_digest = prompt_digest(prompt)
            base.started_s = self._now()
            self._emit(
                {
                    "type": "step_start",
                    "index": i,
                    "worker": step.worker,
                    "model": base.model,
                    "subtask": step.subtask,
                    "visible": list(visible),
                }
            )
            # the last step's reply is the answer: streamed when the caller asks for it, in the
            # answer's format when it has one
            last = i == len(self.wf.steps) - 1
            extra: dict[str, Any] = {}
            if last and self.on_answer_delta is not None:
                extra["on_delta"] = self.on_answer_delta
            if last and self.answer_format is not None:
                extra["output_format"] = self.answer_format
            attributes = {"conductor.step.index": i, "conductor.worker.id": step.worker}
            with telemetry.span("conductor.step", attributes) as span:
                result = await self.pool.call(
                    step.worker,
                    [{"role": "user", "content": prompt}],
                    sample_index=self.sample_indices[i],
                    deadline=self.deadline,
                    priority=self.priority[i],
                    **extra,
                )
                if result.error_kind is not None:
                    telemetry.failed(span, result.error_kind)
            base.finished_s = self._now()
            self._record(base, result)
            self.traces[i] = base
            self._emit({"type": "step_end", "index": i, "step": base.model_dump()})
        finally:
            self.done[i].set()

    def _skip_reason(self, i: int, visible: tuple[int, ...]) -> str | None:
        if self.budget.max_steps is not None and i >= self.budget.max_steps:
            self.stopped = self.stopped or "max_steps"
            return "budget:max_steps"
        exceeded = self._budget_exceeded()
        if exceeded is not None:
            self.stopped = self.stopped or exceeded
            return f"budget:{exceeded}"
        for j in visible:
            dep = self.traces[j]
            if dep is None or dep.error is not None or dep.skipped is not None:
                return f"dependency:{j}"
        return None

    def _record(self, st: StepTrace, result: CallResult) -> None:
        st.response = result.text
        st.input_tokens = result.usage.input_tokens
        st.output_tokens = result.usage.output_tokens
        st.cost = result.cost
        st.latency_s = result.latency_s
        st.retries = result.retries
        st.cached = result.cached
        st.error = result.error
        st.error_kind = result.error_kind
        st.plan_fault = result.plan_fault
        self.tokens += st.input_tokens + st.output_tokens
        self.cost += st.cost
        if result.error_kind == ErrorKind.DEADLINE:
            self.stopped = self.stopped or "deadline"

    def _finish(self, steps: list[StepTrace], answer_fallback: bool) -> WorkflowTrace:
        trace = WorkflowTrace(plan=self.wf.to_dict(), steps=steps, stopped=self.stopped)
        trace.calls = sum(1 for s in steps if s.skipped is None)
        trace.input_tokens = sum(s.input_tokens for s in steps)
        trace.output_tokens = sum(s.output_tokens for s in steps)
        trace.cost = sum(s.cost for s in steps)
        if not steps:
            return trace
        last = steps[-1]
        if last.response is not None and (last.response.strip() or not answer_fallback):
            trace.answer, trace.answer_step = last.response, last.index
        elif answer_fallback:
            for s in reversed(steps):
                if s.response and s.response.strip():
                    trace.answer, trace.answer_step = s.response, s.index
                    break
        if trace.answer is None:
            trace.plan_failure, trace.infra_error = failure_cause(steps, last.index)
        return trace


def failure_cause(steps: list[StepTrace], index: int) -> tuple[str | None, bool]:
    """Why step ``index`` of ``steps`` (an execution's step traces) gave no reply: ``(plan
    failure, infrastructure failure)``, at most one of them set.

    A step skipped for a budget is the plan's failure (``budget:<name>``); one whose call failed
    is the plan's (its error kind) when :func:`~conductor_core.workers.types.is_plan_fault` says
    so, else the infrastructure's; one skipped because steps it reads gave nothing has their
    cause. Of several such steps, a plan failure decides: it alone already left the step without
    its input, whatever the infrastructure did. ``(None, False)`` for a step that replied.
    """
    by_index = {s.index: s for s in steps}

    def cause(step: StepTrace) -> tuple[str | None, bool]:
        if step.error is not None:
            return (step.error_kind or "error", False) if step.plan_fault else (None, True)
        if step.skipped is None:
            return None, False
        if step.skipped.startswith("budget:"):
            return step.skipped, False
        # skipped for a dependency: the causes of the steps it reads that gave nothing
        causes = [cause(by_index[j]) for j in step.visible if j in by_index]
        plan = next((p for p, _ in causes if p is not None), None)
        return (plan, False) if plan is not None else (None, any(i for _, i in causes))

    return cause(by_index[index])
