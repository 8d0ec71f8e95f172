"""``conductor eval``: run a benchmark shard, aggregate records, compare runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from conductor_core.cli._common import (
    conductor_options,
    load_pool_and_bank,
    make_plan_source,
    solve_options,
)


@click.group("eval")
def command() -> None:
    """Sharded benchmark evaluation with baselines, statistics and reports."""


def load_eval_problems(
    benchmark: str, path: str | None, split: str | None, limit: int | None, options: dict
):
    """``demo`` (the bundled slice), a Problem JSONL/Parquet file, or a benchmark name."""
    from conductor_core.tasks.problem import read_problems

    if benchmark == "demo":
        from conductor_core.workers.simulated import bundled_problems_path

        problems = read_problems(bundled_problems_path())
        wanted = split or "test"
        problems = [p for p in problems if p.metadata.get("split", "test") == wanted]
    elif Path(benchmark).suffix in (".jsonl", ".parquet") and Path(benchmark).exists():
        problems = read_problems(benchmark)
    else:
        from conductor_core.tasks.sources import load_benchmark

        problems = load_benchmark(benchmark, path=path, split=split, **options)
    return problems[:limit] if limit else problems


@command.command("run")
@click.option(
    "--benchmark",
    required=True,
    help="'demo' (bundled slice), a benchmark name (see `conductor tasks list`), "
    "or a Problem .jsonl/.parquet file.",
)
@click.option("--path", "source_path", default=None, help="Local copy of the benchmark data.")
@click.option("--split", default=None)
@click.option("--limit", type=int, default=None, help="First N problems only.")
@click.option("--version", "lcb_version", default=None, help="LiveCodeBench release (v1..v6).")
@conductor_options
@click.option("--shard", default="0/1", show_default=True, help="Shard i/n (by problem-id hash).")
@click.option(
    "--baselines",
    default="",
    help="Comma-separated baselines: single, single:W, moa[:LAYERS[:AGG]], sc:W[:N], "
    "reflect:W[:N], random[:SEED], frontier:W.",
)
@click.option("--no-conductor", is_flag=True, help="Evaluate only the baselines.")
@click.option("--repeats", default=1, show_default=True, type=click.IntRange(1, 64))
@click.option("--rounds", default=1, show_default=True, type=click.IntRange(1, 5))
@click.option(
    "--setting",
    default=None,
    help="Generation profile of the pool, e.g. constrained or unconstrained.",
)
@click.option("--concurrency", default=32, show_default=True, help="Problems in flight.")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs/eval"),
    show_default=True,
)
@click.option("--mlflow", "use_mlflow", is_flag=True, help="Log figures and traces to MLflow.")
@click.option("--no-progress", is_flag=True)
def run_cmd(
    benchmark,
    source_path,
    split,
    limit,
    lcb_version,
    pool_path,
    conductor,
    conductor_model,
    conductor_key_env,
    problems_path,
    max_steps,
    access_mode,
    descriptors,
    sample_index,
    shard,
    baselines,
    no_conductor,
    repeats,
    rounds,
    setting,
    concurrency,
    out_dir,
    use_mlflow,
    no_progress,
) -> None:
    """Plan, execute and grade every problem of a shard; write records and a report."""
    from conductor_core.evaluate.aggregate import aggregate
    from conductor_core.evaluate.methods import PlanSourceMethod
    from conductor_core.evaluate.records import read_records
    from conductor_core.evaluate.report import write_report
    from conductor_core.evaluate.runner import RunConfig, run_eval
    from conductor_core.evaluate.shards import parse_shard_spec, shard_by_count
    from conductor_core.evaluate.specs import build_baselines
    from conductor_core.workers.pool import WorkerPool

    index, count = parse_shard_spec(shard)
    options = {"version": lcb_version} if lcb_version else {}
    problems = load_eval_problems(benchmark, source_path, split, limit, options)
    mine = shard_by_count(problems, index, count)
    config, bank = load_pool_and_bank(pool_path, problems_path)
    if setting:
        config = config.with_profile(setting)
    if bank is not None:
        from conductor_core.workers.simulated import ProblemBank

        bank = ProblemBank([*bank, *(p for p in problems if bank.get(p.question) is None)])
    solve_opts = solve_options(
        config,
        max_steps=max_steps,
        access_mode=access_mode,
        descriptors=descriptors,
        rounds=rounds,
        answer_fallback=True,
    )
    methods = (
        []
        if no_conductor
        else [
            PlanSourceMethod(
                f"conductor:{conductor}",
                make_plan_source(conductor, conductor_model, conductor_key_env),
                solve_opts,
            )
        ]
    )
    methods += build_baselines(baselines.split(","), config, options=solve_opts)
    if not methods:
        raise click.UsageError("nothing to evaluate: give a conductor or --baselines")
    out_dir.mkdir(parents=True, exist_ok=True)
    records_path = out_dir / f"records-{index}of{count}.jsonl"
    click.echo(
        f"{benchmark}: {len(mine)} of {len(problems)} problems in shard {index}/{count}; "
        f"methods: {', '.join(m.name for m in methods)}; records: {records_path}"
    )
    run_cfg = RunConfig(
        repeats=repeats, seed=sample_index, concurrency=concurrency, progress=not no_progress
    )

    async def go():
        async with WorkerPool(config, bank=bank) as pool:
            try:
                return await run_eval(mine, methods, pool, records_path, run_cfg)
            finally:
                for m in methods:
                    await m.aclose()

    records = asyncio.run(go())
    summary = aggregate(records)
    names = [w.display_name for w in config.workers]
    paths = write_report(
        summary, out_dir, title=f"{benchmark} shard {index}/{count}", worker_names=names
    )
    _print_summary(summary)
    click.echo(f"report: {paths['markdown']} and {paths['html']}")
    if use_mlflow:
        from conductor_core.evaluate.tracking import log_evaluation

        run_id = log_evaluation(
            summary,
            read_records(records_path),
            paths,
            run_name=f"{Path(benchmark).stem}-{setting or 'default'}-shard{index}of{count}",
            params={
                "benchmark": benchmark,
                "shard": shard,
                "conductor": conductor,
                "repeats": repeats,
                "setting": setting or "default",
                "pool": [w.display_name for w in config.workers],
            },
        )
        click.echo(f"mlflow run: {run_id}")


@command.command("aggregate")
@click.argument("records", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs/eval-report"),
    show_default=True,
)
@click.option("--title", default="Evaluation")
@click.option("--mlflow", "use_mlflow", is_flag=True, help="Log figures and traces to MLflow.")
def aggregate_cmd(records, out_dir, title, use_mlflow) -> None:
    """Merge the records of several shards into one report."""
    from conductor_core.evaluate.aggregate import aggregate
    from conductor_core.evaluate.records import dedupe, read_records
    from conductor_core.evaluate.report import write_report

    recs = dedupe(r for path in records for r in read_records(path))
    if not recs:
        raise click.ClickException("no records in the given files")
    summary = aggregate(recs)
    paths = write_report(summary, out_dir, title=title)
    _print_summary(summary)
    click.echo(f"report: {paths['markdown']} and {paths['html']}")
    if use_mlflow:
        from conductor_core.evaluate.tracking import log_evaluation

        click.echo(f"mlflow run: {log_evaluation(summary, recs, paths, params={'title': title})}")


@command.command("compare")
@click.option("--experiment", default="conductor-eval", show_default=True)
@click.option("--metric", default="accuracy.average", show_default=True)
@click.option("--max-runs", default=20, show_default=True)
def compare_cmd(experiment, metric, max_runs) -> None:
    """Compare evaluation runs logged to MLflow (MLFLOW_TRACKING_URI)."""
    from conductor_core.evaluate.tracking import compare_runs

    rows = compare_runs(experiment, max_runs=max_runs)
    if not rows:
        raise click.ClickException(f"no runs in MLflow experiment '{experiment}'")
    from rich.console import Console
    from rich.table import Table

    keys = sorted({k for r in rows for k in r["metrics"] if k.startswith("accuracy.")})
    table = Table(title=f"{experiment} (sorted by {metric})")
    for col in ["run", "name", *keys, "cost_per_question"]:
        table.add_column(col)
    rows.sort(key=lambda r: -(r["metrics"].get(metric) or 0.0))
    for r in rows:
        m = r["metrics"]
        table.add_row(
            r["run_id"][:8],
            r["name"],
            *(f"{100 * m.get(k, 0):.2f}" for k in keys),
            f"{m.get('cost_per_question.average', 0):.5f}",
        )
    Console().print(table)


def _print_summary(summary) -> None:
    from rich.console import Console
    from rich.table import Table

    from conductor_core.evaluate.report import accuracy_table, cost_table

    console = Console()
    for title, (header, rows) in (
        ("Accuracy (%)", accuracy_table(summary)),
        ("Cost per question", cost_table(summary)),
    ):
        table = Table(title=title)
        for h in header:
            table.add_column(h)
        for r in rows:
            table.add_row(*r)
        console.print(table)
