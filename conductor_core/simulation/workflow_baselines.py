"""Hand-written workflows for the workflow world: the baselines a trained Conductor must beat.

Each is a :class:`~conductor_core.policy.fixed.FixedPlanSource` that reads the question as a
person writing rules would: its ``Part k:`` markers and each part's shape (``Calculate`` is math,
``Which of these`` multiple choice, ``Write the word`` free-form, :func:`part_domains`). The
workers are named by role (:class:`Roles`: a specialist per domain, one checker).

* ``single:<id>``: one worker answers the question;
* ``moa``: every worker answers, then the checker reads them all and answers (mixture-of-agents);
* ``solve-check``: the first part's specialist answers, the checker checks it;
* ``parts``: each part to its specialist (``Solve part k.``), then the checker reads the parts'
  answers and answers the question; a one-part question goes to its specialist alone;
* ``parts-check``: ``parts``, then the checker checks the whole answer;
* ``parts-check-check``: ``parts-check``, then the checker checks that answer again (at most
  six steps, the plan length a Conductor may write here);
* ``best-of-3``: the first part's specialist answers three times, the checker reads the three.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from conductor_core.policy.base import PlanRequest
from conductor_core.policy.fixed import FixedPlanSource
from conductor_core.workflow.model import ALL, Step, Workflow

__all__ = ["TOPOLOGIES", "Roles", "part_domains", "topology", "topology_workflow"]

SOLVE = "Answer the question."
CHECK = "Check the answer you can see and correct it if it is wrong."

_PART_MARK = re.compile(r"\bPart \d+: ")
_SHAPES = (("math", "Calculate"), ("mcq", "Which of these"), ("freeform", "Write the word"))


@dataclass(frozen=True)
class Roles:
    """Which pool id plays which role (the bundled workflow pool's order by default)."""

    specialists: dict[str, int] = field(
        default_factory=lambda: {"math": 0, "mcq": 1, "freeform": 2}
    )
    checker: int = 3
    workers: int = 4


def part_domains(question: str) -> list[str]:
    """The domain of each part of ``question``, read from its shape (one entry: one part)."""
    texts = _PART_MARK.split(question)[1:] or [question]
    return [next((d for d, cue in _SHAPES if cue in t), "freeform") for t in texts]


def _step(worker: int, subtask: str, access: tuple[int, ...] | str = ()) -> Step:
    return Step(worker=worker, subtask=subtask, access=access)


def _steps(name: str, domains: list[str], roles: Roles) -> list[Step]:
    first = roles.specialists[domains[0]]
    if name.startswith("single:"):
        return [_step(int(name.split(":", 1)[1]), SOLVE)]
    if name == "moa":
        solvers = [_step(w, SOLVE) for w in range(roles.workers)]
        return [*solvers, _step(roles.checker, SOLVE, ALL)]
    if name == "solve-check":
        return [_step(first, SOLVE), _step(roles.checker, CHECK, (0,))]
    if name == "best-of-3":
        attempts = [_step(first, SOLVE) for _ in range(3)]
        return [*attempts, _step(roles.checker, SOLVE, ALL)]
    if name in ("parts", "parts-check", "parts-check-check"):
        if len(domains) == 1:
            steps = [_step(first, SOLVE)]
        else:
            steps = [
                _step(roles.specialists[d], f"Solve part {k + 1}.") for k, d in enumerate(domains)
            ]
            steps.append(_step(roles.checker, SOLVE, ALL))
        if name != "parts":
            steps.append(_step(roles.checker, CHECK, (len(steps) - 1,)))
        if name == "parts-check-check":
            steps.append(_step(roles.checker, CHECK, (len(steps) - 1,)))
        return steps
    raise ValueError(f"unknown topology {name!r} (known: {', '.join(TOPOLOGIES)}, single:<id>)")


TOPOLOGIES: tuple[str, ...] = (
    "moa",
    "solve-check",
    "best-of-3",
    "parts",
    "parts-check",
    "parts-check-check",
)
"""The fixed topologies besides ``single:<id>``."""


def topology_workflow(name: str, question: str, roles: Roles | None = None) -> Workflow:
    """The workflow topology ``name`` writes for ``question``."""
    return Workflow(steps=tuple(_steps(name, part_domains(question), roles or Roles())))


def topology(name: str, roles: Roles | None = None) -> FixedPlanSource:
    """Topology ``name`` as a plan source."""
    build: Callable[[PlanRequest], Workflow] = lambda r: topology_workflow(  # noqa: E731
        name, r.question, roles
    )
    return FixedPlanSource(f"topology {name}", build)
