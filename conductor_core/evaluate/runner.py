"""The shard runner: for each (method, problem, repeat) plan, execute and grade, appending one
record per outcome as it goes. Restarting skips what is done; infrastructure failures are retried,
then recorded as such (never counted as wrong answers)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conductor_core.evaluate.methods import Attempt, Method
from conductor_core.evaluate.records import EvalRecord, RecordWriter, dedupe, read_records
from conductor_core.outcome import grade
from conductor_core.sample_streams import evaluation_index
from conductor_core.tasks.problem import Problem
from conductor_core.workflow.executor import WorkerCaller


@dataclass(frozen=True)
class RunConfig:
    """How a shard is run.

    ``repeats`` runs per problem (sample indices derive from ``seed`` and the repeat number);
    ``concurrency`` bounds problems in flight (the pool bounds calls per worker); an attempt spoiled
    by infrastructure is retried ``infra_retries`` times, then recorded as an infrastructure
    failure. ``retry_infra_on_resume`` re-runs recorded infrastructure failures on restart.
    ``batch_planning`` plans every first round of the shard in one batch when the plan source
    can (vLLM offline batch, local transformers).
    """

    repeats: int = 1
    seed: int = 0
    concurrency: int = 32
    infra_retries: int = 2
    keep_traces: bool = True
    retry_infra_on_resume: bool = False
    progress: bool = True
    grade_timeout_s: float = 30.0
    batch_planning: bool = True

    def __post_init__(self) -> None:
        evaluation_index(self.seed, 0)  # refuses a seed the evaluation stream cannot hold

    def sample_index(self, repeat: int) -> int:
        """The sample index of a repeat: same seed and repeat, same sample
        (:func:`~conductor_core.sample_streams.evaluation_index`)."""
        return evaluation_index(self.seed, repeat)


async def evaluate_one(
    method: Method, problem: Problem, repeat: int, pool: WorkerCaller, config: RunConfig
) -> EvalRecord:
    """Run and grade one attempt (retrying infrastructure failures)."""
    sample = config.sample_index(repeat)
    t0 = time.perf_counter()
    attempt: Attempt | None = None
    tries = 0
    for tries in range(1, config.infra_retries + 2):  # noqa: B007 - tries is reported
        attempt = await method.attempt(problem, pool, sample)
        if not attempt.summary.infra_error:
            break
    assert attempt is not None
    outcome = await grade(problem, attempt.summary, timeout_s=config.grade_timeout_s)
    return EvalRecord(
        **outcome.model_dump(exclude={"wall_s"}),
        wall_s=time.perf_counter() - t0,
        problem_id=problem.id,
        benchmark=problem.source,
        method=method.name,
        repeat=repeat,
        sample_index=sample,
        infra_attempts=tries,
        trace=attempt.trace if config.keep_traces else None,
    )


async def run_eval(
    problems: Sequence[Problem],
    methods: Sequence[Method],
    pool: WorkerCaller,
    out_path: str | Path,
    config: RunConfig | None = None,
) -> list[EvalRecord]:
    """Evaluate every method on every problem ``config.repeats`` times, resumably.

    Records are appended to ``out_path`` as they complete. Returns all records of the file
    (earlier runs included), one per (method, problem, repeat).
    """
    cfg = config or RunConfig()
    names = [m.name for m in methods]
    if len(set(names)) != len(names):
        raise ValueError(f"method names must be unique, got {names}")
    existing = read_records(out_path, repair=True)
    done = {r.key for r in existing if not (cfg.retry_infra_on_resume and r.infra_error)}
    todo = [
        (m, p, k)
        for m in methods
        for p in sorted(problems, key=lambda p: p.id)
        for k in range(cfg.repeats)
        if (m.name, p.id, k) not in done
    ]
    if cfg.batch_planning:
        for m in methods:
            if hasattr(m, "prefetch"):
                items = [(p, cfg.sample_index(k)) for mm, p, k in todo if mm is m]
                await m.prefetch(items, len(pool))
    sem = asyncio.Semaphore(cfg.concurrency)
    new: list[EvalRecord] = []
    with RecordWriter(out_path) as writer, _Progress(len(todo), len(done), cfg.progress) as bar:

        async def one(method: Method, problem: Problem, repeat: int) -> None:
            async with sem:
                record = await evaluate_one(method, problem, repeat, pool, cfg)
            writer.write(record)
            new.append(record)
            bar.advance(record)

        await asyncio.gather(*(one(m, p, k) for m, p, k in todo))
    return dedupe([*existing, *new])


class _Progress:
    """A rich progress bar with running accuracy, cost and infrastructure failures."""

    def __init__(self, total: int, already: int, enabled: bool) -> None:
        self.total = total
        self.already = already
        self.enabled = enabled and total > 0
        self.graded = self.correct = self.infra = 0
        self.cost = 0.0
        self._progress = None
        self._task = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(
                TextColumn("eval"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeRemainingColumn(),
                TextColumn("{task.fields[stats]}"),
            )
            self._progress.start()
            note = f"(resumed: {self.already} done) " if self.already else ""
            self._task = self._progress.add_task("eval", total=self.total, stats=note)
        return self

    def advance(self, record: EvalRecord) -> None:
        self.cost += record.cost
        if record.infra_error:
            self.infra += 1
        else:
            self.graded += 1
            self.correct += record.correct
        if self._progress is not None:
            acc = self.correct / self.graded if self.graded else 0.0
            stats = f"acc {acc:.3f} · ${self.cost:.4f} · infra {self.infra}"
            self._progress.update(self._task, advance=1, stats=stats)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.stop()
