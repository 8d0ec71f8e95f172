"""The learning experiment behind the learning test and ``scripts/learning_demo.py``.

A random tiny Qwen2 Conductor gets the format warm-up (loss on prompt tokens too), then GRPO on
the bundled synthetic problems and simulated pool; held-out (``test`` split) questions are scored
with the initial model, after the warm-up and after GRPO.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conductor_core.train.config import StageConfig, build_config

ROWS: tuple[tuple[str, str], ...] = (
    ("mean reward", "reward_mean"),
    ("format-error rate", "format_error_rate"),
    ("best-worker share", "best_worker_share"),
    ("mean steps", "mean_steps"),
)
COLUMNS: tuple[str, ...] = ("initial", "warm-up", "GRPO")


def learning_config(
    out: str | Path,
    *,
    steps: int | None = 150,
    warmup_steps: int = 300,
    layers: int = 2,
    seed: int = 0,
    track: bool = False,
    stage: str = "base",
    init_from: str | None = None,
    extra: dict[str, Any] | None = None,
) -> StageConfig:
    """The tiny-profile config of the learning experiment (``extra``: more overrides; ``steps``
    None: the profile's steps for ``stage``)."""
    data: dict[str, Any] = {
        "output_dir": str(out),
        "seed": seed,
        "model": {"tiny": {"layers": layers, "seed": seed}},
        "warmup": {"steps": warmup_steps},
        "tracking": {"backend": "mlflow" if track else "none", "log_model": False},
    }
    if steps is not None:
        data["steps"] = steps
        data["checkpoint"] = {"save_steps": max(steps, 1)}
    if init_from:
        data["init_from"] = init_from
    return build_config(data, stage=stage, profile="tiny", overrides=extra)


def learning_experiment(
    out: str | Path,
    *,
    steps: int = 150,
    warmup_steps: int = 300,
    layers: int = 2,
    seed: int = 0,
    eval_plans: int = 2,
    track: bool = False,
    progress: bool = False,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train and evaluate; returns ``{"table", "summary", "history", "plot"}``."""
    from conductor_core.train.evaluate import evaluate_policy
    from conductor_core.train.grpo import INIT_DIR, WARM_DIR, load_inputs, load_model, run_stage
    from conductor_core.train.tracking import make_tracker

    config = learning_config(
        out,
        steps=steps,
        warmup_steps=warmup_steps,
        layers=layers,
        seed=seed,
        track=track,
        extra=extra,
    )
    tracker = make_tracker(config)
    result = run_stage(config, tracker=tracker, progress=progress, log=print if progress else None)
    eval_config = config.model_copy(update={"data": config.data.model_copy(update={"split": None})})
    _, by_id, pool, bank = load_inputs(eval_config)
    held_out = [p for p in by_id.values() if p.metadata.get("split") == "test"]
    table: dict[str, dict[str, float]] = {}
    out_path = Path(out)
    for column, folder in zip(
        COLUMNS, (out_path / INIT_DIR, out_path / WARM_DIR, result.model_dir), strict=True
    ):
        model, tokenizer = load_model(str(folder), config, "cpu")
        table[column] = evaluate_policy(
            model, tokenizer, held_out, pool, bank, config, plans_per_question=eval_plans, seed=seed
        )
    plot = plot_reward_curve(result.history, out_path / "reward_curve.png")
    if track and plot is not None and result.run_id:
        from conductor_core.track.mlflow_run import log_artifacts, log_metrics, reopen_run

        with reopen_run(result.run_id, uri=getattr(tracker, "uri", None)):
            log_artifacts(plot)
            for column, metrics in table.items():
                log_metrics(
                    {f"heldout/{column}/{k}": v for k, v in metrics.items() if "/" not in k}
                )
    return {
        "table": table,
        "summary": result.summary,
        "history": result.history,
        "plot": str(plot) if plot else None,
    }


def render_table(table: dict[str, dict[str, float]]) -> str:
    """The before/after table as Markdown."""
    cols = [c for c in COLUMNS if c in table]
    lines = [
        "| held-out metric | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for label, key in ROWS:
        cells = [f"{table[c].get(key, 0.0):.3f}" for c in cols]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_reward_curve(history: list[dict[str, float]], path: str | Path) -> Path | None:
    """Save the per-step mean reward (and best-worker share) as a PNG; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    steps = [h["step"] for h in history if "reward" in h]
    rewards = [h["reward"] for h in history if "reward" in h]
    best = [h.get("conductor/best_worker_share", float("nan")) for h in history if "reward" in h]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(steps, rewards, label="mean reward")
    ax.plot(steps, best, label="best-worker share", alpha=0.7)
    ax.set_xlabel("GRPO step")
    ax.set_ylim(0, 1.05)
    ax.legend(loc="lower right")
    ax.set_title("Tiny Conductor on the simulated pool")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def stage_experiment(
    stage: str,
    out: str | Path,
    init_from: str | Path,
    *,
    steps: int | None = None,
    seed: int = 0,
    eval_plans: int = 2,
    held_out: int | None = 60,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``init_from`` with the ``adaptive`` or ``recursive`` stage; evaluate before/after.

    Adaptive: held-out plans with random offered subsets (``out_of_subset_rate`` must fall to 0;
    ``after_greedy`` holds the greedy-decoding metrics after training).
    Recursive: round-2 keep/revise rates by round-1 correctness (see
    :func:`~conductor_core.train.evaluate.evaluate_recursion`).
    """
    from conductor_core.train.evaluate import evaluate_policy, evaluate_recursion
    from conductor_core.train.grpo import WARM_DIR, load_inputs, load_model, run_stage

    config = learning_config(
        out, steps=steps, seed=seed, stage=stage, init_from=str(init_from), extra=extra
    )
    eval_config = config.model_copy(update={"data": config.data.model_copy(update={"split": None})})
    _, by_id, pool, bank = load_inputs(eval_config)
    problems = [p for p in by_id.values() if p.metadata.get("split") == "test"]
    if held_out:
        problems = problems[:: max(1, len(problems) // held_out)][:held_out]

    def measure(folder: str | Path, temperature: float = 1.0) -> dict[str, float]:
        model, tokenizer = load_model(str(folder), config, "cpu")
        if stage == "adaptive":
            return evaluate_policy(
                model,
                tokenizer,
                problems,
                pool,
                bank,
                config,
                plans_per_question=eval_plans if temperature > 0 else 1,
                adaptive=True,
                seed=seed,
                temperature=temperature,
            )
        return evaluate_recursion(
            model, tokenizer, problems, pool, bank, config, seed=seed, plans_per_question=eval_plans
        )

    before = measure(init_from)
    result = run_stage(config, progress=False)
    after = measure(result.model_dir)
    out_dict = {"before": before, "after": after, "summary": result.summary}
    warm = Path(out) / WARM_DIR
    if config.warmup.enabled and warm.is_dir():
        out_dict["warm-up"] = measure(warm)
    if stage == "adaptive":
        out_dict["after_greedy"] = measure(result.model_dir, temperature=0.0)
    return out_dict
