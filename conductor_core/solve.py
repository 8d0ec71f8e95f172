"""The round loop: ask a plan source for a plan, run it, and optionally refine it recursively.

This is the one loop that the CLI, training, evaluation and the gateway all call. It sits
above the plan source (:mod:`conductor_core.policy`) and the executor
(:mod:`conductor_core.workflow.executor`), neither of which imports the other.

Round 1 asks for a plan; a plan that does not parse ends the question as a format error. Each
further round shows the Conductor its previous plan and that plan's final answer; it writes a new
plan or three empty lists (keep the answer). A later round whose plan does not parse, fails by its
own fault (``plan_failure``: a budget it ran out of, a worker request it made that was rejected),
or whose execution is spoiled by infrastructure, keeps the previous answer: a serving decision, the
best answer there is. The trace still records the first round run's failure (``format_error``,
``plan_failure``, ``infra_error``), which is what the training reward scores. Budgets are shared by
all rounds.

``solve(..., on_answer_delta=...)`` streams the answer as it is written: the last step of the
last round that can run (``max_rounds``) is called with streaming. Earlier rounds are not streamed,
since a later round may replace their answer; when a later round keeps it, the answer comes only
in the trace.

``solve(..., previous=...)`` continues from a round already run elsewhere (the recursive training
stage scores a second-round plan this way): the first round it runs is then that round's successor,
and its format error, plan failure or infrastructure failure is the trace's.

Each round's worker calls are new samples (:func:`conductor_core.sample_streams.round_index`): a
later round that asks a worker the same subtask again gets a fresh reply, as a real model sampled
anew gives, not round 1's reply back from a seeded worker (simulated, local transformers) or the
response cache.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from conductor_core import sample_streams, telemetry
from conductor_core._deprecated import moved_name
from conductor_core.policy.base import (
    PlanRequest,
    PlanResult,
    PlanSource,
    PreviousRound,
    WorkerInfo,
)
from conductor_core.workers.types import DeltaHandler
from conductor_core.workflow.errors import PlanFormatError
from conductor_core.workflow.executor import UNLIMITED, Budget, EventHandler, WorkerCaller, execute
from conductor_core.workflow.model import AccessMode
from conductor_core.workflow.parser import check_offered
from conductor_core.workflow.prompts import PromptStyle
from conductor_core.workflow.trace import RoundTrace, SolveTrace


def __getattr__(name: str) -> Any:
    """The names that moved to :mod:`conductor_core.sample_streams` (issue 47), for one release,
    with a ``DeprecationWarning`` (:data:`conductor_core._deprecated.MOVED_NAMES`)."""
    return moved_name(__name__, name)


@dataclass(frozen=True)
class SolveOptions:
    """How a question is solved.

    ``worker_ids`` offers a subset of the pool (adaptive pools), in the order the Conductor's
    prompt lists them. The Conductor sees every offered worker under its pool id ("Model 1",
    "Model 3"), its plan may use exactly those ids, and it runs as written: nothing is
    renumbered, so an id means the same worker in every question.

    ``descriptions`` holds one description per POOL worker, indexed by pool id
    (``descriptions[i]`` describes pool worker ``i``; :func:`solve_options` fills it from the pool
    config); with ``descriptors`` the offered workers' descriptions are shown in the prompt (a
    worker past its end has none). ``prompt_style`` is how the Conductor is asked (a plan source
    backed by a trained model asks in the style saved with it, whatever this says).
    """

    max_rounds: int = 1
    max_steps: int = 5
    access_mode: AccessMode = AccessMode.BINARY
    budget: Budget = UNLIMITED
    worker_ids: tuple[int, ...] | None = None
    descriptors: bool = False
    descriptions: tuple[str, ...] = field(default_factory=tuple)
    """Indexed by pool id, not by offered position (see above)."""
    answer_fallback: bool = False
    prompt_style: PromptStyle = PromptStyle.FULL

    def offered(self, pool_size: int) -> tuple[int, ...]:
        """Pool ids offered to the Conductor, in the order it sees them."""
        return self.worker_ids if self.worker_ids is not None else tuple(range(pool_size))


def plan_request(
    question: str,
    pool_size: int,
    options: SolveOptions,
    sample_index: int = 0,
    previous: PreviousRound | None = None,
) -> PlanRequest:
    """The request the solve loop sends to the plan source (also used to pre-plan in batches):
    the offered workers under their pool ids, each with its pool description."""
    described = options.descriptions
    infos = tuple(
        WorkerInfo(id=i, description=described[i] if i < len(described) else "")
        for i in options.offered(pool_size)
    )
    return PlanRequest(
        question=question,
        workers=infos,
        max_steps=options.max_steps,
        access_mode=options.access_mode,
        descriptors=options.descriptors,
        previous=previous,
        sample_index=sample_index,
        prompt_style=options.prompt_style,
    )


async def solve(
    question: str,
    plan_source: PlanSource,
    pool: WorkerCaller,
    *,
    options: SolveOptions | None = None,
    sample_index: int = 0,
    on_event: EventHandler | None = None,
    previous: PreviousRound | None = None,
    on_answer_delta: DeltaHandler | None = None,
) -> SolveTrace:
    """Solve ``question``: plan, execute and (optionally) refine. Returns the full trace.

    With ``previous`` the loop continues from that round (as round 1 of ``options.max_rounds``
    rounds in all) instead of starting afresh. ``on_answer_delta`` gets the answer in pieces as
    the last step of the last possible round writes it (see the module doc); the pieces join to
    that step's reply.

    Where a tracer is bound (:mod:`conductor_core.telemetry`: the gateway's requests), the loop
    is a ``conductor.workflow`` span and each call of the plan source a ``conductor.plan`` span.
    """
    with telemetry.span("conductor.workflow") as span:
        trace = await _solve(
            question,
            plan_source,
            pool,
            options or SolveOptions(),
            sample_index,
            on_event,
            previous,
            on_answer_delta,
        )
        if span.is_recording():
            span.set_attributes(
                {
                    "conductor.rounds": len(trace.rounds),
                    "conductor.calls": trace.calls,
                    "conductor.answered": trace.answer is not None,
                    "conductor.cost": trace.cost,
                    "gen_ai.usage.input_tokens": trace.input_tokens,
                    "gen_ai.usage.output_tokens": trace.output_tokens,
                }
            )
            if trace.format_error:
                telemetry.failed(span, "format_error")
            elif trace.infra_error:
                telemetry.failed(span, "infra_error")
        return trace


async def _solve(
    question: str,
    plan_source: PlanSource,
    pool: WorkerCaller,
    opts: SolveOptions,
    sample_index: int,
    on_event: EventHandler | None,
    previous: PreviousRound | None,
    on_answer_delta: DeltaHandler | None,
) -> SolveTrace:
    """The round loop of :func:`solve`."""
    trace = SolveTrace(question=question)
    wall0 = time.perf_counter()
    start = 0 if previous is None else 1
    answer: str | None = previous.answer if previous is not None else None

    rounds = range(start, max(start + 1, opts.max_rounds))
    for r in rounds:
        spent = trace.input_tokens + trace.output_tokens
        budget = opts.budget.minus(spent, trace.cost, time.perf_counter() - wall0)
        if r > start and _exhausted(budget):
            break
        request = plan_request(question, len(pool), opts, sample_index, previous)
        if on_event is not None:
            on_event({"type": "plan_start", "round": r})
        result = await _plan(plan_source, request, r)
        rnd = RoundTrace(
            round=r,
            raw_plan=result.raw,
            plan_error=result.error.to_dict() if result.error else None,
            conductor_input_tokens=result.input_tokens,
            conductor_output_tokens=result.output_tokens,
            conductor_latency_s=result.latency_s,
        )
        trace.rounds.append(rnd)
        if on_event is not None:
            on_event(
                {
                    "type": "plan_end",
                    "round": r,
                    "raw": result.raw,
                    "plan": result.workflow.to_dict() if result.workflow else None,
                    "error": rnd.plan_error,
                }
            )
        if result.workflow is None:
            trace.format_error = r == start
            break
        if result.workflow.is_keep:
            rnd.kept_previous = r > 0
            if r == 0:
                trace.format_error = True
            break
        # The plan names pool ids (the parser admitted only offered ones): it runs as written.
        wf_trace = await execute(
            result.workflow,
            question,
            pool,
            budget=budget,
            previous_answer=answer if r > 0 else None,
            sample_index=sample_streams.round_index(sample_index, r),
            answer_fallback=opts.answer_fallback,
            on_event=on_event,
            # only the last round's answer cannot be replaced by a later one
            on_answer_delta=on_answer_delta if r == rounds[-1] else None,
        )
        rnd.workflow = wf_trace
        trace.calls += wf_trace.calls
        trace.input_tokens += wf_trace.input_tokens
        trace.output_tokens += wf_trace.output_tokens
        trace.cost += wf_trace.cost
        if wf_trace.infra_error or wf_trace.plan_failure is not None:
            # No answer from this round: a later round keeps the previous one (as for a plan
            # that does not parse); the first round run's failure is the trace's.
            if r == start:
                trace.infra_error = wf_trace.infra_error
                trace.plan_failure = wf_trace.plan_failure
            break
        answer = wf_trace.answer
        # The Conductor sees its own completion, as the authors' code shows it: any text a
        # model wrote around the three lists stays.
        previous = PreviousRound(plan=result.raw, answer=answer)

    trace.answer = answer
    trace.wall_s = time.perf_counter() - wall0
    return trace


async def _plan(plan_source: PlanSource, request: PlanRequest, round_index: int) -> PlanResult:
    """Round ``round_index``'s plan from ``plan_source`` (:func:`_offered_only`), in a
    ``conductor.plan`` span."""
    with telemetry.span("conductor.plan", {"conductor.round": round_index}, kind="client") as span:
        result = _offered_only(await plan_source.plan(request), request)
        if span.is_recording():
            span.set_attributes(
                {
                    "gen_ai.usage.input_tokens": result.input_tokens,
                    "gen_ai.usage.output_tokens": result.output_tokens,
                }
            )
            if result.workflow is None:
                telemetry.failed(span, "plan_format_error")
            else:
                span.set_attribute("conductor.plan.steps", len(result.workflow.steps))
        return result


def _offered_only(result: PlanResult, request: PlanRequest) -> PlanResult:
    """``result``, or a format error when its plan names a worker that ``request`` did not offer
    (a plan source that did not parse for the request): nothing runs on a worker the Conductor
    was not offered."""
    if result.workflow is None:
        return result
    try:
        check_offered(result.workflow, request.workers)
    except PlanFormatError as error:
        return replace(result, workflow=None, error=error)
    return result


def _exhausted(budget: Budget) -> bool:
    return (
        budget.max_tokens == 0
        or budget.max_cost == 0.0
        or (budget.deadline_s is not None and budget.deadline_s <= 0)
    )


def solve_options(
    pool,
    *,
    max_steps: int = 5,
    access_mode: str | AccessMode = AccessMode.BINARY,
    descriptors: bool = False,
    rounds: int = 1,
    max_tokens: int | None = None,
    max_cost: float | None = None,
    deadline: float | None = None,
    answer_fallback: bool = False,
    prompt_style: PromptStyle | str = PromptStyle.FULL,
) -> SolveOptions:
    """Solve options from plain settings (as a config file or the command line gives them).

    ``pool`` is the :class:`~conductor_core.workers.config.PoolConfig`: its workers' descriptions
    (indexed by pool id) are shown in descriptor mode. The budget caps steps, and tokens, dollars
    and seconds when given. ``prompt_style`` is how a Conductor of unknown training is asked (a
    model folder saved by training carries its own).
    """
    return SolveOptions(
        max_rounds=rounds,
        max_steps=max_steps,
        access_mode=AccessMode(access_mode),
        budget=Budget(
            max_steps=max_steps, max_tokens=max_tokens, max_cost=max_cost, deadline_s=deadline
        ),
        descriptors=descriptors,
        descriptions=pool.descriptions(),
        answer_fallback=answer_fallback,
        prompt_style=PromptStyle(prompt_style),
    )
