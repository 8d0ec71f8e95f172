"""What a Conductor's own samples explore in the workflow world: how often a sampled plan splits
a composite question, how often it also sends every part to the best worker for its domain, how
often a plan checks, and the mean reward of each kind of plan. It says whether GRPO, which learns
only from the plans the policy samples, sees the workflows worth learning at all.

    .venv/bin/python bench/bench_workflow_exploration.py MODEL [--samples 8] [--split validation]

MODEL is a model folder (for example a training run's ``warmup-model`` or ``model``). Each
question of the split is planned ``--samples`` times at temperature 1, unaided (as GRPO samples),
and every plan is run on the workflow pool.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from conductor_core.simulation.workflow_world import step_role, world_question  # noqa: E402
from conductor_core.workers.bundled import (  # noqa: E402
    bundled_workflow_pool_path,
    bundled_workflow_problems_path,
)


async def explore(model: str, samples: int, split: str) -> dict[str, list[float]]:
    """Rewards of the sampled plans, by kind of plan."""
    from conductor_core.policy.factory import load_plan_source
    from conductor_core.solve import solve, solve_options
    from conductor_core.tasks.grading import grade, reward
    from conductor_core.tasks.problem import read_problems
    from conductor_core.train.reward import best_workers
    from conductor_core.workers.config import load_pool
    from conductor_core.workers.pool import WorkerPool

    pool_cfg = load_pool(bundled_workflow_pool_path())
    best = best_workers(pool_cfg)
    problems = [
        p for p in read_problems(bundled_workflow_problems_path()) if p.metadata["split"] == split
    ]
    source = load_plan_source(model, plan_grammar=False)
    pool = WorkerPool(pool_cfg)
    options = solve_options(pool_cfg, max_steps=6)
    kinds: dict[str, list[float]] = defaultdict(list)
    gate = asyncio.Semaphore(16)

    async def one(p, index: int) -> None:
        q = world_question(p.metadata)
        async with gate:
            trace = await solve(p.question, source, pool, options=options, sample_index=index)
        verdict = grade(p, trace.answer) if trace.answer is not None else None
        r = reward(plan_ok=not trace.format_error, verdict=verdict) or 0.0
        shape = "composite" if q.composite else "single"
        kinds[f"{shape}: all"].append(r)
        wf = trace.rounds[0].workflow if trace.rounds else None
        if trace.format_error or wf is None:
            kinds[f"{shape}: format error"].append(r)
            return
        roles = [step_role(s.subtask, q) for s in wf.steps]
        if any(role.checks for role in roles):
            kinds[f"{shape}: checks"].append(r)
        kinds[f"{shape}: {min(len(roles), 3)}{'+' if len(roles) >= 3 else ''} steps"].append(r)
        if q.composite:
            scoped = {role.part: s.worker for role, s in zip(roles, wf.steps, strict=True)}
            if all(k in scoped for k in range(len(q.parts))):
                kinds["composite: split"].append(r)
                if all(scoped[k] == best[part.domain] for k, part in enumerate(q.parts)):
                    kinds["composite: split, every part to its best worker"].append(r)

    print(
        f"exploring: {len(problems)} questions x {samples} sampled plans, each run on the pool",
        file=sys.stderr,
        flush=True,
    )
    await asyncio.gather(*(one(p, i) for p in problems for i in range(samples)))
    await pool.aclose()
    await source.aclose()
    return kinds


def main(argv: list[str] | None = None) -> int:
    """Print, per kind of sampled plan, its share of the samples and its mean reward."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--samples", type=int, default=8)
    ap.add_argument("--split", default="validation", choices=("train", "validation", "test"))
    args = ap.parse_args(argv)
    kinds = asyncio.run(explore(args.model, args.samples, args.split))
    print("| plans | share of the shape's samples | mean reward |")
    print("|---|---|---|")
    for name in sorted(kinds):
        shape = name.split(":")[0]
        total = len(kinds[f"{shape}: all"])
        values = kinds[name]
        mean = sum(values) / len(values)
        print(f"| {name} | {len(values) / total:.3f} ({len(values)}) | {mean:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
