"""The tiny recursive stage across training seeds: fine-tune one base model (the learning test's,
trained here unless ``--base`` names its folder) with the recursive stage once per seed and print
each run's held-out keep figures.

    .venv/bin/python bench/bench_recursive_seeds.py [--seeds 5] [--base DIR] [--out runs/recursive]

Target: a teacher-forced keep discrimination (P(keep | right) - P(keep | wrong) of the held-out
round-1 answers) of at least 0.05 for every seed, the learning test's margin. About 4 minutes per
seed alone on 2 CPU cores (the stage and two held-out evaluations), 4 more for the base model.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: bench.learning

TARGET = 0.05  # the learning test's keep discrimination


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="Training seeds 0..N-1.")
    parser.add_argument("--steps", type=int, default=40, help="Recursive steps (the test's).")
    parser.add_argument("--base", help="A trained base run's folder (default: train one).")
    parser.add_argument("--out", default="runs/recursive")
    parser.add_argument(
        "--set",
        dest="sets",
        action="append",
        default=[],
        help="Override a config field of every recursive run: --set loss_type=dapo",
    )
    args = parser.parse_args(argv)
    from bench.learning import (
        checked_overrides,
        learning_experiment,
        stage_experiment,
        target_summary,
    )
    from conductor_core.errors import ConfigError

    out = Path(args.out)
    base = Path(args.base) if args.base else out / "base"
    try:  # a bad --set fails here, in one line, before any training
        extra = checked_overrides(args.sets, out, stage="recursive", init_from=str(base / "model"))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.base and not (base / "model").is_dir():
        print(f"error: --base {base}: no trained model in {base / 'model'}", file=sys.stderr)
        return 2
    if not (base / "model").is_dir():
        print(f"training the base model in {base} (progress on stderr)", file=sys.stderr)
        with contextlib.redirect_stdout(sys.stderr):
            learning_experiment(base, steps=130, warmup_steps=300, seed=0, progress=True)
    print(
        "| seed | keep P after right | after wrong | discrimination | keep right (sampled) "
        "| keep wrong | round-2 format errors | wrong first answers | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    rows = []
    for seed in range(args.seeds):
        started = time.perf_counter()
        with contextlib.redirect_stdout(sys.stderr):  # the trainer's per-step logs: progress
            result = stage_experiment(
                "recursive",
                out / f"seed-{seed}",
                base / "model",
                steps=args.steps,
                seed=seed,
                held_out=None,
                extra=extra,
            )
        after = result["after"]
        row = {"seed": seed, **after, "seconds": round(time.perf_counter() - started)}
        rows.append(row)
        print(
            f"| {seed} | {after['keep_prob_when_right']:.3f} | {after['keep_prob_when_wrong']:.3f} "
            f"| {after['keep_prob_discrimination']:.3f} | {after['keep_when_right']:.3f} "
            f"| {after['keep_when_wrong']:.3f} | {after['round2_format_error_rate']:.3f} "
            f"| {int(after['wrong_first'])} | {row['seconds']} |",
            flush=True,
        )
    values = [r["keep_prob_discrimination"] for r in rows]
    print("\n" + target_summary("keep discrimination", values, TARGET, "seeds"))
    out.mkdir(parents=True, exist_ok=True)
    (out / "recursive.json").write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0 if min(values) >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
