"""Executor benchmark: per-step overhead, and a GRPO-sized batch against its lower bound and
against paper-style execution (steps strictly in order, 8 plans at a time).

    python bench/bench_executor.py [--plans 256] [--latency-ms 50] [--concurrency 16]

Prints figures; targets: overhead < 1 ms per step; batch within 1.25x of its lower bound and at
least 5x faster than paper-style execution.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import time

from conductor_core.workers.config import PoolConfig, SimulationProfile, WorkerConfig
from conductor_core.workers.pool import WorkerPool
from conductor_core.workflow.executor import execute
from conductor_core.workflow.model import ALL, Step, Workflow
from conductor_core.workflow.prompts import worker_message


def make_pool(n_workers: int, latency_ms: float, concurrency: int) -> PoolConfig:
    """Simulated workers with a fixed latency and no jitter (so the lower bound is exact), knowing
    no problems."""
    workers = [
        WorkerConfig(
            name=f"bench-{i}",
            provider="simulated",
            model=f"bench-{i}",
            concurrency=concurrency,
            simulation=SimulationProfile(latency_ms=latency_ms, seed=i, problems=[]),
        )
        for i in range(n_workers)
    ]
    return PoolConfig(workers=workers)


def make_plans(n: int, n_workers: int, seed: int = 0) -> list[Workflow]:
    """About 3 steps per plan (2-4), binary access, a mix of parallel and chained steps."""
    rng = random.Random(seed)
    plans = []
    for _ in range(n):
        k = rng.choice([2, 3, 3, 4])
        steps = [
            Step(
                worker=rng.randrange(n_workers),
                subtask=f"subtask {i}",
                access=ALL if i > 0 and rng.random() < 0.6 else (),
            )
            for i in range(k)
        ]
        plans.append(Workflow(steps=tuple(steps)))
    return plans


def lower_bound(plans: list[Workflow], latency_s: float, concurrency: int, n_workers: int) -> float:
    """max(longest dependency chain, busiest worker's calls / its concurrency) x latency."""
    chain = 0
    calls = [0] * n_workers
    for wf in plans:
        depth: list[int] = []
        for i, deps in enumerate(wf.dependencies()):
            depth.append(1 + max((depth[j] for j in deps), default=0))
            calls[wf.steps[i].worker] += 1
        chain = max(chain, max(depth))
    waves = max(math.ceil(c / concurrency) for c in calls)
    return max(chain, waves) * latency_s


async def run_concurrent(plans, pool, question) -> float:
    t0 = time.perf_counter()
    await asyncio.gather(
        *(execute(wf, question, pool, sample_index=k) for k, wf in enumerate(plans))
    )
    return time.perf_counter() - t0


async def run_paper_style(plans, pool, question, plans_at_once: int = 8) -> float:
    """Steps strictly in order within a plan; ``plans_at_once`` plans in flight."""
    sem = asyncio.Semaphore(plans_at_once)

    async def one(k: int, wf: Workflow) -> None:
        async with sem:
            responses: list[str] = []
            for i, step in enumerate(wf.steps):
                shown = [(j, wf.steps[j].subtask, responses[j]) for j in step.visible(i)]
                msg = worker_message(question, shown, step.subtask)
                res = await pool.call(
                    step.worker, [{"role": "user", "content": msg}], sample_index=k
                )
                responses.append(res.text or "")

    t0 = time.perf_counter()
    await asyncio.gather(*(one(k, wf) for k, wf in enumerate(plans)))
    return time.perf_counter() - t0


async def overhead(n_plans: int, n_workers: int) -> tuple[float, int]:
    """Wall time per executed step with zero-latency simulated workers."""
    config = make_pool(n_workers, 0.0, 10_000)
    plans = make_plans(n_plans, n_workers, seed=1)
    steps = sum(len(p) for p in plans)
    async with WorkerPool(config) as pool:
        await run_concurrent(plans[:50], pool, "warm-up question")
        wall = await run_concurrent(plans, pool, "What is the capital of France?")
    return wall / steps, steps


async def batch(n_plans: int, n_workers: int, latency_ms: float, concurrency: int):
    config = make_pool(n_workers, latency_ms, concurrency)
    plans = make_plans(n_plans, n_workers)
    bound = lower_bound(plans, latency_ms / 1000, concurrency, n_workers)
    async with WorkerPool(config) as pool:
        ours = await run_concurrent(plans, pool, "Batch question?")
        paper = await run_paper_style(plans, pool, "Batch question?")
    return bound, ours, paper, sum(len(p) for p in plans)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plans", type=int, default=256)
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--latency-ms", type=float, default=50.0)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--overhead-plans", type=int, default=2000)
    args = ap.parse_args()

    per_step, steps = asyncio.run(overhead(args.overhead_plans, args.workers))
    bound, ours, paper, calls = asyncio.run(
        batch(args.plans, args.workers, args.latency_ms, args.concurrency)
    )
    print("== executor benchmark ==")
    print(
        f"(a) overhead per step, zero-latency simulated workers ({steps} steps): "
        f"{per_step * 1000:.3f} ms   [target < 1 ms]  {'OK' if per_step < 1e-3 else 'MISS'}"
    )
    print(
        f"(b) batch of {args.plans} plans ({calls} calls), latency {args.latency_ms:.0f} ms, "
        f"{args.workers} workers x concurrency {args.concurrency}"
    )
    print(f"    lower bound (critical path, per-worker throughput): {bound:.3f} s")
    print(
        f"    this executor:                                      {ours:.3f} s "
        f"= {ours / bound:.2f}x bound   [target <= 1.25x]  "
        f"{'OK' if ours <= 1.25 * bound else 'MISS'}"
    )
    print(
        f"    paper-style (in order, 8 plans at a time):          {paper:.3f} s "
        f"= {paper / ours:.1f}x slower   [target >= 5x]  {'OK' if paper >= 5 * ours else 'MISS'}"
    )


if __name__ == "__main__":
    main()
