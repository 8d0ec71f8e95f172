"""Learning, shown: train a tiny Conductor on the simulated pool (CPU, minutes) and print the
before/after table on held-out questions, plus a reward-curve PNG (also logged to MLflow).

    .venv/bin/python bench/learning_demo.py --out runs/learning-demo [--steps 150] [--seed 0]

Columns: the random initial model, after the format warm-up, after GRPO. Rows: mean reward,
format-error rate, best-worker share (the answering step goes to the domain's best worker).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="runs/learning-demo", help="Output folder.")
    parser.add_argument("--steps", type=int, default=150, help="GRPO steps.")
    parser.add_argument("--warmup-steps", type=int, default=300, help="Format warm-up steps.")
    parser.add_argument("--layers", type=int, default=2, help="Tiny model layers.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-plans", type=int, default=2, help="Plans per held-out question.")
    parser.add_argument("--mlflow", action="store_true", help="Track in MLflow (SQLite).")
    parser.add_argument(
        "--all-stages",
        action="store_true",
        help="Also fine-tune the adaptive and recursive stages and print their before/after.",
    )
    parser.add_argument(
        "--stage-steps",
        type=int,
        default=None,
        help="Adaptive/recursive steps (default: the tiny profile's, 80 and 40).",
    )
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        help="Override a config field of the base run: --set learning_rate=2e-4",
    )
    args = parser.parse_args(argv)
    from experiment import learning_experiment, render_table

    from conductor_core.configfiles import parse_sets

    started = time.perf_counter()
    result = learning_experiment(
        args.out,
        steps=args.steps,
        warmup_steps=args.warmup_steps,
        layers=args.layers,
        seed=args.seed,
        eval_plans=args.eval_plans,
        track=args.mlflow,
        progress=True,
        extra=parse_sets(args.sets) or None,
    )
    print(render_table(result["table"]))
    print(f"reward curve: {result.get('plot') or '(matplotlib missing)'}")
    if args.all_stages:
        from experiment import stage_experiment

        model = Path(args.out) / "model"
        for stage in ("adaptive", "recursive"):
            got = stage_experiment(
                stage,
                Path(args.out) / stage,
                model,
                steps=args.stage_steps,
                seed=args.seed,
            )
            result[stage] = got
            keys = (
                ("out_of_subset_rate", "reward_mean", "best_worker_share")
                if stage == "adaptive"
                else (
                    "keep_when_right",
                    "keep_when_wrong",
                    "keep_discrimination",
                    "round2_format_error_rate",
                    "first_reward",
                    "final_reward",
                )
            )
            columns = [c for c in ("before", "warm-up", "after") if c in got]
            steps = got["summary"]["steps"]
            print(f"\n{stage} stage ({steps} steps), held-out {' -> '.join(columns)}:")
            for key in keys:
                print(f"  {key}: " + " -> ".join(f"{got[c].get(key, 0):.3f}" for c in columns))
    print(f"total time: {time.perf_counter() - started:.0f}s")
    Path(args.out, "learning.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
