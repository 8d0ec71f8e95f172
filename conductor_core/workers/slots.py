"""A concurrency limit whose waiters are served by priority (then first come, first served)."""

from __future__ import annotations

import asyncio
import heapq
import itertools


class PrioritySlots:
    """Like ``asyncio.Semaphore(limit)``, but a waiter with a higher ``priority`` goes first.

    The executor gives each call the length of the longest chain of steps that still depends on
    it, so work on the critical path is never stuck behind work that nothing waits for.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self._free = limit
        self._waiters: list[tuple[float, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()

    async def acquire(self, priority: float = 0.0) -> None:
        """Wait for a slot."""
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (-priority, next(self._seq), fut)
        heapq.heappush(self._waiters, entry)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # we were handed a slot but will not use it
            else:
                self._waiters.remove(entry)
                heapq.heapify(self._waiters)
            raise

    def release(self) -> None:
        """Give a slot back; the highest-priority waiter (if any) gets it."""
        while self._waiters:
            _, _, fut = heapq.heappop(self._waiters)
            if not fut.done():
                fut.set_result(None)
                return
        self._free += 1
