"""Difficulty filter: keep problems a reference worker (or several) neither always nor never solves.

Each problem is run ``samples`` times on each reference worker as a one-step plan (a fixed plan
source) through the solve loop, like every other plan (so the pool's retries, cache and accounting
apply), and the answers are graded. The solve
rate counts only samples without an infrastructure failure; a problem whose samples all failed on
infrastructure has no rate and is removed with that reason. Kept problems carry
``metadata["solve_rate"]`` and ``metadata["solve_samples"]``.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from conductor_core.data.config import DifficultyConfig
from conductor_core.data.records import Filtered, Removal
from conductor_core.errors import ConfigError
from conductor_core.policy.fixed import one_step
from conductor_core.sample_streams import curation_index
from conductor_core.solve import SolveOptions, solve
from conductor_core.tasks.grading import agrade
from conductor_core.tasks.problem import Problem, write_jsonl
from conductor_core.workers.config import load_pool
from conductor_core.workers.pool import WorkerPool

if TYPE_CHECKING:  # pragma: no cover
    from conductor_core.workflow.executor import WorkerCaller

Grader = Callable[[Problem, str], Awaitable[bool]]
"""Async grader returning whether an answer is right."""


@dataclass(frozen=True)
class Rating:
    """Solve statistics of one problem."""

    correct: int
    valid: int
    infra_errors: int

    @property
    def rate(self) -> float | None:
        """Correct / valid samples, or None when no sample ran cleanly."""
        return self.correct / self.valid if self.valid else None


async def _default_grader(problem: Problem, answer: str) -> bool:
    verdict = await agrade(problem, answer)
    return bool(verdict.correct)


async def rate_problems(
    problems: Sequence[Problem],
    pool: WorkerCaller,
    config: DifficultyConfig,
    *,
    grader: Grader | None = None,
    on_done: Callable[[], None] | None = None,
) -> list[Rating]:
    """Rate every problem on ``pool`` (anything with the executor's ``WorkerCaller`` shape)."""
    grade = grader or _default_grader
    sem = asyncio.Semaphore(config.concurrency)
    # One round of one step: the reference worker alone, as the plan says, nothing more.
    options = SolveOptions(max_rounds=1, max_steps=1)
    sources = {w: one_step(w, config.subtask, f"difficulty: worker {w}") for w in config.workers}

    async def one(problem: Problem) -> Rating:
        correct = valid = infra = 0
        async with sem:
            for worker in config.workers:
                for sample in range(config.samples):
                    trace = await solve(
                        problem.question,
                        sources[worker],
                        pool,
                        options=options,
                        # the curation stream: training never draws these samples again
                        sample_index=curation_index(sample),
                    )
                    if trace.infra_error:
                        infra += 1
                        continue
                    valid += 1
                    if trace.answer is not None and await grade(problem, trace.answer):
                        correct += 1
        if on_done is not None:
            on_done()
        return Rating(correct, valid, infra)

    return list(await asyncio.gather(*(one(p) for p in problems)))


def apply_ratings(
    problems: Sequence[Problem], ratings: Sequence[Rating], config: DifficultyConfig
) -> Filtered:
    """Keep problems with ``min_rate < rate < max_rate``; record the rate on kept problems."""
    kept: list[Problem] = []
    removed: list[Removal] = []
    for p, r in zip(problems, ratings, strict=True):
        rate = r.rate
        if rate is None:
            removed.append(
                Removal(id=p.id, reason=f"unrated: all {r.infra_errors} samples hit infra errors")
            )
        elif rate <= config.min_rate:
            removed.append(
                Removal(id=p.id, reason=f"too hard: solve rate {rate:.2f} ({r.correct}/{r.valid})")
            )
        elif rate >= config.max_rate:
            removed.append(
                Removal(id=p.id, reason=f"too easy: solve rate {rate:.2f} ({r.correct}/{r.valid})")
            )
        else:
            meta = {**p.metadata, "solve_rate": round(rate, 4), "solve_samples": r.valid}
            kept.append(p.model_copy(update={"metadata": meta}))
    return Filtered(kept, removed)


def difficulty_filter(
    problems: Sequence[Problem],
    config: DifficultyConfig,
    *,
    pool: WorkerCaller | None = None,
    grader: Grader | None = None,
    progress: bool = True,
) -> Filtered:
    """Run the difficulty filter (synchronously). Without ``pool``, the pool YAML of the config is
    loaded with its response cache enabled (at ``cache_path`` when set) and its simulated workers
    know exactly these problems."""
    if not problems:
        return Filtered([], [])
    return asyncio.run(_run(list(problems), config, pool, grader, progress))


async def _run(
    problems: list[Problem],
    config: DifficultyConfig,
    pool: WorkerCaller | None,
    grader: Grader | None,
    progress: bool,
) -> Filtered:
    from rich.progress import Progress

    owned = pool is None
    if pool is None:
        pool = _open_pool(problems, config)
    try:
        with Progress(disable=not progress, transient=False) as bar:
            task = bar.add_task("difficulty filter", total=len(problems))
            ratings = await rate_problems(
                problems,
                pool,
                config,
                grader=grader,
                on_done=lambda: bar.advance(task),
            )
    finally:
        if owned:
            await _close_pool(pool)
    return apply_ratings(problems, ratings, config)


def _open_pool(problems: list[Problem], config: DifficultyConfig) -> WorkerCaller:
    pool_config = load_pool(config.pool)
    bad = [w for w in config.workers if not 0 <= w < len(pool_config)]
    if bad:
        raise ConfigError(
            f"difficulty.workers: ids {bad} are not in the pool {config.pool} "
            f"(ids 0..{len(pool_config) - 1})"
        )
    cache = pool_config.cache.model_copy(update={"enabled": True})
    if config.cache_path:
        cache = cache.model_copy(update={"path": config.cache_path})
    pool_config = pool_config.model_copy(update={"cache": cache})
    if not any(w.provider == "simulated" for w in pool_config.workers):
        return WorkerPool(pool_config)
    # The simulated workers read the problems they know from a file, when the pool is built.
    with tempfile.TemporaryDirectory(prefix="conductor-difficulty-") as tmp:
        path = Path(tmp) / "problems.jsonl"
        write_jsonl(problems, path)
        return WorkerPool(pool_config.with_simulation_problems([path], replace=True))


async def _close_pool(pool: object) -> None:
    for name in ("aclose", "close"):
        closer = getattr(pool, name, None)
        if closer is not None:
            result = closer()
            if asyncio.iscoroutine(result):
                await result
            return
