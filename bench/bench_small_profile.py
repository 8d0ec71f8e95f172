"""The `small` profile's learning figures across independent seeds (issue 42 §3): train the
stages as the pipeline chains them (base -> adaptive -> recursive, each from the one before) once
per seed, then evaluate the last model on the generator's held-out questions and on the 14 demo
questions (10 repeats), under the plan grammar (as deployed) and unaided (sampled at
temperature 1.0, as GRPO samples, and greedily), beside the zero-shot model and the best single
worker.

    .venv/bin/python bench/bench_small_profile.py [--seeds 3] [--out runs/small] \\
        [--stages base,adaptive,recursive] [--steps base=16] [--set FIELD=VALUE ...]
    .venv/bin/python bench/bench_small_profile.py --pipeline [--only SEED] [--set PARAM=VALUE ...]

With ``--pipeline`` each seed is the training pipeline itself, run as a user runs it, and its
wall time is in ``seed-N/pipeline.log``; ``--only`` runs one seed, so seeds can run side by side.

Each seed's stage folders (or pipeline run) are reused when their model exists, so a killed bench
picks up where it stopped. Prints one row per seed as it finishes (its seconds: the pipeline's wall
with ``--pipeline``), then mean ± s.e. across seeds and the goals: the trained model beats the best
single worker by at least 15 points on held-out questions and 10 on the demo questions, with at
most 2% unaided format errors. On 2 CPU cores a GRPO step of the profile takes 60-90 s
(docs/notes/training.md, "Sized for the pipeline"): `--steps` shortens the stages for a quicker,
smaller figure.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POOL = ROOT / "conductor_core" / "resources" / "train" / "pool.yaml"
HELD_OUT = ROOT / "conductor_core" / "resources" / "train" / "problems.jsonl"
STAGES = ("base", "adaptive", "recursive")
HELD_OUT_MARGIN = 0.15
DEMO_MARGIN = 0.10
MAX_UNAIDED_FORMAT_ERRORS = 0.02

EVALS: dict[str, list[str]] = {
    "held-out": ["--benchmark", str(HELD_OUT), "--split", "test"],
    "demo": ["--benchmark", "demo", "--repeats", "10"],
}
"""The two question sets, as `conductor eval run` arguments."""
DECODINGS = (("grammar", True, None), ("unaided", False, None), ("unaided-greedy", False, 0.0))
"""How each model is asked: (evaluation folder suffix, plan grammar, temperature; None: 1.0)."""
WALL = "bench: pipeline wall "
"""How ``pipeline.log`` records a finished pipeline's seconds."""


class CommandFailed(Exception):
    """A `conductor` command of the bench failed (its own output said why)."""


def conductor(*args: str, log: Path | None = None) -> None:
    """Run one `conductor` command, its output streamed to stderr as progress (and appended to
    ``log`` when given)."""
    cmd = [sys.executable, "-m", "conductor_core", *args]
    print("$ conductor " + " ".join(args), file=sys.stderr, flush=True)
    with (
        log.open("a") if log else contextlib.nullcontext() as sink,
        subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT
        ) as done,
    ):
        assert done.stdout is not None
        for line in done.stdout:
            sys.stderr.write(line)
            if sink is not None:
                sink.write(line)
    if done.returncode:
        raise CommandFailed(f"conductor {args[0]} {args[1]} exited {done.returncode} (above)")


def evaluate(
    model: str,
    name: str,
    out: Path,
    *,
    grammar: bool,
    zero_shot: bool = False,
    temperature: float | None = None,
) -> dict:
    """The summary row of ``model`` on question set ``name``, sampled at ``temperature`` (None:
    the Conductor's default, 1.0); reuses a finished evaluation in ``out``. A ``zero_shot``
    model (no recorded prompt style or plan length of its own) is asked as the trained model is:
    with the profile's prompt style and completion length."""
    summary = out / "summary.json"
    if not summary.is_file():
        args = ["eval", "run", *EVALS[name], "--pool", str(POOL), "--conductor", model]
        args += profile_asking() if zero_shot else []
        args += ["--plan-grammar" if grammar else "--no-plan-grammar", "--no-progress"]
        args += [] if temperature is None else ["--conductor-temperature", str(temperature)]
        conductor(*args, "--out", str(out))
    rows = json.loads(summary.read_text())["rows"]
    mine = next(r for r in rows if r["benchmark"] == "average" and r["method"].startswith("cond"))
    return {
        "accuracy": mine["accuracy"],
        "format_errors": mine["format_error_rate"],
        "calls": mine["calls_per_question"],
    }


def best_single(name: str, out: Path) -> float:
    """The best single worker's accuracy on question set ``name`` (the baselines alone, no
    Conductor; reused from ``out``)."""
    summary = out / "summary.json"
    if not summary.is_file():
        args = ["eval", "run", *EVALS[name], "--pool", str(POOL), "--no-conductor"]
        conductor(*args, "--baselines", "single", "--no-progress", "--out", str(out))
    rows = json.loads(summary.read_text())["rows"]
    return max(
        r["accuracy"]
        for r in rows
        if r["benchmark"] == "average" and r["method"].startswith("single")
    )


def train(seed_dir: Path, stages: list[str], steps: dict[str, int], sets: list[str]) -> str:
    """Train ``stages`` in order for one seed (each from the one before); the last model."""
    init: str | None = None
    for stage in stages:
        out = seed_dir / stage
        if not (out / "model").is_dir():
            args = ["train", "--stage", stage, "--profile", "small", "--out", str(out)]
            args += ["--set", f"seed={seed_dir.name.removeprefix('seed-')}", "--no-progress"]
            args += ["--init-from", init] if init else []
            args += ["--steps", str(steps[stage])] if stage in steps else []
            for item in sets:
                args += ["--set", item]
            conductor(*args)
        init = str(out / "model")
    assert init is not None
    return init


def train_pipeline(seed_dir: Path, sets: list[str]) -> str:
    """One seed through the training pipeline as a user runs it (`conductor pipeline run
    training --local --set profile=small`: curation, the three stages, the held-out comparison,
    registration) under ``seed_dir/runs``; a killed run is resumed. Returns the final model's
    folder, read from the run's summary (``seed_dir/pipeline.log`` keeps its output)."""
    log = seed_dir / "pipeline.log"
    weights = weights_from_log(log)
    if weights is None:
        seed = seed_dir.name.removeprefix("seed-")
        root = seed_dir / "runs"
        args = ["pipeline", "run", "training", "--local", "--root", str(root)]
        args += ["--set", "profile=small", "--set", f"seed={seed}"]
        for item in sets:
            args += ["--set", item]
        seed_dir.mkdir(parents=True, exist_ok=True)
        started = time.perf_counter()
        conductor(*args, *(["--resume"] if (root / "local-runs").is_dir() else []), log=log)
        with log.open("a") as sink:
            sink.write(f"{WALL}{time.perf_counter() - started:.0f} s\n")
        weights = weights_from_log(log)
        if weights is None:
            raise CommandFailed(f"no model weights in the summary of {log}")
    return weights


def pipeline_wall(seed_dir: Path) -> float:
    """Seconds the seed's pipeline run took (its last finished run in ``pipeline.log``)."""
    walls = [
        float(line.removeprefix(WALL).split()[0])
        for line in (seed_dir / "pipeline.log").read_text().splitlines()
        if line.startswith(WALL)
    ]
    return walls[-1] if walls else float("nan")


def train_seed(
    args: argparse.Namespace, seed_dir: Path, stages: list[str], steps: dict[str, int]
) -> str:
    """One seed's final model: through the pipeline (``--pipeline``) or the chained stages."""
    if args.pipeline:
        return train_pipeline(seed_dir, args.sets)
    return train(seed_dir, stages, steps, args.sets)


def weights_from_log(log: Path) -> str | None:
    """The model folder the last finished run in ``log`` printed (its summary's `model weights`
    row), or None."""
    if not log.is_file():
        return None
    found = None
    for line in log.read_text().splitlines():
        label, _, rest = line.partition("model weights ")
        folder = rest.strip()
        if not label and folder and Path(folder).is_dir():  # the summary's `what  where` row
            found = folder
    return found


def profile_asking() -> list[str]:
    """How the small profile asks its model, as `conductor eval run` options (a trained model
    records both; the bare model's evaluation would otherwise take the few-shot prompt, ~15x
    longer, and 1024 tokens a plan, in which it rambles)."""
    from conductor_core.train.config import build_config

    config = build_config({}, stage="base", profile="small")
    style, tokens = config.data.prompt_style, config.generation.max_completion_length
    return ["--prompt-style", str(style), "--conductor-max-tokens", str(tokens)]


def figures(model: str, out: Path, *, zero_shot: bool = False) -> dict[str, float]:
    """Held-out and demo figures of one model: under the grammar, and unaided sampled at 1.0 and
    greedily."""
    row: dict[str, float] = {}
    for name in EVALS:
        grammar, unaided, greedy = (
            evaluate(
                model, name, out / f"{name}-{how}", grammar=on, zero_shot=zero_shot, temperature=t
            )
            for how, on, t in DECODINGS
        )
        row[f"{name} accuracy"] = grammar["accuracy"]
        row[f"{name} unaided accuracy"] = unaided["accuracy"]
        row[f"{name} unaided format errors"] = unaided["format_errors"]
        row[f"{name} greedy unaided accuracy"] = greedy["accuracy"]
        row[f"{name} greedy unaided format errors"] = greedy["format_errors"]
        row[f"{name} calls"] = grammar["calls"]
    return row


def plan_summary(records: Path) -> str:
    """What one evaluation's plans are, in a line: the commonest worker sequences, the share of
    steps that read every earlier step, whether the math expert is in the plan by domain, and a
    few subtasks (issue 42 §3: what its subtasks say)."""
    from collections import Counter

    plans = [json.loads(line) for line in records.read_text().splitlines() if line.strip()]
    plans = [p for p in plans if p["method"].startswith("cond") and not p["format_error"]]
    if not plans:
        return "no plan parsed"
    sequences = Counter(str(p["workers"]) for p in plans).most_common(3)
    steps = sum(p["plan_len"] for p in plans)
    access = sum(p["all_access_steps"] for p in plans) / max(1, steps)
    by_domain = Counter(p["domain"] for p in plans)
    math_in = Counter(p["domain"] for p in plans if 0 in p["workers"])
    experts = ", ".join(f"{d} {math_in[d]}/{n}" for d, n in sorted(by_domain.items()))
    subtasks = Counter(t for p in plans for t in p["subtasks"]).most_common(4)
    said = "; ".join(f"{t!r} x{n}" for t, n in subtasks)
    return (
        f"{len(plans)} plans; workers {', '.join(f'{q} x{n}' for q, n in sequences)}; "
        f"steps reading all earlier {access:.2f}; worker 0 in the plan: {experts}; "
        f"subtasks {said}"
    )


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error across seeds (0 for one seed)."""
    mean = sum(values) / len(values)
    if len(values) < 2:
        return mean, 0.0
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return mean, math.sqrt(var / len(values))


COLUMNS = (
    "held-out accuracy",
    "held-out unaided accuracy",
    "held-out unaided format errors",
    "held-out greedy unaided accuracy",
    "held-out greedy unaided format errors",
    "held-out calls",
    "demo accuracy",
    "demo unaided accuracy",
    "demo unaided format errors",
    "demo greedy unaided accuracy",
    "demo greedy unaided format errors",
    "demo calls",
)


def print_row(label: str, row: dict[str, float], seconds: str = "") -> None:
    """One Markdown row of the table."""
    print(f"| {label} | " + " | ".join(f"{row[c]:.3f}" for c in COLUMNS) + f" | {seconds} |")


def parse_steps(items: list[str]) -> dict[str, int]:
    """``--steps stage=N`` items as a dict, refusing unknown stages."""
    steps: dict[str, int] = {}
    for item in items:
        stage, _, n = item.partition("=")
        if stage not in STAGES or not n.isdigit():
            raise SystemExit(f"error: --steps {item}: expected STAGE=N with STAGE in {STAGES}")
        steps[stage] = int(n)
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="Training seeds 0..N-1.")
    parser.add_argument("--out", default="runs/small", help="Folder of every run (reused).")
    parser.add_argument("--stages", default=",".join(STAGES), help="Stages to chain, in order.")
    parser.add_argument("--steps", action="append", default=[], help="STAGE=N: fewer steps.")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="FIELD=VALUE.")
    parser.add_argument(
        "--pipeline",
        action="store_true",
        help="Train each seed through `conductor pipeline run training --local --set "
        "profile=small` (--set then takes pipeline parameters, e.g. base_steps=20; --stages and "
        "--steps do not apply).",
    )
    parser.add_argument(
        "--only",
        type=int,
        default=None,
        metavar="SEED",
        help="Train and evaluate this one seed, nothing else (to run seeds side by side; a later "
        "run without it reuses their results for the table).",
    )
    parser.add_argument(
        "--no-zero-shot",
        action="store_true",
        help="Leave out the bare model's row (six evaluations of a model that writes to its "
        "token limit: the slowest rows of the table on a CPU).",
    )
    args = parser.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    if not stages or any(s not in STAGES for s in stages):
        print(f"error: --stages {args.stages}: choose from {','.join(STAGES)}", file=sys.stderr)
        return 2
    steps = parse_steps(args.steps)
    out = Path(args.out).resolve()
    if args.only is not None:
        seed_dir = out / f"seed-{args.only}"
        model = train_seed(args, seed_dir, stages, steps)
        figures(model, seed_dir / "eval")
        return 0
    print("| model | " + " | ".join(COLUMNS) + " | s |")
    print("|---|" + "---|" * (len(COLUMNS) + 1))
    zero = None
    if not args.no_zero_shot:
        zero = figures("smollm2-135m-instruct", out / "zero-shot", zero_shot=True)
        print_row("zero-shot", zero)
    best = {name: best_single(name, out / "baselines" / name) for name in EVALS}
    half = " |" * (len(COLUMNS) // 2 - 1)
    print(f"| best single worker | {best['held-out']:.3f} |{half} {best['demo']:.3f} |{half} |")
    rows = []
    plans: dict[int, str] = {}
    for seed in range(args.seeds):
        started = time.perf_counter()
        seed_dir = out / f"seed-{seed}"
        model = train_seed(args, seed_dir, stages, steps)
        row = figures(model, seed_dir / "eval")
        seconds = pipeline_wall(seed_dir) if args.pipeline else time.perf_counter() - started
        print_row(f"seed {seed}", row, str(round(seconds)))
        plans[seed] = plan_summary(seed_dir / "eval" / "held-out-grammar" / "records-0of1.jsonl")
        sys.stdout.flush()
        rows.append(row)
    summary = {c: mean_se([r[c] for r in rows]) for c in COLUMNS}
    cells = " | ".join(f"{m:.3f} ± {s:.3f}" for m, s in summary.values())
    print(f"| mean ± s.e. ({len(rows)} seeds) | {cells} | |")
    held_gain = summary["held-out accuracy"][0] - best["held-out"]
    demo_gain = summary["demo accuracy"][0] - best["demo"]
    unaided, greedy = (
        max(summary[f"held-out {how}format errors"][0], summary[f"demo {how}format errors"][0])
        for how in ("unaided ", "greedy unaided ")
    )
    goals = [
        ("held-out gain over the best single", held_gain, held_gain >= HELD_OUT_MARGIN),
        ("demo gain over the best single", demo_gain, demo_gain >= DEMO_MARGIN),
        ("unaided format errors, sampled at 1.0", unaided, unaided <= MAX_UNAIDED_FORMAT_ERRORS),
        ("unaided format errors, greedy", greedy, greedy <= MAX_UNAIDED_FORMAT_ERRORS),
    ]
    print()
    for seed, line in plans.items():
        print(f"seed {seed} held-out plans: {line}")
    print()
    for name, value, met in goals:
        print(f"{name}: {value:+.3f} ({'met' if met else 'not met'})")
    (out / "small.json").write_text(json.dumps({"zero-shot": zero, "seeds": rows}, indent=2))
    return 0 if all(met for _, _, met in goals) else 1


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except CommandFailed as exc:  # the command printed its reason; the bench says which one
        print(f"error: {exc}; finished runs are kept: a rerun picks up there", file=sys.stderr)
        raise SystemExit(2) from None
