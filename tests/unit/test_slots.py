"""Priority-ordered concurrency slots, and the priorities the executor gives its steps."""

from __future__ import annotations

import asyncio

import pytest

from conductor_core.workers.slots import PrioritySlots
from conductor_core.workflow.executor import _chain_lengths
from conductor_core.workflow.model import ALL, AccessMode, Step, Workflow


def test_waiters_are_served_by_priority_then_arrival() -> None:
    async def go() -> list[str]:
        slots = PrioritySlots(1)
        order: list[str] = []
        await slots.acquire()  # hold the only slot

        async def waiter(name: str, prio: float) -> None:
            await slots.acquire(prio)
            order.append(name)
            slots.release()

        tasks = [
            asyncio.create_task(waiter(n, p))
            for n, p in [("low", 0), ("high", 3), ("mid-a", 1), ("mid-b", 1)]
        ]
        await asyncio.sleep(0)
        slots.release()
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(go()) == ["high", "mid-a", "mid-b", "low"]


def test_limit_is_never_exceeded_and_cancelled_waiters_free_nothing() -> None:
    async def go() -> int:
        slots = PrioritySlots(3)
        busy = peak = 0

        async def work(k: int) -> None:
            nonlocal busy, peak
            await slots.acquire(k % 4)
            busy += 1
            peak = max(peak, busy)
            await asyncio.sleep(0)
            busy -= 1
            slots.release()

        victim = asyncio.create_task(work(99))
        victim.cancel()
        await asyncio.gather(*(work(k) for k in range(50)))
        with pytest.raises(asyncio.CancelledError):
            await victim
        # All slots are free again: three acquisitions succeed at once.
        for _ in range(3):
            await asyncio.wait_for(slots.acquire(), 0.1)
        return peak

    assert asyncio.run(go()) == 3


def test_chain_lengths_put_the_critical_path_first() -> None:
    wf = Workflow(
        steps=(
            Step(worker=0, subtask="a"),
            Step(worker=1, subtask="b"),
            Step(worker=2, subtask="c", access=ALL),
            Step(worker=3, subtask="d"),
        )
    )
    assert _chain_lengths(wf) == [2, 2, 1, 1]
    idx = Workflow(
        access_mode=AccessMode.INDEX,
        steps=(
            Step(worker=0, subtask="a"),
            Step(worker=0, subtask="b", access=(0,)),
            Step(worker=0, subtask="c", access=(1,)),
            Step(worker=0, subtask="d", access=(0,)),
        ),
    )
    assert _chain_lengths(idx) == [3, 2, 1, 1]
