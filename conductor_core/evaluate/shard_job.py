"""One evaluation shard as a library call: :func:`run_shard` reads an :class:`EvalConfig`, runs
every method on the shard's problems, and writes records, the report and the shard's files.

What lands in ``output_dir`` (``IofN`` is the shard, e.g. ``0of8``):

* ``records-IofN.jsonl``: one record per (method, problem, repeat), appended as they complete.
  It is the checkpoint: a second call with the same config skips what is recorded.
* ``problems-IofN.jsonl``: the shard's problems (simulated workers of the pool also know them).
* ``config-IofN.yaml``: the config the shard ran with.
* ``report.md``, ``report.html``, ``summary.json`` and the plots (see :mod:`.report`).
* ``result-IofN.json``: a small summary of the shard (counts, overall figures per method, paths,
  the MLflow run id).

``conductor eval run`` builds the config from its options and calls :func:`run_shard`.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from conductor_core.evaluate.aggregate import OVERALL
from conductor_core.evaluate.config import EvalConfig
from conductor_core.evaluate.methods import PlanSourceMethod
from conductor_core.evaluate.mlflow_logging import EVAL_STAGE, log_evaluation
from conductor_core.evaluate.records import dedupe, read_records
from conductor_core.evaluate.report import aggregate_report
from conductor_core.evaluate.runner import RunConfig, run_eval
from conductor_core.evaluate.shards import shard_by_count
from conductor_core.evaluate.specs import build_baselines
from conductor_core.policy.factory import load_plan_source
from conductor_core.solve import solve_options
from conductor_core.tasks.problem import read_problems, write_jsonl
from conductor_core.tasks.sources import load_benchmark
from conductor_core.workers.bundled import bundled_pool_path, bundled_problems_path
from conductor_core.workers.config import load_pool
from conductor_core.workers.pool import WorkerPool

if TYPE_CHECKING:  # pragma: no cover
    from conductor_core.evaluate.aggregate import Summary
    from conductor_core.tasks.problem import Problem


@dataclass
class ShardResult:
    """What a finished shard wrote, and its figures."""

    config: EvalConfig
    out_dir: Path
    records_path: Path
    problems_path: Path
    config_path: Path
    result_path: Path
    report: dict[str, str]
    """The report's files, as :func:`~conductor_core.evaluate.report.write_report` returns them
    (``markdown``, ``html``, ``summary``, and ``plots`` comma-separated)."""
    summary: Summary
    problems: int
    """Problems in the shard."""
    total_problems: int
    """Problems of the benchmark (all shards)."""
    methods: list[str] = field(default_factory=list)
    records: int = 0
    """Records in the records file after the run (earlier runs included)."""
    new_records: int = 0
    """Records this call added (0 when the shard was already complete)."""
    seconds: float = 0.0
    run_id: str | None = None
    """The MLflow evaluation run, when logged."""
    method_run_ids: dict[str, str] = field(default_factory=dict)
    """The MLflow run of each method (nested in :attr:`run_id`), when logged."""

    def to_dict(self) -> dict[str, Any]:
        """The small summary written to ``result-IofN.json``."""
        overall = {}
        for m in self.summary.methods:
            s = self.summary.get(m, OVERALL)
            overall[m] = {
                "accuracy": s.accuracy,
                "stderr": s.stderr,
                "cost_per_question": s.cost_per_question,
                "tokens_per_question": s.tokens_per_question,
                "format_error_rate": s.format_error_rate,
                "infra_failure_rate": s.infra_failure_rate,
            }
        return {
            "benchmark": self.config.benchmark,
            "shard": str(self.config.shard),
            "problems": self.problems,
            "total_problems": self.total_problems,
            "methods": self.methods,
            "records": self.records,
            "new_records": self.new_records,
            "seconds": round(self.seconds, 3),
            "overall": overall,
            "paths": {
                "records": str(self.records_path),
                "problems": str(self.problems_path),
                "config": str(self.config_path),
                **{k: v for k, v in self.report.items() if v},
            },
            "mlflow_run_id": self.run_id,
            "mlflow_method_runs": self.method_run_ids,
        }


def load_eval_problems(
    benchmark: str,
    path: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    options: dict[str, Any] | None = None,
) -> list[Problem]:
    """``demo`` (the bundled slice), a Problem JSONL/Parquet file, or a benchmark name."""
    if benchmark == "demo":
        problems = read_problems(bundled_problems_path())
        wanted = split or "test"
        problems = [p for p in problems if p.metadata.get("split", "test") == wanted]
    elif Path(benchmark).suffix in (".jsonl", ".parquet") and Path(benchmark).exists():
        problems = read_problems(benchmark)
        if split is not None:
            problems = [p for p in problems if p.metadata.get("split", "test") == split]
    else:
        problems = load_benchmark(benchmark, path=path, split=split, **(options or {}))
    return problems[:limit] if limit else problems


def run_shard(
    config: EvalConfig,
    *,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    parent_run_id: str | None = None,
    stage: str | None = None,
) -> ShardResult:
    """Plan, execute and grade every problem of the config's shard with every method; write the
    records, the report, the shard's problems, config and result; log to MLflow if enabled.

    Resumable: the records file is the checkpoint, and a call on a complete shard adds nothing
    (it rewrites the report). ``log`` receives one line before the work starts. Raises
    :class:`~conductor_core.errors.ConductorError` (bad baseline, Conductor or pool) before
    anything is written.

    MLflow (``config.mlflow.enabled``, or a ``parent_run_id``): an evaluation run with one nested
    run per method (see :func:`~conductor_core.evaluate.mlflow_logging.log_evaluation`). With
    ``parent_run_id`` (a pipeline run from
    :func:`~conductor_core.track.pipeline_runs.pipeline_run`) the evaluation run is that run's
    nested run of ``stage`` (default ``aggregate`` for a single shard, ``evaluate-IofN`` for one
    shard of several).
    """
    import asyncio

    say = log or (lambda msg: None)
    started = time.perf_counter()
    index, count = config.shard.index, config.shard.count
    problems = load_eval_problems(
        config.benchmark, config.path, config.split, config.limit, config.options
    )
    mine = shard_by_count(problems, index, count)

    pool_config = load_pool(config.pool or bundled_pool_path())
    if config.setting:
        pool_config = pool_config.with_profile(config.setting)
    opts = solve_options(
        pool_config,
        max_steps=config.max_steps,
        access_mode=config.access_mode,
        descriptors=config.descriptors,
        prompt_style=config.prompt_style,
        rounds=config.rounds,
        answer_fallback=True,
    )
    baselines = build_baselines(
        config.baselines, pool_config, options=opts, encoder=config.router_encoder
    )
    methods = []
    if config.evaluate_conductor:
        source = load_plan_source(
            config.conductor,
            model=config.conductor_model,
            api_key_env=config.conductor_key_env,
            plan_grammar=config.plan_grammar,
            temperature=config.conductor_temperature,
            plan_tokens=config.conductor_max_tokens,
        )
        name = config.conductor_name or f"conductor:{config.conductor}"
        methods.append(PlanSourceMethod(name, source, opts))
    methods += baselines

    out = config.output_path()
    out.mkdir(parents=True, exist_ok=True)
    tag = config.shard.tag
    records_path = config.records_path()
    problems_path = out / f"problems-{tag}.jsonl"
    config_path = out / f"config-{tag}.yaml"
    config.to_yaml(config_path)
    write_jsonl(mine, problems_path)
    if any(w.provider == "simulated" for w in pool_config.workers):
        # Simulated workers answer the questions they know: the shard's own, besides their pool's
        # (or, with ``problems``, that file's instead).
        known = [config.problems, problems_path] if config.problems else [problems_path]
        pool_config = pool_config.with_simulation_problems(
            known, replace=config.problems is not None
        )

    say(
        f"{config.benchmark}: {len(mine)} of {len(problems)} problems in shard {index}/{count}; "
        f"methods: {', '.join(m.name for m in methods)}; records: {records_path}"
    )
    before = len(dedupe(read_records(records_path)))
    run_cfg = RunConfig(
        repeats=config.repeats,
        seed=config.seed,
        concurrency=config.concurrency,
        infra_retries=config.infra_retries,
        keep_traces=config.keep_traces,
        progress=progress,
    )

    async def go():
        async with WorkerPool(pool_config) as pool:
            try:
                return await run_eval(mine, methods, pool, records_path, run_cfg)
            finally:
                for m in methods:
                    await m.aclose()

    aggregated = aggregate_report(
        asyncio.run(go()),
        out,
        title=f"{config.benchmark} shard {index}/{count}",
        worker_names=[w.display_name for w in pool_config.workers],
    )
    records, summary, report = aggregated.records, aggregated.summary, aggregated.paths
    result = ShardResult(
        config=config,
        out_dir=out,
        records_path=records_path,
        problems_path=problems_path,
        config_path=config_path,
        result_path=out / f"result-{tag}.json",
        report=report,
        summary=summary,
        problems=len(mine),
        total_problems=len(problems),
        methods=[m.name for m in methods],
        records=len(records),
        new_records=max(0, len(records) - before),
    )
    if config.mlflow.enabled or parent_run_id:
        baseline_names = {m.name for m in baselines}
        conductor_methods = {m.name for m in methods} - baseline_names
        source = config.conductor + (
            f" ({config.conductor_model})" if config.conductor_model else ""
        )
        logged = log_evaluation(
            summary,
            records,
            report,
            run_name=config.run_name(),
            experiment=config.mlflow.experiment,
            parent_run_id=parent_run_id,
            stage=stage or (EVAL_STAGE if count == 1 else f"evaluate-{tag}"),
            trace_sample=config.mlflow.trace_sample,
            seed=config.seed,
            params={
                "benchmark": config.benchmark,
                "shard": str(config.shard),
                "repeats": config.repeats,
                "rounds": config.rounds,
                "profile": config.setting or "default",
                "pool": ", ".join(w.display_name for w in pool_config.workers),
            },
            method_params={
                m: {
                    "kind": "conductor" if m in conductor_methods else "baseline",
                    "source": source if m in conductor_methods else m,
                }
                for m in result.methods
            },
        )
        result.run_id = logged.run_id
        result.method_run_ids = logged.method_runs
    result.seconds = time.perf_counter() - started
    result.result_path.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    return result
