"""Learning experiments on the tiny Conductor: train a stage, then measure it on held-out questions.
The harness of tests/e2e/test_learning.py and of the learning scripts beside it (learning_demo.py,
bench_learning_pools.py, bench_adaptive_routing.py, bench_recursive_seeds.py, bench_cost_front.py,
bench_descriptor_probe.py), which import it as ``experiment`` (a script's folder is on its path;
the tests import ``bench.experiment``); not used by training or serving.

A random tiny Qwen2 Conductor gets the format warm-up, then GRPO on the bundled synthetic problems
and a simulated pool; held-out (``test`` split) questions are evaluated with the initial model,
after the warm-up and after GRPO. Evaluation goes through the library's evaluation path
(:class:`~conductor_core.evaluate.methods.PlanSourceMethod` over the trained model, then
:func:`~conductor_core.evaluate.runner.run_eval`), so held-out plans are run by the same
:func:`~conductor_core.solve.solve` as in training and serving, asked with the same prompt.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from random import Random
from typing import Any

from conductor_core.outcome import Outcome
from conductor_core.policy.base import PreviousRound
from conductor_core.solve import plan_request
from conductor_core.tasks.problem import Problem
from conductor_core.train.config import StageConfig, build_config
from conductor_core.train.data import offered_subset, stage_options
from conductor_core.train.recursive import recursion_metrics
from conductor_core.train.reward import best_workers, summarize
from conductor_core.workers.config import PoolConfig
from conductor_core.workflow.prompts import PROMPT_VERSION, plan_messages
from conductor_core.workflow.trace import SolveTrace

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
    warmup_steps: int | None = None,
    layers: int = 2,
    seed: int = 0,
    track: bool = False,
    stage: str = "base",
    init_from: str | None = None,
    extra: dict[str, Any] | None = None,
) -> StageConfig:
    """The tiny-profile config of the learning experiment (``extra``: more overrides; ``steps``
    and ``warmup_steps`` None: the profile's for ``stage``)."""
    data: dict[str, Any] = {
        "output_dir": str(out),
        "seed": seed,
        "model": {"tiny": {"layers": layers, "seed": seed}},
        "tracking": {"backend": "mlflow" if track else "none", "log_model": False},
    }
    if warmup_steps is not None:
        data["warmup"] = {"steps": warmup_steps}
    if steps is not None:
        data["steps"] = steps
        data["checkpoint"] = {"save_steps": max(steps, 1)}
    if init_from:
        data["init_from"] = init_from
    return build_config(data, stage=stage, profile="tiny", overrides=extra)


def checked_overrides(sets: Sequence[str], out: str | Path, **config: Any) -> dict[str, Any]:
    """The config overrides of a bench script's ``--set KEY=VALUE`` items, checked by building
    the experiment's config (``config``: more :func:`learning_config` arguments), so that a bad
    one fails before any training. Raises ``ConfigError``."""
    from conductor_core.configfiles import parse_sets

    extra = parse_sets(sets)
    learning_config(out, extra=extra, **config)
    return extra


DOMAINS: tuple[str, ...] = ("math", "mcq", "freeform")


def random_pool(seed: int, path: str | Path, *, workers: int = 4) -> Path:
    """Write a simulated pool drawn at random for the bundled training problems to ``path``.

    Like the bundled training pool (one clearly best worker per domain, a middling generalist,
    hedged wrong answers), but the best worker of each domain sits at a random id (two domains
    may share one), its skill is drawn in [0.8, 0.95], other skills in [0.15, 0.45], and every
    worker's simulation seed is random. Deterministic given ``seed``.
    """
    import yaml

    from conductor_core.workers.bundled import bundled_train_pool_path

    rng = Random(f"pool:{seed}")
    template = yaml.safe_load(bundled_train_pool_path().read_text(encoding="utf-8"))
    base = template["workers"][0]
    best = {d: rng.randrange(workers) for d in DOMAINS}
    out = []
    for i in range(workers):
        weak = round(rng.uniform(0.15, 0.45), 2)
        skills = {
            d: round(rng.uniform(0.8, 0.95), 2)
            if best[d] == i
            else round(rng.uniform(0.15, 0.45), 2)
            for d in DOMAINS
        }
        sim = {
            **base["simulation"],
            "skills": skills,
            "default_skill": weak,
            "seed": rng.randrange(10_000),
        }
        out.append({**base, "name": f"sim-{i}", "model": f"sim-{i}", "simulation": sim})
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"workers": out}, sort_keys=False), encoding="utf-8")
    return path


def with_random_pool(
    extra: dict[str, Any] | None, pool_seed: int | None, path: Path
) -> dict[str, Any] | None:
    """``extra`` config overrides training on :func:`random_pool` ``(pool_seed)`` (written to
    ``path``); unchanged when ``pool_seed`` is None (the bundled pool)."""
    if pool_seed is None:
        return extra
    pool_path = random_pool(pool_seed, path)
    data = {**(extra or {}).get("data", {}), "pool": str(pool_path)}
    return {**(extra or {}), "data": data}


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
    pool_seed: int | None = None,
) -> dict[str, Any]:
    """Train and evaluate; returns ``{"table", "summary", "history", "plot"}``.

    ``pool_seed`` trains on :func:`random_pool` ``(pool_seed)`` instead of the bundled pool.
    """
    from conductor_core.train.grpo import INIT_DIR, WARM_DIR, load_model, run_stage
    from conductor_core.train.stage_tracker import make_tracker

    extra = with_random_pool(extra, pool_seed, Path(out) / "pool.yaml")

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
    say = (lambda msg: print(msg, file=sys.stderr, flush=True)) if progress else None
    result = run_stage(config, tracker=tracker, progress=progress, log=say)
    held_out, pool = held_out_problems(config)
    table: dict[str, dict[str, float]] = {}
    out_path = Path(out)
    for column, folder in zip(
        COLUMNS, (out_path / INIT_DIR, out_path / WARM_DIR, result.model_dir), strict=True
    ):
        model, tokenizer = load_model(str(folder), config, "cpu")
        table[column] = evaluate_policy(
            model, tokenizer, held_out, pool, config, plans_per_question=eval_plans, seed=seed
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


def train_base_and_adaptive(
    out: str | Path, *, base_steps: int = 130, adaptive_steps: int = 80, seed: int = 0
) -> Path:
    """Train the learning recipe's base stage (format warm-up, then GRPO) into ``out/base`` and
    the adaptive stage from it into ``out/adaptive``, without held-out evaluations (progress on
    stderr); returns the adaptive model's folder."""
    from conductor_core.train.grpo import run_stage

    def say(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    out = Path(out)
    base = run_stage(learning_config(out / "base", steps=base_steps, seed=seed), log=say)
    adaptive = learning_config(
        out / "adaptive",
        steps=adaptive_steps,
        seed=seed,
        stage="adaptive",
        init_from=str(base.model_dir),
    )
    return run_stage(adaptive, log=say).model_dir


DESCRIPTOR_MODE: dict[str, Any] = {
    "data": {"descriptors": True},
    "adaptive": {"renumber": True},
    "warmup": {"enabled": True},
    "expert_start": {"enabled": True, "steps": 3000, "executions": 128},
}
"""Descriptor mode's recipe on the tiny model: the adaptive stage from a random model, its format
warm-up and expert start shown as the stage shows its prompts (random ids, descriptions)."""


def train_descriptor_mode(out: str | Path, *, steps: int | None = None, seed: int = 0) -> Path:
    """Train :data:`DESCRIPTOR_MODE`'s adaptive stage (format warm-up, expert start, then
    ``steps`` GRPO steps; None: the tiny profile's 160) into ``out/adaptive`` (progress on
    stderr); returns the model folder."""
    from conductor_core.train.grpo import run_stage

    config = learning_config(
        Path(out) / "adaptive", steps=steps, seed=seed, stage="adaptive", extra=DESCRIPTOR_MODE
    )
    return run_stage(config, log=lambda msg: print(msg, file=sys.stderr, flush=True)).model_dir


def held_out_problems(config: StageConfig) -> tuple[list[Problem], PoolConfig]:
    """The held-out (``test`` split) problems of ``config``'s data and its pool."""
    from conductor_core.train.grpo import load_inputs

    every = config.model_copy(update={"data": config.data.model_copy(update={"split": None})})
    _, by_id, pool = load_inputs(every)
    return [p for p in by_id.values() if p.metadata.get("split") == "test"], pool


def target_summary(name: str, values: Sequence[float], target: float, unit: str) -> str:
    """One line on a bench script's runs: ``values``' minimum and mean, and how many of them (runs,
    seeds: ``unit``) reach ``target``."""
    reached = sum(1 for v in values if v >= target)
    return (
        f"minimum {name} {min(values):.3f}, mean {sum(values) / len(values):.3f}; "
        f"{reached} of {len(values)} {unit} at or above {target}"
    )


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
    pool_seed: int | None = None,
    plan_grammar: bool = False,
) -> dict[str, Any]:
    """Fine-tune ``init_from`` with the ``adaptive`` or ``recursive`` stage; evaluate before/after
    (on :func:`random_pool` ``(pool_seed)`` when given, as the base model was trained).

    Adaptive: held-out plans with random offered subsets (``out_of_subset_rate`` must fall to 0;
    ``after_greedy`` holds the greedy-decoding metrics after training).
    Recursive: round-2 keep/revise rates by round-1 correctness (:func:`evaluate_recursion`;
    ``plan_grammar``: decoded under the plan grammar, as deployment decodes).
    ``"warm-up"`` and ``"expert start"`` hold the same metrics for the models GRPO started from,
    when the stage made them.
    """
    from conductor_core.train.grpo import EXPERT_DIR, WARM_DIR, load_model, run_stage

    extra = with_random_pool(extra, pool_seed, Path(out) / "pool.yaml")
    config = learning_config(
        out, steps=steps, seed=seed, stage=stage, init_from=str(init_from), extra=extra
    )
    problems, pool = held_out_problems(config)
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
                config,
                plans_per_question=eval_plans if temperature > 0 else 1,
                adaptive=True,
                seed=seed,
                temperature=temperature,
            )
        return evaluate_recursion(
            model,
            tokenizer,
            problems,
            pool,
            config,
            seed=seed,
            plans_per_question=eval_plans,
            plan_grammar=plan_grammar,
        )

    before = measure(init_from)
    result = run_stage(config, progress=False)
    after = measure(result.model_dir)
    out_dict = {"before": before, "after": after, "summary": result.summary}
    warm = Path(out) / WARM_DIR
    if config.warmup.enabled and warm.is_dir():
        out_dict["warm-up"] = measure(warm)
    expert = Path(out) / EXPERT_DIR
    if config.expert_start.enabled and expert.is_dir():
        out_dict["expert start"] = measure(expert)
    if stage == "adaptive":
        out_dict["after_greedy"] = measure(result.model_dir, temperature=0.0)
    return out_dict


# --------------------------------------------------------------------------------------------
# Held-out evaluation through the library's evaluation path


def run_model(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    pool: PoolConfig,
    config: StageConfig,
    *,
    plans_per_question: int,
    seed: int,
    temperature: float,
    rounds: int = 1,
    adaptive: bool = False,
    plan_grammar: bool = False,
) -> list[Any]:
    """Evaluate the in-memory ``model`` on ``problems`` with
    :func:`~conductor_core.evaluate.runner.run_eval` (``plans_per_question`` repeats, sampled at
    ``temperature``, under the plan grammar with ``plan_grammar``); returns the evaluation
    records (traces kept)."""
    from conductor_core.evaluate.methods import PlanSourceMethod
    from conductor_core.evaluate.runner import RunConfig, run_eval
    from conductor_core.policy.local import TransformersPlanSource
    from conductor_core.workers.pool import WorkerPool

    size = len(pool.workers)
    # Asked as the stage trains (its style, the current prompt version), whatever spec the folder
    # the weights came from holds, as evaluate_recursion's teacher-forced prompts are.
    source = TransformersPlanSource.from_loaded(
        model,
        tokenizer,
        max_new_tokens=config.generation.max_completion_length,
        temperature=temperature,
        seed=seed,
        prompt_style=config.data.prompt_style,
        prompt_version=PROMPT_VERSION,
        plan_grammar=plan_grammar,
    )
    offered_for = None
    if adaptive:
        spec = config.adaptive

        def offered_for(problem: Problem, sample_index: int) -> list[int]:
            rng = Random(f"{seed}:{problem.id}:{sample_index}")
            return offered_subset(rng, size, spec.k_min, spec.k_max)

    method = PlanSourceMethod(
        "conductor",
        source,
        replace(stage_options(config, descriptions=pool.descriptions()), max_rounds=rounds),
        offered_for=offered_for,
    )
    run = RunConfig(repeats=plans_per_question, seed=seed, progress=False, infra_retries=0)

    async def go() -> list[Any]:
        async with WorkerPool(pool) as workers:
            with tempfile.TemporaryDirectory(prefix="conductor-heldout-") as tmp:
                return await run_eval(problems, [method], workers, Path(tmp) / "r.jsonl", run)

    with eval_mode(model):
        return asyncio.run(go())


def evaluate_policy(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    pool: PoolConfig,
    config: StageConfig,
    *,
    plans_per_question: int = 4,
    adaptive: bool = False,
    seed: int = 0,
    temperature: float = 1.0,
) -> dict[str, float]:
    """Sample plans for ``problems``, run and grade them; returns :func:`policy_metrics`."""
    records = run_model(
        model,
        tokenizer,
        problems,
        pool,
        config,
        plans_per_question=plans_per_question,
        seed=seed,
        temperature=temperature,
        adaptive=adaptive,
    )
    return policy_metrics(records, pool)


def policy_metrics(records: Sequence[Any], pool: PoolConfig) -> dict[str, Any]:
    """The training summary's metrics of ``records`` (:func:`~conductor_core.train.reward.
    summarize`) plus ``out_of_subset_rate`` (plans naming a worker the prompt did not offer) and
    ``plans``."""
    metrics = summarize(records, pool_size=len(pool.workers), best=best_workers(pool))
    metrics["out_of_subset_rate"] = sum(
        1 for r in records if r.format_error_code == "unknown_worker"
    ) / max(1, len(records))
    metrics["plans"] = float(len(records))
    return metrics


def evaluate_recursion(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    pool: PoolConfig,
    config: StageConfig,
    *,
    seed: int = 0,
    temperature: float = 1.0,
    plans_per_question: int = 2,
    plan_grammar: bool = False,
) -> dict[str, float]:
    """Two rounds per plan (decoded under the plan grammar with ``plan_grammar``); returns
    keep/revise rates by round-1 correctness
    (:func:`~conductor_core.train.recursive.recursion_metrics`, over the plans whose first round
    parsed and ran) and ``keep_prob_when_right`` / ``keep_prob_when_wrong``: the mean probability
    of writing the keep plan (teacher-forced and unaided, so free of sampling noise), and
    ``keep_prob_discrimination`` their difference; ``first_round_keep_rate``: the share of plans
    whose first round was already the keep plan (a format error, so no second round)."""
    from conductor_core.outcome import grade
    from conductor_core.train.warmup import KEEP_PLAN

    records = run_model(
        model,
        tokenizer,
        problems,
        pool,
        config,
        plans_per_question=plans_per_question,
        seed=seed,
        temperature=temperature,
        rounds=2,
        plan_grammar=plan_grammar,
    )
    by_id = {p.id: p for p in problems}
    size = len(pool.workers)
    options = stage_options(config, descriptions=pool.descriptions())
    firsts: list[Outcome] = []
    seconds: list[Outcome] = []
    prompts: list[list[dict[str, str]]] = []
    first_keeps = 0
    for record in records:
        trace = SolveTrace.model_validate(record.trace)
        first_keeps += is_first_round_keep(trace, config.data.max_steps, config.data.access_mode)
        if len(trace.rounds) < 2:
            continue  # round 1 did not parse or ran into infrastructure: no second round
        problem = by_id[record.problem_id]
        first_round = trace.model_copy(
            update={"rounds": trace.rounds[:1], "answer": trace.rounds[0].workflow.answer}
        )
        firsts.append(asyncio.run(grade(problem, first_round)))
        second = trace.rounds[1]
        seconds.append(
            Outcome(
                domain=record.domain,
                format_error=second.plan_error is not None,
                kept=second.kept_previous,
                correct=record.correct,
                reward=record.reward,  # the final answer, as deployment grades it
            )
        )
        previous = PreviousRound(plan=trace.rounds[0].raw_plan, answer=first_round.answer)
        prompts.append(plan_messages(plan_request(problem.question, size, options, 0, previous)))
    metrics = recursion_metrics(firsts, seconds)
    metrics["first_round_keep_rate"] = first_keeps / len(records) if records else 0.0
    keep = completion_probabilities(model, tokenizer, prompts, KEEP_PLAN)
    right = [k for k, o in zip(keep, firsts, strict=True) if o.correct]
    wrong = [k for k, o in zip(keep, firsts, strict=True) if o.plan_ok and not o.correct]
    metrics["keep_prob_when_right"] = sum(right) / len(right) if right else 0.0
    metrics["keep_prob_when_wrong"] = sum(wrong) / len(wrong) if wrong else 0.0
    metrics["keep_prob_discrimination"] = (
        metrics["keep_prob_when_right"] - metrics["keep_prob_when_wrong"]
    )
    return metrics


def is_first_round_keep(trace: SolveTrace, max_steps: int, access_mode: str) -> bool:
    """Whether the first round's plan was the keep plan (no answer to keep: a format error)."""
    from conductor_core.train.recursive import is_keep_text

    raw = trace.rounds[0].raw_plan if trace.rounds else None
    return raw is not None and is_keep_text(raw, max_steps, access_mode)


@contextmanager
def eval_mode(model: Any) -> Iterator[Any]:
    """Put ``model`` in eval mode for the block (yields its device); restore training mode after."""
    was_training = model.training
    model.eval()
    try:
        yield next(model.parameters()).device
    finally:
        if was_training:
            model.train()


def completion_probabilities(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[list[dict[str, str]]],
    completion: str,
    *,
    batch_size: int = 32,
) -> list[float]:
    """The probability that the model writes exactly ``completion`` (then its end token) for
    each prompt: teacher-forced, so free of sampling noise."""
    import torch

    from conductor_core.train.warmup import completion_token_ids

    target = completion_token_ids(tokenizer, completion)
    out: list[float] = []
    with eval_mode(model) as device:
        for i in range(0, len(prompts), batch_size):
            chunk = prompts[i : i + batch_size]
            heads = [
                tokenizer(
                    tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True),
                    add_special_tokens=False,
                )["input_ids"]
                for p in chunk
            ]
            width = max(len(h) for h in heads) + len(target)
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, h in enumerate(heads):  # left padding: every completion ends at the last column
                row = h + target
                ids[r, width - len(row) :] = torch.tensor(row)
                mask[r, width - len(row) :] = 1
            with torch.inference_mode():
                logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            logps = logits[:, -len(target) - 1 : -1].float().log_softmax(-1)
            picked = logps.gather(
                -1, torch.tensor(target, device=device).expand(len(chunk), -1)[..., None]
            )
            out.extend(float(v) for v in picked.squeeze(-1).sum(-1).exp())
    return out
