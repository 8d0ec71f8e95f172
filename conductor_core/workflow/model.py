"""The Workflow a Conductor writes: ordered steps of (worker id, subtask, access).

Access has two modes:

* ``binary`` (the paper's published model, the default): each step's access is ``["all"]`` (it sees
  every earlier step) or ``[]`` (it sees none).
* ``index``: each step lists the earlier step numbers (0-based) it may read; ``"all"`` is accepted
  there too and means every earlier step.

A workflow with zero steps is only valid as the answer to a recursion round, where three empty
lists mean "keep the previous answer" (see :attr:`Workflow.is_keep`).

A step's worker id is the worker's id in the pool (its position), also when only a subset of the
pool is offered: the Conductor is shown the offered workers under their pool ids and its plan is
run as written (:func:`offered_ids` reads what a caller offers).
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

ALL: Literal["all"] = "all"


OfferedWorkers = int | Iterable[Any]
"""Workers offered to the Conductor: a pool size ``n`` (ids ``0..n-1``, the whole pool), or the
offered pool ids (ints, or objects with an ``id`` attribute such as ``WorkerInfo``)."""


def offered_ids(workers: OfferedWorkers) -> tuple[int, ...]:
    """The pool ids that ``workers`` offers, in the order given: ``n`` means ``0..n-1``.

    Raises ``ValueError`` (naming ``workers``) for no worker, a negative or repeated id, or a value
    that is not an id.
    """
    if isinstance(workers, bool):
        raise ValueError(f"workers: expected a pool size or a list of worker ids, got {workers!r}")
    if isinstance(workers, int):
        if workers < 1:
            raise ValueError(f"workers: the pool needs at least one model, got {workers}")
        return tuple(range(workers))
    ids: list[int] = []
    for item in workers:
        value = getattr(item, "id", item)
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"workers: {value!r} is not a worker id (a pool position)")
        if value < 0:
            raise ValueError(f"workers: worker id {value} is negative; pool ids start at 0")
        if value in ids:
            raise ValueError(f"workers: worker {value} is offered twice")
        ids.append(value)
    if not ids:
        raise ValueError("workers: no worker is offered; offer at least one")
    return tuple(ids)


def describe_ids(ids: Iterable[int]) -> str:
    """``ids`` for a message: ``0-3`` for a run of four or more from 0, else ``1, 3``."""
    ordered = sorted(ids)
    if len(ordered) >= 4 and ordered == list(range(len(ordered))):
        return f"0-{len(ordered) - 1}"
    return ", ".join(str(i) for i in ordered)


class AccessMode(StrEnum):
    """How a step's access list is written."""

    BINARY = "binary"
    INDEX = "index"


class Step(BaseModel):
    """One step of a workflow: which worker does which subtask and what it may read."""

    model_config = ConfigDict(frozen=True)

    worker: int = Field(ge=0, description="Worker id: the worker's position in the pool.")
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
