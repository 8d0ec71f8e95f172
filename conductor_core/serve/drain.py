"""What one gateway has in flight (the workflows running, and background tasks such as trace
uploads and a shared Conductor check) and the drain at shutdown: let them finish for a while,
then cancel the rest."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

__all__ = ["InFlight"]

logger = logging.getLogger("conductor.gateway")


class InFlight:
    """The tasks of one gateway that a shutdown waits for.

    ``draining`` turns true when :meth:`drain` begins (readiness reads it; tests set it).
    """

    def __init__(self) -> None:
        self.active: set[asyncio.Task[Any]] = set()
        self.background: set[asyncio.Task[Any]] = set()
        self.draining = False

    def track(self, task: asyncio.Task[Any]) -> None:
        """Count ``task`` (a workflow) as in flight until it is done."""
        self.active.add(task)
        task.add_done_callback(self.active.discard)

    def keep(self, task: asyncio.Task[Any]) -> None:
        """Keep a background ``task`` until it is done (the drain waits for it too)."""
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        """Run ``coro`` as a background task kept by :meth:`keep`."""
        task = asyncio.create_task(coro)
        self.keep(task)
        return task

    @property
    def running(self) -> int:
        """Workflows running now."""
        return len(self.active)

    async def drain(self, timeout_s: float) -> int:
        """Let the workflows in flight (and pending background tasks) finish for up to
        ``timeout_s``; cancel the rest. Returns how many were cancelled."""
        self.draining = True
        waiting = self.active | self.background
        if not waiting:
            return 0
        logger.info("draining %d workflow(s)", len(self.active))
        _, pending = await asyncio.wait(waiting, timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            logger.warning("cancelled %d workflow(s) still running after the drain", len(pending))
        return len(pending)
