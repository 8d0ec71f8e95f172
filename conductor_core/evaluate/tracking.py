"""MLflow logging of evaluations: figures as metrics, reports and plots as artifacts, a
per-problem table, and a sample of workflows as MLflow traces (one span per step).

Uses ``MLFLOW_TRACKING_URI`` when set, else a local SQLite store (``runs/mlflow.db``). An
``MLFLOW_RUN_ID`` in the environment (as Kubeflow's MLflow integration injects) is reused.
Nothing logged here contains a secret: pools are logged by worker name only.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Sequence
from typing import Any

from conductor_core.evaluate.aggregate import OVERALL, Summary
from conductor_core.evaluate.records import EvalRecord

EXPERIMENT = "conductor-eval"
DEFAULT_URI = "sqlite:///runs/mlflow.db"
_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")


def metric_name(*parts: str) -> str:
    """An MLflow-safe metric name (``:`` and other characters become ``_``)."""
    return ".".join(_BAD.sub("_", p) for p in parts)


def _mlflow():
    from conductor_core.errors import require

    mlflow = require("mlflow", extra="train", purpose="MLflow tracking")
    if not os.environ.get("MLFLOW_TRACKING_URI"):
        os.makedirs("runs", exist_ok=True)
        mlflow.set_tracking_uri(DEFAULT_URI)
    return mlflow


def summary_metrics(summary: Summary) -> dict[str, float]:
    """Metrics of every method; the first method's also without a prefix (for comparisons)."""
    out: dict[str, float] = {}
    for i, method in enumerate(summary.methods):
        for bench in [*summary.benchmarks, OVERALL]:
            try:
                s = summary.get(method, bench)
            except KeyError:
                continue
            figures = {
                "accuracy": s.accuracy,
                "stderr": s.stderr,
                "cost_per_question": s.cost_per_question,
                "tokens_per_question": s.tokens_per_question,
                "calls_per_question": s.calls_per_question,
                "format_error_rate": s.format_error_rate,
                "infra_failure_rate": s.infra_failure_rate,
            }
            for key, value in figures.items():
                out[metric_name(method, key, bench)] = float(value)
                if i == 0:
                    out[metric_name(key, bench)] = float(value)
    return out


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
    mlflow = _mlflow()
    run_id = os.environ.get("MLFLOW_RUN_ID")
    if run_id is None:
        mlflow.set_experiment(experiment)
    with mlflow.start_run(run_id=run_id, run_name=None if run_id else run_name) as run:
        mlflow.log_params({k: str(v)[:500] for k, v in (params or {}).items()})
        mlflow.log_param("methods", ", ".join(summary.methods)[:500])
        mlflow.log_metrics(summary_metrics(summary))
        for key in ("markdown", "html", "summary"):
            mlflow.log_artifact(paths[key], artifact_path="report")
        for plot in filter(None, paths.get("plots", "").split(",")):
            mlflow.log_artifact(plot, artifact_path="report")
        mlflow.log_table(data=per_problem_table(records), artifact_file="per_problem.json")
        log_traces(mlflow, records, sample=trace_sample, seed=seed)
        return run.info.run_id


def per_problem_table(records: Sequence[EvalRecord]) -> dict[str, list]:
    """Columns of the per-problem table (no traces, answers truncated)."""
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


def log_traces(mlflow, records: Sequence[EvalRecord], *, sample: int, seed: int = 0) -> int:
    """Log a seeded sample of workflows as MLflow traces: a root span per question with one child
    span per executed step. Returns how many were logged."""
    with_traces = [r for r in records if r.trace]
    chosen = random.Random(seed).sample(with_traces, min(sample, len(with_traces)))
    for r in chosen:
        with mlflow.start_span(name=f"{r.method} {r.problem_id}", span_type="CHAIN") as root:
            root.set_inputs({"question": r.trace.get("question", ""), "problem_id": r.problem_id})
            root.set_attributes(
                {"method": r.method, "correct": r.correct, "cost": r.cost, "calls": r.calls}
            )
            for rnd in r.trace.get("rounds", []):
                with mlflow.start_span(name=f"round {rnd['round']}", span_type="AGENT") as rs:
                    rs.set_outputs(
                        {"raw_plan": rnd.get("raw_plan", ""), "plan_error": rnd.get("plan_error")}
                    )
                    for step in (rnd.get("workflow") or {}).get("steps", []):
                        with mlflow.start_span(name=f"step {step['index']}", span_type="LLM") as ss:
                            ss.set_inputs(
                                {
                                    "worker": step["worker"],
                                    "model": step["model"],
                                    "subtask": step["subtask"],
                                    "visible": step["visible"],
                                }
                            )
                            ss.set_outputs(
                                {"response": step.get("response"), "error": step.get("error")}
                            )
                            ss.set_attributes(
                                {
                                    "input_tokens": step["input_tokens"],
                                    "output_tokens": step["output_tokens"],
                                    "cost": step["cost"],
                                    "latency_s": step["latency_s"],
                                }
                            )
            root.set_outputs({"answer": r.answer})
    return len(chosen)


def compare_runs(experiment: str = EXPERIMENT, max_runs: int = 20) -> list[dict[str, Any]]:
    """The latest runs of an experiment with their metrics, newest first."""
    mlflow = _mlflow()
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        return []
    client = mlflow.MlflowClient()
    runs = client.search_runs(
        [exp.experiment_id], max_results=max_runs, order_by=["attributes.start_time DESC"]
    )
    return [
        {"run_id": r.info.run_id, "name": r.info.run_name or "", "metrics": dict(r.data.metrics)}
        for r in runs
    ]
