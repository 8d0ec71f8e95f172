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
    infra_error: bool = False
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    wall_s: float = 0.0
