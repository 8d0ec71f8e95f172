"""A plan source that returns text already written: the completion a trainer sampled, or a plan
given by hand. The training reward scores a completion by running
:func:`~conductor_core.solve.solve` with this source, so a plan is executed the same way in
training, evaluation and serving."""

from __future__ import annotations

from conductor_core.policy.base import PlanRequest, PlanResult, parse_result


class TextPlanSource:
    """Answers every plan request with ``text``, parsed for that request (its offered workers,
    step limit, access mode, and empty lists allowed in a recursion round)."""

    def __init__(self, text: str) -> None:
        self.text = text

    async def plan(self, request: PlanRequest) -> PlanResult:
        """``text`` parsed for ``request``."""
        return parse_result(request, self.text)

    async def aclose(self) -> None:
        """Nothing to release."""
        return None
