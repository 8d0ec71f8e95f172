"""The plan-source interface: how a plan is obtained for a question.

A plan source returns the raw text and the parsed workflow (or the format error). The solve loop
(:mod:`conductor_core.solve`) sits above plan sources and the executor; neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from conductor_core.workflow.errors import PlanFormatError
from conductor_core.workflow.model import AccessMode, Workflow


@dataclass(frozen=True)
class WorkerInfo:
    """What the Conductor may know of an offered worker: its id and an optional descriptor."""

    id: int
    description: str = ""


@dataclass(frozen=True)
class PreviousRound:
    """A recursion round's view of the previous round: its plan text and final answer."""

    plan: str
    answer: str


@dataclass(frozen=True)
class PlanRequest:
    """Everything a plan source needs to write one plan."""

    question: str
    workers: tuple[WorkerInfo, ...]
    max_steps: int = 5
    access_mode: AccessMode = AccessMode.BINARY
    descriptors: bool = False
    previous: PreviousRound | None = None
    sample_index: int = 0


@dataclass
class PlanResult:
    """A plan source's answer: raw text, and either a workflow or the format error."""

    raw: str
    workflow: Workflow | None = None
    error: PlanFormatError | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    latency_s: float = 0.0
    extra: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the plan parsed."""
        return self.workflow is not None


@runtime_checkable
class PlanSource(Protocol):
    """Anything that writes plans. Infrastructure failures raise; format errors are returned."""

    async def plan(self, request: PlanRequest) -> PlanResult:
        """Write one plan for ``request``."""
        ...

    async def aclose(self) -> None:
        """Release resources."""
        ...
