"""Execution traces: JSON-serialisable, stable records consumed by training, evaluation,
MLflow and the gateway. Field names are a contract: add fields, do not rename them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

TRACE_VERSION = 1


class StepTrace(BaseModel):
    """One executed (or skipped) step."""

    index: int
    worker: int = Field(description="Worker id in the pool the plan was run on.")
    model: str = ""
    subtask: str
    access: list[Any] = Field(default_factory=list, description="As written by the Conductor.")
    visible: list[int] = Field(default_factory=list, description="Steps this worker saw.")
    prompt_digest: str = ""
    response: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    latency_s: float = 0.0
    retries: int = 0
    cached: bool = False
    error: str | None = None
    error_kind: str | None = None
    plan_fault: bool = Field(
        default=False,
        description="The error was the plan's own fault (a request the worker rejected, a context "
        "overflow, the plan's deadline: workers.types.is_plan_fault), not the infrastructure's.",
    )
    skipped: str | None = Field(default=None, description="Why the step did not run, if not.")
    started_s: float | None = Field(default=None, description="Seconds since workflow start.")
    finished_s: float | None = None


class WorkflowTrace(BaseModel):
    """One executed plan."""

    version: int = TRACE_VERSION
    plan: dict[str, Any] = Field(default_factory=dict, description="Workflow.to_dict().")
    steps: list[StepTrace] = Field(default_factory=list)
    answer: str | None = None
    answer_step: int | None = None
    stopped: str | None = Field(default=None, description="Budget or failure that ended it early.")
    infra_error: bool = Field(default=False, description="An infrastructure failure spoiled it.")
    plan_failure: str | None = Field(
        default=None,
        description="The plan's own failure that left it without an answer: the budget it ran "
        "out of (`budget:deadline`, `budget:max_tokens`, ...) or the kind of the worker error it "
        "caused (`context_overflow`, `client_error`, `deadline_exceeded`). None: no such failure.",
    )
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    wall_s: float = 0.0


class RoundTrace(BaseModel):
    """One round of the solve loop: the plan source's output and, if it parsed, its execution."""

    round: int
    raw_plan: str = ""
    plan_error: dict[str, str] | None = Field(default=None, description="PlanFormatError.to_dict()")
    kept_previous: bool = False
    conductor_input_tokens: int = 0
    conductor_output_tokens: int = 0
    conductor_latency_s: float = 0.0
    workflow: WorkflowTrace | None = None


class SolveTrace(BaseModel):
    """A whole question: all rounds and the final answer."""

    version: int = TRACE_VERSION
    question: str
    rounds: list[RoundTrace] = Field(default_factory=list)
    answer: str | None = None
    format_error: bool = Field(default=False, description="The first round's plan did not parse.")
    infra_error: bool = Field(
        default=False, description="An infrastructure failure spoiled the first round's plan."
    )
    plan_failure: str | None = Field(
        default=None,
        description="The first round's plan failed by its own fault (WorkflowTrace.plan_failure).",
    )
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    wall_s: float = 0.0


class TraceSummary(BaseModel):
    """The figures of one solved question, built from its :class:`SolveTrace` by
    :meth:`from_trace`: the one summary that evaluation records and training outcomes extend."""

    answer: str | None = None
    format_error: bool = Field(
        default=False, description="The first round run produced no usable plan."
    )
    format_error_code: str | None = Field(
        default=None, description="The parser's reason code for that round's format error."
    )
    kept: bool = Field(
        default=False, description="A recursion round kept the previous answer (empty lists)."
    )
    infra_error: bool = Field(
        default=False, description="An infrastructure failure spoiled the first round run."
    )
    plan_failure: str | None = Field(
        default=None,
        description="The first round run's plan failed by its own fault, with no answer "
        "(WorkflowTrace.plan_failure): scored 0, as a plan that does not parse.",
    )
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    wall_s: float = 0.0
    plan_len: int | None = Field(
        default=None, description="Steps of the first executed plan (None: none was executed)."
    )
    workers: list[int] = Field(
        default_factory=list, description="Pool worker id of each step that ran, in order."
    )
    all_access_steps: int = Field(default=0, description='Steps that ran with ["all"] access.')
    subtasks: list[str] = Field(
        default_factory=list, description="The subtask of each step that ran, in order."
    )
    rounds: int = 0
    raw_plan: str | None = Field(default=None, description="The first round's raw plan text.")

    @classmethod
    def from_trace(cls, trace: SolveTrace) -> TraceSummary:
        """Summarise ``trace``."""
        first = trace.rounds[0] if trace.rounds else None
        executed = [r.workflow for r in trace.rounds if r.workflow is not None]
        steps = [s for wf in executed for s in wf.steps if s.skipped is None]
        plan = executed[0].plan if executed else None
        return cls(
            answer=trace.answer,
            format_error=trace.format_error,
            format_error_code=(first.plan_error or {}).get("code") if first else None,
            kept=any(r.kept_previous for r in trace.rounds),
            infra_error=trace.infra_error,
            plan_failure=trace.plan_failure,
            calls=trace.calls,
            input_tokens=trace.input_tokens,
            output_tokens=trace.output_tokens,
            cost=trace.cost,
            wall_s=trace.wall_s,
            plan_len=len(plan.get("model_id", [])) if plan else None,
            workers=[s.worker for s in steps],
            all_access_steps=sum(1 for s in steps if s.access == ["all"]),
            subtasks=[s.subtask for s in steps],
            rounds=len(trace.rounds),
            raw_plan=first.raw_plan if first else None,
        )

    @property
    def plan_ok(self) -> bool:
        """The plan parsed (a kept answer counts as a parsed plan)."""
        return not self.format_error

    @property
    def final_worker(self) -> int | None:
        """Pool id of the worker whose output is the answer (the last step that ran)."""
        return self.workers[-1] if self.workers else None

    @property
    def tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens
