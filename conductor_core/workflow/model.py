"""The Workflow a Conductor writes: ordered steps of (worker id, subtask, access).

Access has two modes:

* ``binary`` (the paper's published model, the default): each step's access is ``["all"]`` (it sees
  every earlier step) or ``[]`` (it sees none).
* ``index``: each step lists the earlier step numbers (0-based) it may read; ``"all"`` is accepted
  there too and means every earlier step.

A workflow with zero steps is only valid as the answer to a recursion round, where three empty
lists mean "keep the previous answer" (see :attr:`Workflow.is_keep`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

ALL: Literal["all"] = "all"


class AccessMode(StrEnum):
    """How a step's access list is written."""

    BINARY = "binary"
    INDEX = "index"


class Step(BaseModel):
    """One step of a workflow: which worker does which subtask and what it may read."""

    model_config = ConfigDict(frozen=True)

    worker: int = Field(ge=0, description="Worker id (position in the offered pool).")
    subtask: str = Field(description="Natural-language instruction for this step's worker.")
    access: Literal["all"] | tuple[int, ...] = Field(
        default=(), description='"all" or the earlier step indices this step may read.'
    )

    def visible(self, index: int) -> tuple[int, ...]:
        """The earlier step indices that the step at position ``index`` may read, ascending."""
        if self.access == ALL:
            return tuple(range(index))
        return tuple(sorted(set(self.access)))

    def access_literal(self) -> list[str] | list[int]:
        """The access list as the Conductor writes it (``["all"]``, ``[]`` or ``[0, 2]``)."""
        return [ALL] if self.access == ALL else list(self.access)


class Workflow(BaseModel):
    """A parsed plan. Validation of ids against a pool happens in the parser."""

    model_config = ConfigDict(frozen=True)

    steps: tuple[Step, ...] = ()
    access_mode: AccessMode = AccessMode.BINARY

    @property
    def is_keep(self) -> bool:
        """True for the empty plan, which in a recursion round means "keep the previous answer"."""
        return not self.steps

    def __len__(self) -> int:
        return len(self.steps)

    def dependencies(self) -> list[tuple[int, ...]]:
        """For each step, the earlier steps it must wait for (= the steps it may read)."""
        return [step.visible(i) for i, step in enumerate(self.steps)]

    def worker_ids(self) -> list[int]:
        """The worker id of each step, in order."""
        return [s.worker for s in self.steps]

    def remap_workers(self, mapping: dict[int, int] | list[int]) -> Workflow:
        """Return a copy whose worker ids are translated through ``mapping``.

        Used by adaptive pools: the Conductor writes ids of the offered subset, the executor needs
        the ids of the full pool.
        """
        lookup = dict(enumerate(mapping)) if isinstance(mapping, list) else mapping
        steps = tuple(s.model_copy(update={"worker": lookup[s.worker]}) for s in self.steps)
        return self.model_copy(update={"steps": steps})

    def render(self) -> str:
        """Render the three lists as the Conductor writes them (parseable by the parser)."""
        import json

        ids = json.dumps(self.worker_ids())
        subtasks = json.dumps([s.subtask for s in self.steps], ensure_ascii=False)
        access = json.dumps([s.access_literal() for s in self.steps])
        return f"model_id = {ids}\nsubtasks = {subtasks}\naccess_list = {access}"

    def to_dict(self) -> dict:
        """JSON-serialisable form: the three lists plus the access mode."""
        return {
            "model_id": self.worker_ids(),
            "subtasks": [s.subtask for s in self.steps],
            "access_list": [s.access_literal() for s in self.steps],
            "access_mode": self.access_mode.value,
        }
