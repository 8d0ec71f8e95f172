"""Evaluation throughput: a shard of 500 problems on the simulated pool with realistic latency,
against the lower bound that the pool's concurrency limits allow.

    python bench/bench_eval.py [--problems 500] [--latency-ms 300] [--jitter-ms 100]

The lower bound is computed from the calls actually made: max(busiest worker's summed call
latency / its concurrency, the longest chain of dependent call latencies of any problem).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from conductor_core.evaluate.aggregate import aggregate
from conductor_core.evaluate.methods import PlanSourceMethod
from conductor_core.evaluate.runner import RunConfig, run_eval
from conductor_core.policy.scripted import ScriptedPlanSource
from conductor_core.solve import SolveOptions
from conductor_core.tasks.problem import Problem, write_jsonl
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool
from conductor_core.workers.pool import WorkerPool


def make_problems(n: int, seed: int = 0) -> list[Problem]:
    """Synthetic math and multiple-choice problems the simulated workers can answer."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        a, b = rng.randint(10, 999), rng.randint(10, 999)
        if i % 2:
            out.append(
                Problem(
                    id=f"b{i:04d}",
                    source="bench-math",
                    domain="math",
                    question=f"Compute {a} + {b}. (item {i})",
                    reference=str(a + b),
                )
            )
        else:
            letters = "ABCD"
            out.append(
                Problem(
                    id=f"b{i:04d}",
                    source="bench-mcq",
                    domain="mcq",
                    question=f"Which option equals {a} + {b}? (item {i})\n"
                    + "\n".join(f"{x}) {a + b + k}" for k, x in enumerate(letters)),
                    choices=[str(a + b + k) for k in range(4)],
                    reference="A",
                )
            )
    return out


def lower_bound(records, concurrency: dict[int, int], latency_s: float) -> float:
    """max(busiest worker's calls x mean latency / its concurrency, longest dependent chain x mean
    latency). Uses the mean service time: call latencies in traces include time spent queueing
    for a worker's concurrency slot, which a bound must not count."""
    calls: dict[int, int] = defaultdict(int)
    chain = 0
    for r in records:
        for rnd in r.trace["rounds"]:
            depth: dict[int, int] = {}
            for s in (rnd.get("workflow") or {}).get("steps", []):
                calls[s["worker"]] += 1
                depth[s["index"]] = 1 + max((depth[j] for j in s["visible"]), default=0)
            chain = max(chain, max(depth.values(), default=0))
    return latency_s * max(chain, *(calls[w] / concurrency[w] for w in calls))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", type=int, default=500)
    ap.add_argument("--latency-ms", type=float, default=300.0)
    ap.add_argument("--jitter-ms", type=float, default=100.0)
    ap.add_argument("--in-flight", type=int, default=256)
    args = ap.parse_args()

    config = load_pool(bundled_pool_path())
    for w in config.workers:
        w.simulation.latency_ms = args.latency_ms
        w.simulation.latency_jitter_ms = args.jitter_ms
    problems = make_problems(args.problems)
    method = PlanSourceMethod(
        "conductor:scripted", ScriptedPlanSource(), SolveOptions(answer_fallback=True)
    )

    async def go(out: Path, known: Path):
        write_jsonl(problems, known)  # the problems the simulated workers know
        pool_config = config.with_simulation_problems([known], replace=True)
        async with WorkerPool(pool_config) as pool:
            t0 = time.perf_counter()
            recs = await run_eval(
                problems, [method], pool, out, RunConfig(concurrency=args.in_flight, progress=False)
            )
            return recs, time.perf_counter() - t0

    with tempfile.TemporaryDirectory() as tmp:
        records, wall = asyncio.run(go(Path(tmp) / "records.jsonl", Path(tmp) / "problems.jsonl"))
    conc = {i: w.concurrency for i, w in enumerate(config.workers)}
    bound = lower_bound(records, conc, args.latency_ms / 1000)
    s = aggregate(records).get("conductor:scripted")
    print("== evaluation benchmark ==")
    print(
        f"shard: {len(records)} problems, {s.calls_per_question:.2f} calls/problem, latency "
        f"{args.latency_ms:.0f}±{args.jitter_ms:.0f} ms, concurrency "
        f"{[w.concurrency for w in config.workers]}, {args.in_flight} problems in flight"
    )
    print(
        f"wall {wall:.2f} s = {len(records) / wall:.1f} problems/s; lower bound {bound:.2f} s = "
        f"{len(records) / bound:.1f} problems/s; ratio {wall / bound:.2f}x"
    )
    print(
        f"accuracy {100 * s.accuracy:.1f}% ± {100 * s.stderr:.1f}, "
        f"cost/problem ${s.cost_per_question:.5f}"
    )


if __name__ == "__main__":
    main()
