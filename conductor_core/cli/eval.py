"""``conductor eval``: run a benchmark shard, aggregate records, compare runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from conductor_core.cli._common import conductor_options
from conductor_core.cli.options import FORMAT_JSON, RenamedOptionsCommand
from conductor_core.errors import ConfigError
from conductor_core.evaluate.config import (
    EVALUATION_EXPERIMENTS,
    load_eval_config,
    parse_eval_config,
)
from conductor_core.evaluate.shards import parse_shard_spec
from conductor_core.evaluate.specs import baseline_forms, baseline_help
from conductor_core.tasks.problem import read_problems
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

# Made from the registry of baselines (evaluate/specs.py), so the help names every one it accepts;
# "\b" keeps click from re-wrapping the table.
_BASELINES_EPILOG = "Baselines (--baselines, comma-separated):\n\n\b\n" + baseline_help(width=78)


@click.group("eval")
def command() -> None:
    """Sharded benchmark evaluation with baselines, statistics and reports."""


# option (parameter name) -> EvalConfig field, for the options that map one to one
_FIELDS = {
    "benchmark": "benchmark",
    "source_path": "path",
    "split": "split",
    "limit": "limit",
    "pool_path": "pool",
    "problems_path": "problems",
    "conductor": "conductor",
    "conductor_model": "conductor_model",
    "conductor_key_env": "conductor_key_env",
    "plan_grammar": "plan_grammar",
    "conductor_temperature": "conductor_temperature",
    "conductor_max_tokens": "conductor_max_tokens",
    "max_steps": "max_steps",
    "access_mode": "access_mode",
    "descriptors": "descriptors",
    "prompt_style": "prompt_style",
    "sample_index": "seed",
    "baselines": "baselines",
    "repeats": "repeats",
    "rounds": "rounds",
    "setting": "setting",
    "concurrency": "concurrency",
    "out_dir": "output_dir",
}


def config_overrides(ctx: click.Context, options: dict[str, Any]) -> dict[str, Any]:
    """The EvalConfig fields set by the options given on the command line (not by defaults)."""
    from click.core import ParameterSource

    def given(name: str) -> bool:
        source = ctx.get_parameter_source(name)
        return source not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)

    out: dict[str, Any] = {}
    for name, key in _FIELDS.items():
        if given(name):
            value = options[name]
            out[key] = str(value) if isinstance(value, Path) else value
    if given("lcb_version"):
        out["options"] = {"version": options["lcb_version"]}
    if given("shard"):
        index, count = parse_shard_spec(options["shard"])
        out["shard"] = {"index": index, "count": count}
    if options["no_conductor"]:
        out["evaluate_conductor"] = False
    if options["use_mlflow"]:
        out["mlflow"] = {"enabled": True}
    return out


@command.command("run", epilog=_BASELINES_EPILOG)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Evaluation config YAML (fields of EvalConfig, see docs/evaluation.md); the options "
    "given on the command line override it.",
)
@click.option(
    "--benchmark",
    default=None,
    help="'demo' (bundled slice), a benchmark name (see `conductor tasks list`), "
    "or a Problem .jsonl/.parquet file. Required unless the --config file names it.",
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
    help=f"Comma-separated baselines: {', '.join(baseline_forms())} (see below).",
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
@click.option(
    "--parent-run",
    default=None,
    help="MLflow run of the pipeline run (implies --mlflow): log as its nested stage run "
    "(`aggregate`, or `evaluate-IofN` for one of several shards), one nested run per method.",
)
@click.option("--no-progress", is_flag=True)
@click.option("--print-config", is_flag=True, help="Print the resolved config as YAML and exit.")
@click.option(
    "--preset",
    default=None,
    help="Run a named table: paper-main (every benchmark of the paper, unconstrained) or "
    "paper-constrained (in-domain, training setting); other options apply to each benchmark.",
)
@click.pass_context
def run_cmd(
    ctx: click.Context,
    config_path: Path | None,
    preset: str | None,
    no_progress: bool,
    print_config: bool,
    parent_run: str | None,
    **options: Any,
) -> None:
    """Plan, execute and grade every problem of a shard; write records and a report."""
    # lazy: conductor --help imports every command module; this adds ~123 ms
    from conductor_core.evaluate.shard_job import run_shard

    overrides = config_overrides(ctx, options)
    if preset is not None:
        _run_preset(preset, overrides, not no_progress, print_config, parent_run)
        return
    if config_path is not None:
        config = load_eval_config(config_path, overrides)
    elif "benchmark" not in overrides:
        raise click.UsageError("give --benchmark (or a --config file that names one)")
    else:
        config = parse_eval_config(overrides, origin="conductor eval run")
    if print_config:
        click.echo(config.to_yaml(), nl=False)
        return
    result = run_shard(config, progress=not no_progress, log=click.echo, parent_run_id=parent_run)
    _print_summary(result.summary)
    click.echo(f"report: {result.report['markdown']} and {result.report['html']}")
    if result.run_id is not None:
        click.echo(f"mlflow run: {result.run_id}")


def _run_preset(name, overrides, progress, print_config, parent_run) -> None:
    # lazy: conductor --help imports every command module; this adds ~123 ms
    from conductor_core.evaluate.presets import preset_configs, preset_setting
    from conductor_core.evaluate.records import read_record_sources
    from conductor_core.evaluate.report import aggregate_report
    from conductor_core.evaluate.shard_job import run_shard
    from conductor_core.tasks.sources.local import check_local_copies

    dicts = preset_configs(name, overrides)
    hub = check_local_copies(
        [(Path(d["output_dir"]).name, d["path"]) for d in dicts], what=f"preset {name}"
    )
    configs = []
    for d in dicts:
        if Path(d["output_dir"]).name in hub:
            d["path"] = None
        configs.append(parse_eval_config(d, origin=f"preset {name}"))
    if print_config:
        click.echo("---\n".join(c.to_yaml() for c in configs), nl=False)
        return
    files = [
        run_shard(config, progress=progress, log=click.echo, parent_run_id=parent_run).records_path
        for config in configs
    ]
    out = Path(overrides.get("output_dir", f"runs/{name}"))
    shard = configs[0].shard
    report = aggregate_report(
        read_record_sources(files),
        out / f"report-{shard.tag}",
        title=f"{name} shard {shard}",
        paper_setting=preset_setting(name),
    )
    _print_summary(report.summary)
    click.echo(f"report: {report.paths['markdown']} and {report.paths['html']}")


@command.command("aggregate")
@click.argument("records", nargs=-1, required=True, type=click.Path(exists=True))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("runs/eval-report"),
    show_default=True,
)
@click.option("--title", default="Evaluation")
@click.option("--mlflow", "use_mlflow", is_flag=True, help="Log figures and traces to MLflow.")
@click.option(
    "--parent-run",
    default=None,
    help="MLflow run of the pipeline run (implies --mlflow): log as its nested `aggregate` stage "
    "run, with one nested run per method.",
)
def aggregate_cmd(records, out_dir, title, use_mlflow, parent_run) -> None:
    """Merge the records of several shards into one report. RECORDS are records files or shard
    output folders (their records-*.jsonl); a record repeated (same method, problem and repeat)
    counts once, the last one."""
    # lazy: conductor --help imports every command module; this adds ~53 ms
    from conductor_core.evaluate.records import read_record_sources
    from conductor_core.evaluate.report import aggregate_report

    recs = read_record_sources(records)
    if not recs:
        raise click.ClickException("no records in the given files")
    report = aggregate_report(recs, out_dir, title=title)
    _print_summary(report.summary)
    click.echo(f"report: {report.paths['markdown']} and {report.paths['html']}")
    if use_mlflow or parent_run:
        # lazy: conductor --help imports every command module; this adds ~42 ms
        from conductor_core.evaluate.mlflow_logging import log_evaluation

        logged = log_evaluation(
            report.summary,
            report.records,
            report.paths,
            params={"title": title},
            run_name=title,
            parent_run_id=parent_run,
        )
        click.echo(f"mlflow run: {logged.run_id}")


@command.command("fit-router")
@click.argument("kind", type=click.Choice(["routerdc", "masrouter"]))
@click.argument("records", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--problems",
    "problems_path",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The training questions (a Problem JSONL/Parquet file): those the records graded.",
)
@click.option("--pool", "pool_path", default=None, help="Pool YAML (default: the bundled one).")
@click.option("--encoder", default=None, help="Sentence encoder (default all-MiniLM-L6-v2).")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--executed",
    is_flag=True,
    help="masrouter: reward each sampled system by running it on the pool and grading it, as the "
    "paper does (no records needed; costs epochs x questions x samples plan executions, printed "
    "first), instead of the surrogate scored from `single` records.",
)
@click.option("--setting", default=None, help="--executed: the pool's generation profile.")
@click.option("--epochs", type=click.IntRange(1), default=None, help="masrouter: training epochs.")
@click.option(
    "--samples", type=click.IntRange(2), default=None, help="masrouter: systems per question."
)
def fit_router_cmd(
    kind, records, problems_path, pool_path, encoder, out_dir, executed, setting, epochs, samples
) -> None:
    """Train a RouterDC or MASRouter baseline on the per-worker correctness that evaluation
    records of `single` (every worker alone) hold, e.g. `eval run --baselines single` on a
    training split; or (masrouter --executed) on executed outcomes. Then evaluate it with
    `--baselines KIND:OUT`."""
    # lazy: conductor --help imports every command module; this adds ~43 ms
    from conductor_core.evaluate.records import read_records
    from conductor_core.evaluate.routers.base import single_methods

    if kind != "masrouter" and (executed or epochs or samples):
        raise ConfigError("--executed, --epochs and --samples are options of masrouter")
    pool = load_pool(pool_path or bundled_pool_path())
    if setting:
        pool = pool.with_profile(setting)
    methods = single_methods([w.display_name for w in pool.workers])
    problems = read_problems(problems_path)
    recs = [r for path in records for r in read_records(path)]
    missing = [m for m in methods if not any(r.method == m for r in recs)]
    if missing and not executed:
        raise ConfigError(
            f"records: no records of {', '.join(missing)}; run `conductor eval run --baselines "
            "single` on the training questions first"
            + (" (or train masrouter with --executed)" if kind == "masrouter" else "")
        )
    click.echo(f"training {kind} on {len(problems)} questions, {len(recs)} records ...", err=True)
    args = (recs, problems, out_dir)
    if kind == "routerdc":
        # lazy: conductor --help imports every command module; this adds ~43 ms
        from conductor_core.evaluate.routers.routerdc import fit_routerdc

        folder = fit_routerdc(*args, worker_methods=methods, encoder=encoder)
    else:
        from contextlib import nullcontext
        from dataclasses import replace

        # lazy: conductor --help imports every command module; this adds ~94 ms
        from conductor_core.evaluate.routers.masrouter import (
            MASRouterConfig,
            fit_masrouter,
            pool_executor,
        )

        cfg = MASRouterConfig()
        cfg = replace(cfg, epochs=epochs or cfg.epochs, samples=samples or cfg.samples)
        if executed:
            click.echo(
                f"executed outcomes: {cfg.epochs * len(problems) * cfg.samples} plan executions "
                f"({cfg.epochs} epochs x {len(problems)} questions x {cfg.samples} systems)",
                err=True,
            )
        with pool_executor(pool) if executed else nullcontext() as execute:
            folder = fit_masrouter(
                *args,
                worker_methods=methods,
                encoder=encoder,
                config=cfg,
                execute=execute,
                log=lambda line: click.echo(line, err=True),
            )
    click.echo(f"trained {kind} on {len(problems)} questions: {folder}")
    click.echo(f"evaluate it with: conductor eval run --baselines {kind}:{folder} ...")


@command.command("compare", cls=RenamedOptionsCommand, renamed=[FORMAT_JSON])
@click.option(
    "--experiment",
    default=None,
    help="MLflow experiment to read (default: every experiment that holds evaluations, "
    f"{' and '.join(EVALUATION_EXPERIMENTS)}; every experiment when a run is named).",
)
@click.option(
    "--parent-run",
    default=None,
    help="An evaluation run, or a pipeline run (then the methods of all its evaluations).",
)
@click.option(
    "--kfp-run-id",
    default=None,
    help="A pipeline run: its KFP run id, its MLflow run name (<pipeline>-<KFP run id>) or, for "
    "a local run, its name (the folder under kfp/ the summary prints).",
)
@click.option(
    "--tracking-uri", default=None, help="Tracking URI (default: $MLFLOW_TRACKING_URI, else local)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the rows as JSON instead of a table.")
@click.option(
    "--max-runs", default=200, show_default=True, type=click.IntRange(1), help="Newest runs read."
)
def compare_cmd(experiment, parent_run, kfp_run_id, tracking_uri, as_json, max_runs) -> None:
    """Compare evaluated methods side by side: one row per method run read back from MLflow,
    with accuracy per benchmark and overall, cost and calls per question. Without a run, the
    newest evaluations, whether run on their own or by a pipeline."""
    import json

    # lazy: conductor --help imports every command module; this adds ~42 ms
    from conductor_core.evaluate.mlflow_logging import compare_runs

    if parent_run and kfp_run_id:
        raise click.UsageError("give --parent-run or --kfp-run-id, not both")
    rows = compare_runs(
        experiment,
        parent_run_id=parent_run,
        kfp_run_id=kfp_run_id,
        tracking_uri=tracking_uri,
        max_runs=max_runs,
    )
    if not rows:
        if parent_run:
            where = f"run {parent_run}"
        elif kfp_run_id:
            where = f"pipeline run {kfp_run_id}"
        elif experiment:
            where = f"experiment '{experiment}'"
        else:
            where = "experiments " + " and ".join(f"'{e}'" for e in EVALUATION_EXPERIMENTS)
        raise click.ClickException(f"no method runs found for {where} in MLflow")
    if as_json:
        click.echo(json.dumps([r.to_dict() for r in rows], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    benchmarks = sorted({b for r in rows for b in r.benchmarks()})
    table = Table(title="Accuracy (%) per benchmark, cost and calls per question")
    columns = ["evaluation", "method", *benchmarks, "overall", "$/q", "calls/q", "run"]
    for col in columns:
        table.add_column(col, no_wrap=col in ("method", "run"))

    def pct(value: float | None) -> str:
        return "–" if value is None else f"{100 * value:.2f}"

    for r in rows:
        m = r.metrics
        cost, calls = m.get("cost_per_question"), m.get("calls_per_question")
        table.add_row(
            r.evaluation,
            r.method,
            *(pct(m.get(f"accuracy/{b}")) for b in benchmarks),
            pct(m.get("accuracy")),
            "–" if cost is None else f"{cost:.5f}",
            "–" if calls is None else f"{calls:.2f}",
            r.run_id[:8],
        )
    Console(width=max(120, 24 * (len(columns) + 1))).print(table)


def _print_summary(summary) -> None:
    from rich.console import Console
    from rich.table import Table

    # lazy: conductor --help imports every command module; this adds ~53 ms
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
