"""The accuracy/cost front of the cost-aware reward (``reward.cost_weight`` = w, unitless: cost in
units of the pool's ``cost_reference``): train the tiny Conductor on the bundled simulated pool once
(warm-up plus ``--base-steps`` GRPO steps at w = 0), continue that model with ``--steps`` GRPO
steps per w, and evaluate each on the held-out (``test`` split) questions: accuracy and cost per
question. Prints a Markdown table and saves accuracy vs cost as a PNG (``--out``).

    .venv/bin/python bench/bench_cost_front.py --out runs/cost-front/front.png \\
        [--weights 0,0.3,1,3] [--base-steps 80] [--steps 50]

Which w changes routing on the bundled pool (reference $0.0008 per question): a right answer keeps
``0.5 x (1 - min(1, w x cost / 0.0008))`` of its bonus over a wrong one. The domain's best worker
answers 90% right for $0.0021 (sim-math), $0.00035 (sim-choice) or $0.00055 (sim-words) per
one-step plan; the generalist 40% for $0.00008. The generalist's expected bonus overtakes the
specialist's from w ≈ 0.22 (math), 0.87 (free-form) and 1.41 (multiple choice): w = 0.3 should
move math alone, w = 1 math and free-form, w = 3 every domain (the cheapest policy that still
answers). The work directory is the folder of ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any


def evaluate(folder: Path, config: Any, problems: list, pool: Any, plans: int, seed: int):
    """Held-out accuracy, cost and routing of the model in ``folder``."""
    from experiment import policy_metrics, run_model

    from conductor_core.train.grpo import load_model

    model, tokenizer = load_model(str(folder), config, "cpu")
    records = run_model(
        model,
        tokenizer,
        problems,
        pool,
        config,
        plans_per_question=plans,
        seed=seed,
        temperature=1.0,
    )
    n = max(1, len(records))
    metrics = policy_metrics(records, pool)
    metrics["accuracy"] = sum(1 for r in records if r.correct) / n
    metrics["cost_per_question"] = sum(r.cost for r in records) / n
    for domain in ("math", "mcq", "freeform"):
        mine = [r for r in records if r.domain == domain and r.plan_ok]
        finals: dict[int, int] = {}
        for r in mine:
            if r.final_worker is not None:
                finals[r.final_worker] = finals.get(r.final_worker, 0) + 1
        top = max(finals, key=finals.get) if finals else -1
        metrics[f"route/{domain}"] = f"{top} ({finals.get(top, 0) / max(1, len(mine)):.0%})"
    return metrics


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| w | held-out accuracy | cost / question ($) | mean reward (graded) "
        "| format errors | mean steps | math -> | mcq -> | freeform -> | train s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['weight']:g} | {r['accuracy']:.3f} | {r['cost_per_question']:.6f} "
            f"| {r['reward_mean']:.3f} | {r['format_error_rate']:.3f} | {r['mean_steps']:.2f} "
            f"| {r['route/math']} | {r['route/mcq']} | {r['route/freeform']} "
            f"| {r['train_s']:.0f} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    xs = [r["cost_per_question"] * 1000 for r in rows]
    ys = [r["accuracy"] for r in rows]
    ax.plot(xs, ys, "o-")
    for r, x, y in zip(rows, xs, ys, strict=True):
        ax.annotate(f"w={r['weight']:g}", (x, y), textcoords="offset points", xytext=(5, 5))
    ax.set_xlabel("cost per held-out question (m$)")
    ax.set_ylabel("held-out accuracy")
    ax.set_ylim(0, 1.05)
    ax.set_xlim(left=0)
    ax.set_title("Cost-aware Conductor (tiny, simulated pool)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="PNG of accuracy vs cost.")
    parser.add_argument("--weights", default="0,0.3,1,3", help="Cost weights w (unitless).")
    parser.add_argument("--base-steps", type=int, default=80, help="Shared GRPO steps at w=0.")
    parser.add_argument("--steps", type=int, default=50, help="GRPO steps per w after the base.")
    parser.add_argument("--warmup-steps", type=int, default=300)
    parser.add_argument("--held-out", type=int, default=60, help="Held-out questions (<=120).")
    parser.add_argument("--eval-plans", type=int, default=2, help="Sampled plans per question.")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--base-model",
        default=None,
        help="Reuse this base model (a previous run's base/model) instead of training one.",
    )
    args = parser.parse_args(argv)

    from experiment import (
        checked_overrides,
        held_out_problems,
        learning_config,
    )

    from conductor_core.errors import ConfigError
    from conductor_core.train.grpo import run_stage

    work = Path(args.out).resolve().parent
    try:  # a bad weight fails here, in one line, before any training
        weights = [float(v) for v in args.weights.split(",") if v.strip()]
        for w in weights:
            checked_overrides([f"reward.cost_weight={w}"], work)
    except (ValueError, ConfigError) as exc:
        print(f"error: --weights: {exc}", file=sys.stderr)
        return 2
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731

    base_dir = work / "base"
    base_cfg = learning_config(
        base_dir, steps=args.base_steps, warmup_steps=args.warmup_steps, seed=args.seed
    )
    started = time.perf_counter()
    if args.base_model:
        base_model = Path(args.base_model)
    else:
        say(
            f"base: warm-up {args.warmup_steps} + {args.base_steps} GRPO steps at w=0 in {base_dir}"
        )
        base_model = run_stage(base_cfg, progress=False, log=say).model_dir
    base_s = time.perf_counter() - started
    say(f"base: {base_s:.0f} s")

    problems, pool = held_out_problems(base_cfg)
    if args.held_out:
        problems = problems[:: max(1, len(problems) // args.held_out)][: args.held_out]

    rows: list[dict[str, Any]] = []
    for w in weights:
        out = work / f"weight-{w:g}"
        cfg = learning_config(
            out,
            steps=args.steps,
            seed=args.seed,
            init_from=str(base_model),
            extra={"warmup": {"enabled": False}, "reward": {"cost_weight": w}},
        )
        started = time.perf_counter()
        say(f"w={w:g}: {args.steps} GRPO steps from the base model in {out}")
        result = run_stage(cfg, progress=False, log=say)
        train_s = time.perf_counter() - started
        metrics = evaluate(result.model_dir, cfg, problems, pool, args.eval_plans, args.seed)
        last = result.history[-1] if result.history else {}
        metrics.update(
            {
                "weight": w,
                "train_s": train_s,
                "train_cost_per_plan": last.get("conductor/cost_per_plan", float("nan")),
                "train_cost_penalty": last.get("conductor/cost_penalty", 0.0),
            }
        )
        rows.append(metrics)
        (work / f"row-{w:g}.json").write_text(json.dumps(metrics), encoding="utf-8")
        say(
            f"w={w:g}: accuracy {metrics['accuracy']:.3f}, "
            f"${metrics['cost_per_question']:.6f}/question, {train_s:.0f} s"
        )

    # Rows of every w run into this folder (parallel runs with --base-model share it).
    rows = sorted(
        (json.loads(p.read_text(encoding="utf-8")) for p in work.glob("row-*.json")),
        key=lambda r: r["weight"],
    )
    table = render(rows)
    start = (
        f"base model {args.base_model}"
        if args.base_model
        else f"warm-up {args.warmup_steps} + {args.base_steps} GRPO steps at w=0 ({base_s:.0f} s)"
    )
    print(
        f"tiny profile, {start}, then {args.steps} steps per w (this run; rows of other runs in "
        f"{work} are included); {len(problems)} held-out questions x {args.eval_plans} plans"
    )
    print(table)
    path = plot(rows, Path(args.out))
    print(f"plot: {path}" if path else "plot: matplotlib not installed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
