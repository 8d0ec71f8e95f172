"""MLflow logging of evaluations: figures as metrics, reports and plots as artifacts, a
per-problem table, and a seeded sample of workflows as MLflow traces (one span per step).

Built on :mod:`conductor_core.track`: the tracking URI defaults to a local SQLite store, an
``MLFLOW_RUN_ID`` in the environment is reused, a crash marks the run FAILED, and params, tables
and traces are scrubbed of anything that looks like a secret.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from conductor_core.evaluate.aggregate import OVERALL, Summary
from conductor_core.evaluate.records import EvalRecord

EXPERIMENT = "conductor-eval"
FIGURES = (
    "accuracy",
    "stderr",
    "cost_per_question",
    "tokens_per_question",
    "calls_per_question",
    "format_error_rate",
    "infra_failure_rate",
)


def summary_metrics(summary: Summary) -> dict[str, float]:
    """``<method>.<figure>.<benchmark>`` for every method; the first method's figures also as
    ``<figure>.<benchmark>`` (what ``conductor eval compare`` sorts on)."""
    out: dict[str, float] = {}
    for i, method in enumerate(summary.methods):
        for bench in [*summary.benchmarks, OVERALL]:
            try:
                s = summary.get(method, bench)
            except KeyError:
                continue
            for figure in FIGURES:
                value = float(getattr(s, figure))
                out[f"{method}.{figure}.{bench}"] = value
                if i == 0:
                    out[f"{figure}.{bench}"] = value
    return out


def per_problem_table(records: Sequence[EvalRecord]) -> dict[str, list]:
    """Columns of the per-problem table (no traces; answers truncated)."""
    cols = [
        "method",
        "benchmark",
        "problem_id",
        "repeat",
        "correct",
        "reward",
        "format_error",
        "infra_error",
        "calls",
        "input_tokens",
        "output_tokens",
        "cost",
        "plan_len",
        "verdict_reason",
    ]
    table: dict[str, list] = {c: [getattr(r, c) for r in records] for c in cols}
    table["answer"] = [(r.answer or "")[:300] for r in records]
    return table


def log_evaluation(
    summary: Summary,
    records: Sequence[EvalRecord],
    paths: dict[str, str],
    *,
    params: dict[str, Any] | None = None,
    run_name: str | None = None,
    experiment: str = EXPERIMENT,
    trace_sample: int = 20,
    seed: int = 0,
) -> str:
    """Log one evaluation to MLflow and return the run id."""
    from conductor_core.track.mlflow_run import (
        log_artifacts,
        log_metrics,
        log_params_flat,
        log_table,
        start_run,
    )
    from conductor_core.track.traces import flush_traces, log_solve_trace, sample

    with start_run(experiment, run_name=run_name) as run:
        log_params_flat({**(params or {}), "methods": ", ".join(summary.methods)})
        log_metrics(summary_metrics(summary))
        for key in ("markdown", "html", "summary"):
            log_artifacts(paths[key], artifact_path="report")
        for plot in filter(None, paths.get("plots", "").split(",")):
            log_artifacts(plot, artifact_path="report")
        log_table(per_problem_table(records), "per_problem")
        for r in sample([r for r in records if r.trace], trace_sample, seed):
            log_solve_trace(
                r.trace,
                name=f"{r.method} {r.problem_id}",
                attributes={
                    "method": r.method,
                    "problem_id": r.problem_id,
                    "repeat": r.repeat,
                    "correct": r.correct,
                },
            )
        flush_traces()
        return run.info.run_id


def compare_runs(experiment: str = EXPERIMENT, max_runs: int = 20) -> list[dict[str, Any]]:
    """The latest runs of an experiment with their metrics, newest first."""
    from conductor_core.track.mlflow_run import configure

    mlflow = configure()
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        return []
    runs = mlflow.MlflowClient().search_runs(
        [exp.experiment_id], max_results=max_runs, order_by=["attributes.start_time DESC"]
    )
    return [
        {"run_id": r.info.run_id, "name": r.info.run_name or "", "metrics": dict(r.data.metrics)}
        for r in runs
    ]
