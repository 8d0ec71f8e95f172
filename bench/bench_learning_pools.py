"""Learning that does not depend on the bundled pool: train the tiny Conductor (the learning
test's recipe: the tiny profile, whose base stage covers every worker in each question's group) on
five simulated pools drawn at random (the best worker of each domain at random ids, skills varied;
``experiment.random_pool``) and print each one's held-out figures.

    .venv/bin/python bench/bench_learning_pools.py [--pools 5] [--seeds 1] [--out runs/pools]

Target: a held-out best-worker share of at least 0.85 on every pool and training seed. About
3-7 minutes per run alone on 2 CPU cores, by machine (warm-up, GRPO and three held-out
evaluations); runs in parallel on the same cores slow each other down far more than twofold.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

TARGET = 0.85  # held-out best-worker share every run should reach


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pools", type=int, default=5, help="Random pools (seeds 0..N-1).")
    parser.add_argument("--first", type=int, default=0, help="First pool seed.")
    parser.add_argument("--steps", type=int, default=130, help="GRPO steps (the learning test's).")
    parser.add_argument("--warmup-steps", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0, help="First training seed.")
    parser.add_argument(
        "--seeds", type=int, default=1, help="Training seeds per pool (seed .. seed+N-1)."
    )
    parser.add_argument(
        "--bundled", action="store_true", help="Also train on the bundled pool, for reference."
    )
    parser.add_argument("--out", default="runs/pools")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        help="Override a config field of every run: --set beta=0.04",
    )
    args = parser.parse_args(argv)
    from experiment import (
        checked_overrides,
        learning_experiment,
        target_summary,
    )

    from conductor_core.errors import ConfigError
    from conductor_core.train.reward import best_workers
    from conductor_core.workers.bundled import bundled_train_pool_path
    from conductor_core.workers.config import load_pool

    try:  # a bad --set fails here, in one line, before any training
        extra = checked_overrides(args.sets, args.out)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    rows = []
    print(
        "| pool | seed | best workers | warm-up share | GRPO share | warm-up reward "
        "| GRPO reward | format errors | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    pools: list[int | None] = [None] if args.bundled else []
    pools += range(args.first, args.first + args.pools)
    runs = [(pool, seed) for pool in pools for seed in range(args.seed, args.seed + args.seeds)]
    for pool_seed, seed in runs:
        name = "bundled" if pool_seed is None else f"pool-{pool_seed}"
        out = Path(args.out) / name / f"seed-{seed}"
        print(
            f"{name}, seed {seed}: training in {out} (progress on stderr)",
            file=sys.stderr,
        )
        started = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # the trainer's per-step logs: progress
            result = learning_experiment(
                out,
                steps=args.steps,
                warmup_steps=args.warmup_steps,
                seed=seed,
                pool_seed=pool_seed,
                extra=extra,
                progress=True,
            )
        seconds = time.perf_counter() - started
        warm, trained = result["table"]["warm-up"], result["table"]["GRPO"]
        pool_file = bundled_train_pool_path() if pool_seed is None else out / "pool.yaml"
        best = best_workers(load_pool(pool_file))
        row = {
            "pool": "bundled" if pool_seed is None else pool_seed,
            "seed": seed,
            "best": best,
            "warmup_best_worker_share": warm["best_worker_share"],
            "best_worker_share": trained["best_worker_share"],
            "warmup_reward_mean": warm["reward_mean"],
            "reward_mean": trained["reward_mean"],
            "format_error_rate": trained["format_error_rate"],
            "seconds": round(seconds),
        }
        rows.append(row)
        print(
            f"| {row['pool']} | {seed} | {best} | {row['warmup_best_worker_share']:.3f} | "
            f"{row['best_worker_share']:.3f} | {row['warmup_reward_mean']:.3f} | "
            f"{row['reward_mean']:.3f} | "
            f"{row['format_error_rate']:.3f} | {row['seconds']} |",
            flush=True,
        )
    shares = [r["best_worker_share"] for r in rows]
    print("\n" + target_summary("best-worker share", shares, TARGET, "runs"))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "pools.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
