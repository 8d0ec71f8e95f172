"""Pre-planning: ask a batch-capable plan source for many first-round plans in one call, then
serve them to the solve loop one by one (so a whole evaluation shard is planned in one batch)."""

from __future__ import annotations

from collections.abc import Sequence

from conductor_core.policy.base import PlanRequest, PlanResult, PlanSource


def supports_batching(source: object) -> bool:
    """True when ``source`` has an async ``plan_many(requests)``."""
    return callable(getattr(source, "plan_many", None))


class PrePlanned:
    """Wraps a plan source that has ``plan_many``. :meth:`prefetch` plans a list of requests in
    one batch; :meth:`plan` returns a prefetched result when the same request comes (each once),
    else asks the wrapped source."""

    def __init__(self, source: PlanSource, batch_size: int = 1024) -> None:
        if not supports_batching(source):
            raise TypeError(f"{type(source).__name__} has no plan_many")
        self.source = source
        self.batch_size = batch_size
        self._ready: dict[tuple, PlanResult] = {}

    @staticmethod
    def _key(request: PlanRequest) -> tuple:
        return (
            request.question,
            request.sample_index,
            request.workers,
            request.max_steps,
            request.access_mode,
            request.descriptors,
            request.previous,
        )

    async def prefetch(self, requests: Sequence[PlanRequest]) -> int:
        """Plan ``requests`` in batches of ``batch_size``; returns how many were planned."""
        todo = [r for r in requests if self._key(r) not in self._ready]
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            for request, result in zip(chunk, await self.source.plan_many(chunk), strict=True):
                self._ready[self._key(request)] = result
        return len(todo)

    async def plan(self, request: PlanRequest) -> PlanResult:
        """A prefetched plan if there is one, else a fresh one."""
        ready = self._ready.pop(self._key(request), None)
        return ready if ready is not None else await self.source.plan(request)

    async def aclose(self) -> None:
        """Close the wrapped source."""
        await self.source.aclose()
