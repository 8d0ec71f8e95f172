"""Expert-iteration start (``expert_start``): fine-tune on the best-answering worker, then GRPO.

First every pool worker runs every training question ``expert_start.executions`` times, through
the stage's reward path (:class:`~conductor_core.train.reward.ConductorReward`: the one-step plan
giving it the question, :func:`~conductor_core.solve.solve`, then grading); the share of right
answers estimates the worker's chance ``p_w`` to answer that question. Each training example is
then a random training question and offered subset (the adaptive stage's ``k_min``..``k_max``;
the whole pool in the base stage), shown exactly as the stage's dataset shows it
(:func:`~conductor_core.train.data.shown_workers`: pool ids, or random ids with descriptions in
descriptor mode), whose target is the one-step plan naming the offered worker with the highest
estimate, kept only when that estimate beats the runner-up's by a one-sided two-proportion z-test
at ``expert_start.z`` (:func:`significant_best`).

The objective is the log-likelihood of those targets (cross-entropy on the plan tokens): imitate
the offered worker that answers a question significantly more often than the others. This is one
step of policy improvement on executed outcomes (expert iteration with every offered worker as a
candidate), a different objective from GRPO's, run once before GRPO, which then optimises the
expected reward from there. The test matters: without it a question whose offered workers are
equally good gets the target its lucky draws pick, the same one every time it is drawn, which a
small model memorises instead of learning what the question's type asks for. It exists because
reward alone gives a small model too little signal to find routing by description (each GRPO
group compares a handful of sampled plans). It teaches routing, not plan structure (the targets
are one-step plans), and costs ``questions x pool size x executions`` worker calls, made once.

In the recursive stage the expert start decides between keeping and a new plan instead
(:mod:`conductor_core.train.recursion_start`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from random import Random
from typing import Any

from conductor_core.errors import ConfigError
from conductor_core.sample_streams import expert_start_index
from conductor_core.tasks.problem import Problem
from conductor_core.train.config import StageConfig
from conductor_core.train.data import offered_subset, shown_workers, stage_prompt
from conductor_core.train.recursion_start import recursion_expert_examples
from conductor_core.train.reward import stage_reward
from conductor_core.train.warmup import WARMUP_SUBTASKS, encode_example, train_supervised
from conductor_core.workers.config import PoolConfig
from conductor_core.workflow.model import AccessMode, Step, Workflow

EXPERT_SUBTASK = WARMUP_SUBTASKS[1]
"""The subtask of the executed one-step plans and of the targets ("Answer the question.", one of
the format warm-up's, so the targets are in the format the model learned)."""

RATES_FILE = "expert-rates.json"
"""The answer rates measured so far, in the stage's output folder: a rerun runs only the rest."""

CHUNK = 32
"""Questions whose executions run at once (then the rates are saved)."""

MAX_DRAWS = 100
"""Draws per example after which :func:`expert_examples` gives up (the tiny pool needs about 2)."""

Estimates = dict[str, list[float | None]]
"""Per problem id, each pool worker's share of right answers (None: every execution spoiled)."""


def one_step_plan(worker: int, access_mode: AccessMode | str) -> str:
    """The rendered plan that gives the whole question to ``worker``."""
    step = Step(worker=worker, subtask=EXPERT_SUBTASK, access=())
    return Workflow(steps=(step,), access_mode=AccessMode(access_mode)).render()


def load_rates(path: Path | None, pool: PoolConfig, executions: int) -> Estimates:
    """The rates saved at ``path`` when they were measured on the same workers with the same
    number of executions; empty otherwise."""
    if path is None or not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return {}
    same = data.get("workers") == [w.name for w in pool.workers]
    if not same or data.get("executions") != executions:
        return {}
    return {str(k): list(v) for k, v in dict(data.get("rates", {})).items()}


async def answer_rates(
    problems: Sequence[Problem],
    pool: PoolConfig,
    config: StageConfig,
    *,
    saved: Path | None = None,
    log: Callable[[str], None] | None = None,
    pool_factory: Callable[[], Any] | None = None,
) -> Estimates:
    """Run each pool worker's one-step plan on each problem ``expert_start.executions`` times
    (the stage's solve options and budget); each worker's share of right answers per problem,
    over the executions an infrastructure failure did not spoil.

    With ``saved`` (a JSON file), the rates of :data:`CHUNK` questions at a time are written
    there as they are measured, and rates already there (same workers, same executions) are not
    measured again, so an interrupted run resumes where it stopped.
    """
    size, runs = len(pool.workers), config.expert_start.executions
    out = load_rates(saved, pool, runs)
    todo = [(i, p) for i, p in enumerate(problems) if p.id not in out]
    if out and log is not None:
        log(f"expert start: {len(problems) - len(todo)} questions' rates reused from {saved}")
    # one execution a run: the rates count right answers, not the stage's averaged reward
    reward = stage_reward(
        config, {p.id: p for p in problems}, pool, executions=1, pool_factory=pool_factory
    )
    plans = [one_step_plan(w, config.data.access_mode) for w in range(size)]
    texts = [plans[w] for w in range(size) for _ in range(runs)]

    async def one(index: int, problem: Problem) -> list[float | None]:
        # sample indexes fixed by the question's place, so a resumed run draws what it would have
        n = len(texts)
        outcomes = await reward.score(
            texts,
            [problem.id] * n,
            [None] * n,
            sample_indices=[expert_start_index(index, n, j) for j in range(n)],
        )
        rates: list[float | None] = []
        for w in range(size):
            done = [o.correct for o in outcomes[w * runs : (w + 1) * runs] if o.reward is not None]
            rates.append(sum(done) / len(done) if done else None)
        return rates

    try:
        for at in range(0, len(todo), CHUNK):
            part = todo[at : at + CHUNK]
            measured = await asyncio.gather(*(one(i, p) for i, p in part))
            for (_, p), rates in zip(part, measured, strict=True):
                out[p.id] = rates
            if saved is not None:
                record = {"workers": [w.name for w in pool.workers], "executions": runs}
                saved.write_text(json.dumps({**record, "rates": out}) + "\n", encoding="utf-8")
            if log is not None:
                log(
                    f"expert start: rates of {len(problems) - len(todo) + at + len(part)}/"
                    f"{len(problems)} questions"
                )
    finally:
        await reward.aclose()
    return {p.id: out[p.id] for p in problems}


def significant_best(
    rates: Sequence[float | None], offered: Sequence[int], executions: int, z: float
) -> int | None:
    """The offered pool id with the highest rate when it beats the runner-up's by a one-sided
    two-proportion z-test (pooled variance, ``executions`` runs each) at ``z``; None otherwise,
    or when a rate is unknown. A single offered worker is no choice: None."""
    scored = [(rates[w], w) for w in offered]
    if len(scored) < 2 or any(r is None for r, _ in scored):
        return None
    (best, worker), (second, _) = sorted(scored, reverse=True)[:2]  # type: ignore[type-var]
    pooled = (best + second) / 2  # type: ignore[operator]
    spread = (pooled * (1 - pooled) * 2 / executions) ** 0.5
    if spread == 0 or (best - second) / spread < z:  # type: ignore[operator]
        return None
    return worker


def expert_examples(
    rng: Random,
    problems: Sequence[Problem],
    rates: Estimates,
    pool_size: int,
    config: StageConfig,
    count: int,
    *,
    descriptions: Sequence[str] = (),
) -> list[tuple[list[dict[str, str]], str]]:
    """``count`` (prompt messages, target plan) pairs: a random problem and offered subset,
    shown as the stage shows it, whose target names the :func:`significant_best` offered worker
    under the id the prompt shows; draws without one are skipped.

    Raises:
        ConfigError: no problem has a significantly best worker in any pair, or the offered
            subsets hold one so rarely that :data:`MAX_DRAWS` draws per example do not suffice.
    """
    spec = config.expert_start
    adaptive = config.stage == "adaptive"
    everyone = list(range(pool_size))
    useful = [
        p
        for p in problems
        if any(
            significant_best(rates[p.id], pair, spec.executions, spec.z) is not None
            for pair in itertools.combinations(everyone, 2)
        )
    ]
    if not useful:
        raise ConfigError(
            f"expert_start: no worker answers any question significantly more often than "
            f"another in {spec.executions} executions; raise expert_start.executions or lower "
            f"expert_start.z"
        )
    out: list[tuple[list[dict[str, str]], str]] = []
    draws = 0
    while len(out) < count:
        draws += 1
        if draws > MAX_DRAWS * count:
            raise ConfigError(
                f"expert_start: {len(out)} examples in {draws - 1} draws: the offered subsets "
                f"rarely hold a significantly best worker; offer more workers "
                f"(adaptive.k_min, k_max), raise expert_start.executions or lower expert_start.z"
            )
        p = rng.choice(useful)
        if adaptive:
            offered = offered_subset(rng, pool_size, config.adaptive.k_min, config.adaptive.k_max)
        else:
            offered = everyone
        best = significant_best(rates[p.id], offered, spec.executions, spec.z)
        if best is None:
            continue
        shown, workers, shown_desc = shown_workers(rng, config, offered, pool_size, descriptions)
        messages = stage_prompt(
            config, p.question, pool_size, offered=shown, descriptions=shown_desc
        )
        target = shown[workers.index(best)]
        out.append((messages, one_step_plan(target, config.data.access_mode)))
    return out


def run_expert_start(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    pool: PoolConfig,
    config: StageConfig,
    *,
    descriptions: Sequence[str] = (),
    log: Callable[[str], None] | None = None,
    on_step: Callable[[int, float], None] | None = None,
    pool_factory: Callable[[], Any] | None = None,
) -> dict[str, float]:
    """Estimate the answer rates (:func:`answer_rates`), then train ``model`` in place on
    :func:`expert_examples`; in the recursive stage on executed round-2 contexts instead
    (:mod:`conductor_core.train.recursion_start`). Returns ``{"steps", "loss", "seconds"}``."""
    spec = config.expert_start
    say = log or (lambda _: None)
    start = time.perf_counter()
    count = spec.steps * spec.batch_size
    if config.stage == "recursive":
        examples = recursion_expert_examples(
            model,
            tokenizer,
            problems,
            pool,
            config,
            count,
            descriptions=descriptions,
            log=log,
            pool_factory=pool_factory,
        )
        return _fine_tune(model, tokenizer, examples, config, start, on_step)
    runs = len(problems) * len(pool.workers) * spec.executions
    say(
        f"expert start: running {len(problems)} questions x {len(pool.workers)} workers x "
        f"{spec.executions} executions ({runs} plan runs)"
    )
    saved = config.output_path() / RATES_FILE
    rates = asyncio.run(
        answer_rates(problems, pool, config, saved=saved, log=log, pool_factory=pool_factory)
    )
    say(f"expert start: ran {runs} plan runs in {time.perf_counter() - start:.0f}s")
    examples = expert_examples(
        Random(config.seed + 2),
        problems,
        rates,
        len(pool.workers),
        config,
        count,
        descriptions=descriptions,
    )
    return _fine_tune(model, tokenizer, examples, config, start, on_step)


def _fine_tune(
    model: Any,
    tokenizer: Any,
    examples: Sequence[tuple[list[dict[str, str]], str]],
    config: StageConfig,
    start: float,
    on_step: Callable[[int, float], None] | None,
) -> dict[str, float]:
    """Cross-entropy on the targets' tokens; the stats with the seconds since ``start``."""
    encoded = [encode_example(tokenizer, m, p, prompt_loss=False) for m, p in examples]
    spec = config.expert_start
    stats = train_supervised(model, tokenizer, encoded, spec, seed=config.seed, on_step=on_step)
    return {**stats, "seconds": time.perf_counter() - start}
