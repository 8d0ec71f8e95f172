"""MLflow logging of evaluations, laid out for MLflow's compare view.

One evaluation is one *evaluation run* with one nested *method run* per evaluated method:

- the evaluation run holds the reports and plots (``report/``), the per-problem table and a seeded
  sample of workflows as MLflow traces (one span per step), and the params every method shares;
- each method run holds the same metric names (:func:`method_metrics`: ``accuracy``,
  ``accuracy/<benchmark>``, ``accuracy_stderr/<benchmark>``, ``cost_per_question``, ...) and the
  params that say what differs (``method``, ``kind``, ``source``, plus the shared ones: pool,
  profile, benchmarks), so that selecting the method runs in MLflow puts them side by side.

Inside a pipeline (``parent_run_id`` given), the evaluation run is the nested stage run
(:func:`~conductor_core.track.pipeline_runs.stage_run`) of the pipeline run, and a retried stage
logs into the same method runs; otherwise a new top-level run (or an injected ``MLFLOW_RUN_ID``).

:func:`compare_runs` reads method runs back through ``mlflow.search_runs`` (what
``conductor eval compare`` prints). ``mlflow`` is imported only when logging or comparing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from conductor_core.evaluate.aggregate import OVERALL, Summary
from conductor_core.evaluate.config import EVALUATION_EXPERIMENTS, EXPERIMENT
from conductor_core.evaluate.records import EvalRecord
from conductor_core.track.mlflow_run import (
    configure,
    log_artifacts,
    log_metrics,
    log_params_flat,
    log_table,
    restores_tracking_uri,
    start_run,
)
from conductor_core.track.pipeline_runs import (
    TAG_KFP_RUN_ID,
    TAG_METHOD,
    TAG_PARENT,
    TAG_PIPELINE_RUN,
    TAG_ROLE,
    kfp_run_ids,
    nested_run,
    stage_run,
    tag_filter,
)
from conductor_core.track.traces import flush_traces, log_solve_trace, sample

EVAL_STAGE = "aggregate"
"""The pipeline stage an evaluation logs under by default."""

PER_BENCHMARK = (
    "accuracy",
    "accuracy_stderr",
    "cost_per_question",
    "calls_per_question",
    "tokens_per_question",
)
"""Figures logged per benchmark as ``<figure>/<benchmark>``."""

OVERALL_FIGURES = (
    "accuracy",
    "accuracy_stderr",
    "cost_per_question",
    "calls_per_question",
    "tokens_per_question",
    "format_error_rate",
    "infra_failure_rate",
    "wall_s_per_question",
)
"""Figures logged over all benchmarks under their plain name (accuracy: mean of benchmarks)."""

_STATS_FIELD = {"accuracy_stderr": "stderr"}


def _figure(stats: Any, figure: str) -> float:
    return float(getattr(stats, _STATS_FIELD.get(figure, figure)))


def method_metrics(summary: Summary, method: str) -> dict[str, float]:
    """The metrics of one method run: ``<figure>/<benchmark>`` for :data:`PER_BENCHMARK` on every
    benchmark the method ran, and the overall :data:`OVERALL_FIGURES` under their plain names.
    Every method of an evaluation gets the same names."""
    out: dict[str, float] = {}
    for bench in summary.benchmarks:
        try:
            stats = summary.get(method, bench)
        except KeyError:
            continue
        for figure in PER_BENCHMARK:
            out[f"{figure}/{bench}"] = _figure(stats, figure)
    overall = summary.get(method, OVERALL)
    for figure in OVERALL_FIGURES:
        out[figure] = _figure(overall, figure)
    return out


def summary_metrics(summary: Summary) -> dict[str, dict[str, float]]:
    """:func:`method_metrics` of every method: ``{method: {metric: value}}``."""
    return {m: method_metrics(summary, m) for m in summary.methods}


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


@dataclass
class EvaluationRuns:
    """The MLflow runs of one logged evaluation."""

    run_id: str
    """The evaluation run (reports, per-problem table, traces): a pipeline's stage run or a
    top-level run."""
    method_runs: dict[str, str] = field(default_factory=dict)
    """``{method: run id}`` of the nested method runs."""


def log_evaluation(
    summary: Summary,
    records: Sequence[EvalRecord],
    paths: Mapping[str, str],
    *,
    params: Mapping[str, Any] | None = None,
    method_params: Mapping[str, Mapping[str, Any]] | None = None,
    run_name: str | None = None,
    experiment: str = EXPERIMENT,
    parent_run_id: str | None = None,
    stage: str = EVAL_STAGE,
    tracking_uri: str | None = None,
    trace_sample: int = 20,
    seed: int = 0,
) -> EvaluationRuns:
    """Log one evaluation: an evaluation run with one nested run per method (see the module doc).

    Args:
        summary: the aggregated figures.
        records: the per-problem records (the table and the traces).
        paths: the report's files as ``write_report`` returns them.
        params: params every method shares (pool, profile, benchmark, ...): logged on the
            evaluation run and on each method run. ``benchmarks`` (the summary's, comma-separated)
            is added.
        method_params: more params per method name (for example its ``kind`` and ``source``).
        run_name: name of a new top-level evaluation run (ignored under a pipeline).
        experiment: experiment of a new top-level run (a pipeline's run keeps its own).
        parent_run_id: the pipeline run (from ``pipeline_run``): the evaluation run is then its
            nested run of ``stage``, found again on a retry.
        stage: the stage name under ``parent_run_id``.
        tracking_uri: tracking URI (default: ``$MLFLOW_TRACKING_URI``, else the local store).
        trace_sample: workflows logged as traces (a seeded sample).
        seed: the sample's seed.

    Returns:
        The evaluation run and the method runs.
    """
    from contextlib import AbstractContextManager

    shared = {**(params or {}), "benchmarks": ",".join(summary.benchmarks)}
    parent_params = {**shared, "methods": ", ".join(summary.methods)}
    ctx: AbstractContextManager[Any]
    if parent_run_id:
        ctx = stage_run(parent_run_id, stage, params=parent_params, tracking_uri=tracking_uri)
    else:
        ctx = start_run(
            experiment, run_name=run_name, tags={TAG_ROLE: "evaluation"}, uri=tracking_uri
        )
    with ctx as run:
        eval_id = run.info.run_id
        if not parent_run_id:
            log_params_flat(parent_params)
        result = EvaluationRuns(run_id=eval_id)
        for method in summary.methods:
            extra = dict((method_params or {}).get(method, {}))
            with nested_run(
                eval_id,
                {TAG_METHOD: method},
                run_name=method,
                params={**shared, **extra, "method": method},
                tags={TAG_ROLE: "method"},
                tracking_uri=tracking_uri,
            ) as child:
                log_metrics(method_metrics(summary, method))
                result.method_runs[method] = child.info.run_id
        for key in ("markdown", "html", "summary"):
            if paths.get(key):
                log_artifacts(paths[key], artifact_path="report")
        for plot in filter(None, (paths.get("plots") or "").split(",")):
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
        return result


@dataclass
class MethodRun:
    """One method run read back from MLflow."""

    run_id: str
    method: str
    evaluation: str
    """The evaluation run it is nested in (its name, else its id)."""
    parent_run_id: str
    params: dict[str, str]
    metrics: dict[str, float]
    start_time: int = 0

    def benchmarks(self) -> list[str]:
        """The benchmarks with an ``accuracy/<benchmark>`` metric."""
        return sorted(k.split("/", 1)[1] for k in self.metrics if k.startswith("accuracy/"))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready row: ids, method, accuracy per benchmark and overall, cost and calls."""
        return {
            "run_id": self.run_id,
            "method": self.method,
            "evaluation": self.evaluation,
            "parent_run_id": self.parent_run_id,
            "accuracy": self.metrics.get("accuracy"),
            "accuracy_per_benchmark": {b: self.metrics[f"accuracy/{b}"] for b in self.benchmarks()},
            "accuracy_stderr": self.metrics.get("accuracy_stderr"),
            "cost_per_question": self.metrics.get("cost_per_question"),
            "calls_per_question": self.metrics.get("calls_per_question"),
            "tokens_per_question": self.metrics.get("tokens_per_question"),
            "params": self.params,
        }


def _search(mlflow: Any, filter_string: str, experiment_ids: list[str] | None, max_runs: int):
    kwargs: dict[str, Any] = {
        "filter_string": filter_string,
        "max_results": max_runs,
        "order_by": ["attributes.start_time DESC"],
        "output_format": "list",
    }
    if experiment_ids is None:
        return mlflow.search_runs(search_all_experiments=True, **kwargs)
    return mlflow.search_runs(experiment_ids=experiment_ids, **kwargs)


@restores_tracking_uri
def compare_runs(
    experiment: str | None = None,
    *,
    parent_run_id: str | None = None,
    kfp_run_id: str | None = None,
    tracking_uri: str | None = None,
    max_runs: int = 200,
) -> list[MethodRun]:
    """Method runs read back through ``mlflow.search_runs``: the newest ``max_runs``, oldest
    first (an evaluation's methods in the order they were evaluated).

    Which ones: those nested in ``parent_run_id`` (an evaluation run, or a pipeline run: then the
    method runs of all its evaluations); else those of the pipeline run ``kfp_run_id`` names (its
    KFP run id, its MLflow run name or a local run's name: see
    :func:`~conductor_core.track.pipeline_runs.kfp_run_ids`); else the newest method runs of
    every evaluation. ``experiment`` narrows the search; by default a named run is looked for in
    every experiment, and the newest evaluations in
    :data:`~conductor_core.evaluate.config.EVALUATION_EXPERIMENTS`.
    """
    mlflow = configure(tracking_uri)
    experiment_ids: list[str] | None = None
    if experiment is not None or not (parent_run_id or kfp_run_id):
        names = (experiment,) if experiment is not None else EVALUATION_EXPERIMENTS
        found = [mlflow.get_experiment_by_name(name) for name in names]
        experiment_ids = [exp.experiment_id for exp in found if exp is not None]
        if not experiment_ids:
            return []
    elif parent_run_id:
        experiment_ids = [mlflow.MlflowClient().get_run(parent_run_id).info.experiment_id]
    role = {TAG_ROLE: "method"}
    if parent_run_id:
        runs = _search(
            mlflow, tag_filter({**role, TAG_PARENT: parent_run_id}), experiment_ids, max_runs
        )
        if not runs:
            found_runs = tag_filter({**role, TAG_PIPELINE_RUN: parent_run_id})
            runs = _search(mlflow, found_runs, experiment_ids, max_runs)
    elif kfp_run_id:
        runs = []
        for kfp_id in kfp_run_ids(kfp_run_id, experiment_ids=experiment_ids):
            found_runs = tag_filter({**role, TAG_KFP_RUN_ID: kfp_id})
            runs += _search(mlflow, found_runs, experiment_ids, max_runs)
        runs = sorted(runs, key=lambda r: r.info.start_time or 0, reverse=True)[:max_runs]
    else:
        runs = _search(mlflow, tag_filter(role), experiment_ids, max_runs)
    client = mlflow.MlflowClient()
    names_of: dict[str, str] = {}

    def name_of(run_id: str) -> str:
        if run_id not in names_of:
            try:
                names_of[run_id] = client.get_run(run_id).info.run_name or run_id
            except Exception:  # a deleted run: show its id
                names_of[run_id] = run_id
        return names_of[run_id]

    out = []
    for r in runs:
        tags = r.data.tags
        parent = tags.get(TAG_PARENT, "")
        evaluation = name_of(parent) if parent else ""
        root = tags.get(TAG_PIPELINE_RUN, "")
        if root and root != parent:
            # Under a pipeline the evaluation is a stage run ("evaluate"): say whose.
            evaluation = f"{name_of(root)}/{evaluation}"
        out.append(
            MethodRun(
                run_id=r.info.run_id,
                method=tags.get(TAG_METHOD) or r.data.params.get("method") or r.info.run_name,
                evaluation=evaluation,
                parent_run_id=parent,
                params=dict(r.data.params),
                metrics=dict(r.data.metrics),
                start_time=r.info.start_time or 0,
            )
        )
    out.reverse()
    return out
