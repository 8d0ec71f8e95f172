"""Fixed plan sources: the plan is a set function of the request, nothing is learned.

The baselines of evaluation (a single worker, mixture-of-agents, self-reflection, a router's
pick) and the difficulty filter of curation (a reference worker alone) are fixed plans; running
them as a plan source puts them through the solve loop like any Conductor, with the same budgets,
traces and accounting.
"""

from __future__ import annotations

from collections.abc import Callable

from conductor_core.policy.base import PlanRequest, PlanResult
from conductor_core.workflow.model import Step, Workflow


class FixedPlanSource:
    """Writes ``build(request)`` as the plan (its raw text labelled ``# <label>``): the same
    workflow for every question unless ``build`` reads the request. In a recursion round it keeps
    the previous answer (a fixed plan never refines)."""

    def __init__(self, label: str, build: Callable[[PlanRequest], Workflow]) -> None:
        self.label = label
        self.build = build

    async def plan(self, request: PlanRequest) -> PlanResult:
        """The fixed workflow for ``request`` (an empty one, keep, in a recursion round)."""
        if request.previous is not None:
            return PlanResult(
                raw=f"# {self.label}: keep\n" + Workflow().render(), workflow=Workflow()
            )
        wf = self.build(request)
        return PlanResult(raw=f"# {self.label}\n{wf.render()}", workflow=wf)

    async def aclose(self) -> None:
        """Nothing to release."""
        return None


def one_step(worker: int, subtask: str, label: str | None = None) -> FixedPlanSource:
    """The one-step plan: worker ``worker`` (a pool id) does ``subtask`` alone."""
    step = Step(worker=worker, subtask=subtask, access=())
    return FixedPlanSource(label or f"single worker {worker}", lambda _r: Workflow(steps=(step,)))
