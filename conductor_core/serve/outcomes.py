"""What a finished workflow means for its client: its outcome label (for the metrics), the error
it gets when the workflow left no answer (:func:`failure_of`), the answer text, the check of a
``response_format``, the token usage and the ``conductor`` summary of the response."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from conductor_core.serve.protocol import RequestError, UsageInfo
from conductor_core.serve.redaction import redact_errors
from conductor_core.serve.request_mapping import SolveJob
from conductor_core.serve.structured import check_answer, unfenced
from conductor_core.workers.types import ErrorKind
from conductor_core.workflow.trace import SolveTrace, TraceSummary

__all__ = [
    "answer_text",
    "check_format",
    "failure_of",
    "outcome_of",
    "ran_out_of_budget",
    "summary_of",
    "usage_of",
]

logger = logging.getLogger("conductor.gateway")


def usage_of(trace: SolveTrace) -> UsageInfo:
    """Tokens of the Conductor (all rounds) plus those of every worker call."""
    prompt = trace.input_tokens + sum(r.conductor_input_tokens for r in trace.rounds)
    completion = trace.output_tokens + sum(r.conductor_output_tokens for r in trace.rounds)
    return UsageInfo.of(prompt, completion)


def _failed_calls(trace: SolveTrace, *, plan_fault: bool) -> list[str]:
    """The worker calls that failed through the plan's own fault (``plan_fault=True``: a request
    the worker rejected, a context overflow, a call cut short by the request's deadline) or else
    through the infrastructure's, as ``step I on worker W (kind)``. Whose fault each was is the
    step's ``plan_fault`` (:func:`~conductor_core.workers.types.is_plan_fault` decided it)."""
    return [
        f"step {s.index} on worker {s.worker} ({s.error_kind})"
        for r in trace.rounds
        if r.workflow is not None
        for s in r.workflow.steps
        if s.error is not None and s.plan_fault == plan_fault
    ]


def ran_out_of_budget(trace: SolveTrace) -> bool:
    """True when the plan failure that left the workflow without an answer is the request's
    budget running out: a step skipped for a budget (``budget:<name>``, the ``deadline_s`` wall
    clock included) or a call cut short by the deadline (``deadline_exceeded``). That is no fault
    (200, empty content, ``finish_reason="length"``); any other plan failure is a request that a
    worker rejected (:func:`failure_of`)."""
    failure = trace.plan_failure
    return failure is not None and (failure.startswith("budget:") or failure == ErrorKind.DEADLINE)


def outcome_of(trace: SolveTrace) -> str:
    """The workflow's outcome label: answered, format_error, infra_error, plan_failure (a worker
    rejected a request the plan made) or no_answer (a budget, the deadline included, stopped it
    before an answer). The executor decided whose fault a failure was
    (:func:`~conductor_core.workflow.executor.failure_cause`): a deadline is the plan's, never
    the infrastructure's."""
    if trace.answer is not None:
        return "answered"
    if trace.format_error:
        return "format_error"
    if trace.infra_error:
        return "infra_error"
    if trace.plan_failure is not None and not ran_out_of_budget(trace):
        return "plan_failure"
    return "no_answer"


def summary_of(job: SolveJob, trace: SolveTrace, hosts: Iterable[str] = ()) -> dict[str, Any]:
    """The ``conductor`` field of the response: the trace's summary with the request id and the
    Conductor's tokens, and the whole trace (its errors redacted of ``hosts``) when the request
    asked for it."""
    summary = TraceSummary.from_trace(trace).model_dump(mode="json", exclude={"answer", "raw_plan"})
    summary["request_id"] = job.request_id
    summary["conductor_input_tokens"] = sum(r.conductor_input_tokens for r in trace.rounds)
    summary["conductor_output_tokens"] = sum(r.conductor_output_tokens for r in trace.rounds)
    if job.return_trace:
        summary["trace"] = redact_errors(trace.model_dump(mode="json"), hosts)
    return summary


def failure_of(trace: SolveTrace) -> RequestError | None:
    """The error for a workflow that produced no answer for a reason not the client's: 502
    when the plan did not parse (``plan_format_error``), when a worker failed
    (``worker_error``: infrastructure), or when a worker rejected a request that the plan
    made (``plan_failure``: a 4xx, a prompt longer than its context). The last is the
    Conductor's doing, not the client's: the plan chose the worker and what the step reads,
    and another plan may fit (a 400 would tell the client's SDK never to retry). None when
    it answered or ran out of its budget (:func:`ran_out_of_budget`)."""
    if trace.answer is not None:
        return None
    if trace.format_error:
        first = trace.rounds[0].plan_error if trace.rounds else None
        why = f": {first.get('message')}" if first else ""
        return RequestError(
            502,
            f"the Conductor's plan could not be parsed{why}",
            "server_error",
            code="plan_format_error",
        )
    if trace.infra_error:
        failed = _failed_calls(trace, plan_fault=False)
        return RequestError(
            502,
            "a worker failed: " + ("; ".join(failed) or "infrastructure error"),
            "server_error",
            code="worker_error",
        )
    if trace.plan_failure is not None and not ran_out_of_budget(trace):
        failed = _failed_calls(trace, plan_fault=True)
        return RequestError(
            502,
            f"the Conductor's plan failed ({trace.plan_failure}): a worker rejected the "
            "request it made: " + ("; ".join(failed) or trace.plan_failure),
            "server_error",
            code="plan_failure",
        )
    return None


def answer_text(job: SolveJob, trace: SolveTrace) -> str:
    """The workflow's answer as the client is to get it (before ``stop`` and ``max_tokens``):
    with a ``response_format``, without the whitespace and code fence around it."""
    answer = trace.answer or ""
    return unfenced(answer) if job.output_format is not None else answer


def check_format(job: SolveJob, trace: SolveTrace, answer: str, worker_names: list[str]) -> None:
    """Check ``answer`` (as sent, whole) against the job's ``response_format``.

    Raises:
        RequestError: 502 ``response_format_unmet`` naming the worker that wrote it.
    """
    if job.output_format is None:
        return
    try:
        check_answer(answer, job.output_format, answer_writer(trace, worker_names))
    except RequestError:
        logger.warning(
            "the answer does not match the response_format",
            extra={"request_id": job.request_id},
        )
        raise


def answer_writer(trace: SolveTrace, worker_names: list[str]) -> str | None:
    """The name of the worker whose reply is the answer (the last round that gave it)."""
    for rnd in reversed(trace.rounds):
        wf = rnd.workflow
        if wf is not None and wf.answer == trace.answer and wf.answer_step is not None:
            step = next((s for s in wf.steps if s.index == wf.answer_step), None)
            if step is not None and 0 <= step.worker < len(worker_names):
                return worker_names[step.worker]
    return None
