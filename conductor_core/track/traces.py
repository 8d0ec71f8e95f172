"""Solve traces as MLflow traces: one trace per question, a root span, a span per round and a child
span per executed step, laid out on the real timeline of the run (parallel steps overlap).

Traces never carry keys (workers are named, not authenticated, in a trace); every string is still
scrubbed of anything that looks like a credential or equals a secret environment value.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from conductor_core.track.mlflow_run import mlflow_module
from conductor_core.track.scrub import scrub_obj, secret_values
from conductor_core.workflow.trace import SolveTrace

T = TypeVar("T")
_NS = 1_000_000_000


def sample(items: Sequence[T], k: int, seed: int = 0) -> list[T]:
    """A seeded sample of ``k`` items (all of them when fewer), in their original order."""
    if k < 0:
        raise ValueError(f"sample size k must be >= 0, got {k}")
    n = len(items)
    if k >= n:
        return list(items)
    chosen = sorted(random.Random(seed).sample(range(n), k))
    return [items[i] for i in chosen]


def _as_trace(trace: SolveTrace | Mapping[str, Any]) -> SolveTrace:
    if isinstance(trace, SolveTrace):
        return trace
    return SolveTrace.model_validate(dict(trace))


class _Clock:
    """Maps the trace's relative seconds onto wall-clock nanoseconds ending now."""

    def __init__(self, total_s: float) -> None:
        self.base = time.time_ns() - int(max(total_s, 0.0) * _NS)

    def at(self, seconds: float) -> int:
        return self.base + int(max(seconds, 0.0) * _NS)


def _round_length(rnd: Any) -> float:
    wall = rnd.workflow.wall_s if rnd.workflow is not None else 0.0
    return rnd.conductor_latency_s + wall


def log_solve_trace(
    trace: SolveTrace | Mapping[str, Any],
    *,
    name: str,
    attributes: Mapping[str, Any] | None = None,
) -> str:
    """Log one solve as an MLflow trace and return its trace id.

    The root span (type ``CHAIN``) has the question as input, the answer as output and the
    totals (calls, tokens, cost, wall time, error flags) plus ``attributes`` as attributes. Each
    round is an ``AGENT`` span (raw plan, plan error, Conductor tokens and latency); each step an
    ``LLM`` span (worker, model, subtask, visible steps -> response; tokens, cost, latency,
    retries, error). A failed step's span has status ``ERROR``. The trace is linked to the active
    run, if any.

    Args:
        trace: a :class:`~conductor_core.workflow.trace.SolveTrace` or its dict.
        name: the root span's name (for example ``"conductor aime-2025-3"``).
        attributes: extra root attributes (method, problem id, correct, ...).
    """
    mlflow = mlflow_module()
    solve = _as_trace(trace)
    secrets = tuple(secret_values())

    def clean(obj: Any) -> Any:
        return scrub_obj(obj, secrets)

    total = max(solve.wall_s, sum(_round_length(r) for r in solve.rounds))
    clock = _Clock(total)
    root_attrs = {
        "calls": solve.calls,
        "input_tokens": solve.input_tokens,
        "output_tokens": solve.output_tokens,
        "cost": solve.cost,
        "wall_s": solve.wall_s,
        "rounds": len(solve.rounds),
        "format_error": solve.format_error,
        "infra_error": solve.infra_error,
        **{str(k): v for k, v in (attributes or {}).items()},
    }
    root = mlflow.start_span_no_context(
        name=clean(name),
        span_type="CHAIN",
        inputs={"question": clean(solve.question)},
        attributes=clean(root_attrs),
        start_time_ns=clock.at(0.0),
    )
    cursor = 0.0
    try:
        for rnd in solve.rounds:
            cursor = _log_round(mlflow, root, rnd, clock, cursor, clean)
    finally:
        root.end(outputs={"answer": clean(solve.answer)}, end_time_ns=clock.at(total))
    return root.trace_id


def _log_round(mlflow: Any, root: Any, rnd: Any, clock: _Clock, start: float, clean: Any) -> float:
    """Log one round span with its steps; returns the round's end (seconds)."""
    wf = rnd.workflow
    end = start + _round_length(rnd)
    span = mlflow.start_span_no_context(
        name=f"round {rnd.round}",
        span_type="AGENT",
        parent_span=root,
        inputs={"raw_plan": clean(rnd.raw_plan)},
        attributes={
            "round": rnd.round,
            "kept_previous": rnd.kept_previous,
            "conductor_input_tokens": rnd.conductor_input_tokens,
            "conductor_output_tokens": rnd.conductor_output_tokens,
            "conductor_latency_s": rnd.conductor_latency_s,
            "steps": len(wf.steps) if wf is not None else 0,
            "stopped": wf.stopped if wf is not None else None,
        },
        start_time_ns=clock.at(start),
    )
    status = "OK"
    outputs: dict[str, Any] = {}
    try:
        if rnd.plan_error:
            status = "ERROR"
            outputs["plan_error"] = clean(rnd.plan_error)
        if wf is not None:
            outputs["answer"] = clean(wf.answer)
            offset = start + rnd.conductor_latency_s
            seq = offset
            for step in wf.steps:
                seq = _log_step(mlflow, span, step, clock, offset, seq, clean)
    finally:
        span.end(outputs=outputs, status=status, end_time_ns=clock.at(end))
    return end


def _log_step(
    mlflow: Any, parent: Any, step: Any, clock: _Clock, offset: float, seq: float, clean: Any
) -> float:
    """Log one step span. Steps without recorded times are laid out one after another from
    ``seq``; returns the next sequential start."""
    if step.started_s is not None:
        begin = offset + step.started_s
        finish = offset + (step.finished_s if step.finished_s is not None else step.started_s)
    else:
        begin, finish = seq, seq + step.latency_s
    span = mlflow.start_span_no_context(
        name=f"step {step.index} (worker {step.worker})",
        span_type="LLM",
        parent_span=parent,
        inputs=clean(
            {
                "worker": step.worker,
                "model": step.model,
                "subtask": step.subtask,
                "access": step.access,
                "visible": step.visible,
            }
        ),
        attributes=clean(
            {
                "worker": step.worker,
                "model": step.model,
                "input_tokens": step.input_tokens,
                "output_tokens": step.output_tokens,
                "cost": step.cost,
                "latency_s": step.latency_s,
                "retries": step.retries,
                "cached": step.cached,
                "error": step.error,
                "error_kind": step.error_kind,
                "skipped": step.skipped,
            }
        ),
        start_time_ns=clock.at(begin),
    )
    outputs = clean({"response": step.response, "error": step.error, "skipped": step.skipped})
    span.end(
        outputs=outputs,
        status="ERROR" if step.error else "OK",
        end_time_ns=clock.at(max(finish, begin)),
    )
    return max(seq, finish)


def flush_traces() -> None:
    """Wait until traces logged asynchronously have reached the tracking server."""
    mlflow = mlflow_module()
    flush = getattr(mlflow, "flush_trace_async_logging", None)
    if flush is not None:
        flush()
