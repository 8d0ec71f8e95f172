"""The plan-source interface: how a plan is obtained for a question.

A plan source returns the raw text and the parsed workflow (or the format error). The solve loop
(:mod:`conductor_core.solve`) sits above plan sources and the executor; neither imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from conductor_core.workflow.errors import PlanFormatError
from conductor_core.workflow.grammar import plan_regex
from conductor_core.workflow.model import AccessMode, Workflow
from conductor_core.workflow.parser import try_parse_plan
from conductor_core.workflow.prompts import PROMPT_VERSION, PromptStyle


@dataclass(frozen=True)
class WorkerInfo:
    """What the Conductor may know of an offered worker: its pool id (the Conductor's prompt
    names it ``Model <id>``, and plans use that id) and an optional descriptor."""

    id: int
    description: str = ""


@dataclass(frozen=True)
class PreviousRound:
    """What a recursion round builds on: the previous round's completion as the Conductor wrote
    it (its raw text, plan in pool ids; bounded by the generation's length) and that plan's final
    answer (``None`` when it produced none)."""

    plan: str
    answer: str | None


@dataclass(frozen=True)
class PlanRequest:
    """Everything a plan source needs to write one plan. ``workers`` are the offered workers
    under their pool ids, in the order the prompt lists them; a plan may use exactly those ids."""

    question: str
    workers: tuple[WorkerInfo, ...]
    max_steps: int = 5
    access_mode: AccessMode = AccessMode.BINARY
    descriptors: bool = False
    previous: PreviousRound | None = None
    sample_index: int = 0
    prompt_style: PromptStyle = PromptStyle.FULL
    prompt_version: str = PROMPT_VERSION
    """The prompt version to ask in (:data:`~conductor_core.workflow.prompts.PROMPT_VERSION`):
    a model saved with an older one is asked its recursion round in that version's layout."""


def as_trained(
    request: PlanRequest,
    style: PromptStyle | None,
    version: str | None = None,
    descriptors: bool = False,
) -> PlanRequest:
    """``request`` in the prompt style and version a model was trained with (each unchanged when
    None, i.e. unknown), with the workers' descriptions when it was trained in descriptor mode:
    a model-backed plan source always asks its model the way it learned."""
    changes: dict[str, Any] = {}
    if descriptors and not request.descriptors:
        changes["descriptors"] = True
    if style is not None and request.prompt_style != style:
        changes["prompt_style"] = style
    if version is not None and request.prompt_version != version:
        changes["prompt_version"] = version
    return replace(request, **changes) if changes else request


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


def plan_grammar(
    request: PlanRequest, max_subtask_chars: int | None = None, *, utf8: bool = False
) -> str:
    """The plan regex for ``request`` (:func:`~conductor_core.workflow.grammar.plan_regex` for its
    workers, steps, access mode and round): the one grammar that a served Conductor is sent and a
    local one decodes under; every plan it matches passes :func:`parse_result` for ``request``."""
    return plan_regex(
        request.workers,
        request.max_steps,
        request.access_mode,
        allow_empty=request.previous is not None,
        max_subtask_chars=max_subtask_chars,
        utf8=utf8,
    )


def parse_result(request: PlanRequest, raw: str, **fields: Any) -> PlanResult:
    """Parse ``raw`` for ``request`` (empty plans allowed in recursion rounds) into a PlanResult."""
    workflow, error = try_parse_plan(
        raw,
        workers=request.workers,
        max_steps=request.max_steps,
        access_mode=request.access_mode,
        allow_empty=request.previous is not None,
    )
    return PlanResult(raw=raw, workflow=workflow, error=error, **fields)


@runtime_checkable
class PlanSource(Protocol):
    """Anything that writes plans. Infrastructure failures raise; format errors are returned."""

    async def plan(self, request: PlanRequest) -> PlanResult:
        """Write one plan for ``request``."""
        ...

    async def aclose(self) -> None:
        """Release resources."""
        ...
