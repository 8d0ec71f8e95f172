"""Merge the evaluation shards into one report."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Input, Markdown, Metrics, Output

from conductor_components._settings import COMPONENT_OPTIONS


@dsl.component(**COMPONENT_OPTIONS)
def aggregate(
    shards: Input[list[Artifact]],
    metrics: Output[Metrics],
    report: Output[HTML],
    summary: Output[Markdown],
    comparison: Output[Artifact],
    title: str = "Evaluation",
    run_id: str = "",
    pipeline: str = "conductor-training",
    tracking_uri: str = "",
    params: dict = {},  # noqa: B006 (KFP reads the default from the signature; never mutated)
) -> bool:
    """Aggregate every shard's records: accuracy with standard errors, cost and calls per
    question for each method, the plots (accuracy versus cost, per benchmark, worker usage) in
    the HTML report, and the trained Conductor against the best single worker and MoA
    (Markdown with the plots inline, metrics). With a run id, one MLflow run per method under
    the pipeline's run (`params` on each). Returns whether the Conductor is ahead of the best
    single worker."""
    import shutil
    from pathlib import Path

    from conductor_core.pipeline_steps.eval_steps import aggregate_step, summary_markdown

    out = Path(comparison.path)
    result = aggregate_step(
        [s.path for s in shards],
        out,
        title=title,
        run_id=run_id,
        pipeline=pipeline,
        tracking_uri=tracking_uri or None,
        params=params,
    )
    table = result["comparison"]
    for row in table["rows"]:
        for key in ("accuracy", "cost_per_question", "calls_per_question"):
            metrics.log_metric(f"{row['method']}/{key}", round(row[key], 6))
    shutil.copyfile(result["paths"]["html"], report.path)
    Path(summary.path).write_text(summary_markdown(result), encoding="utf-8")
    return bool(table["conductor_ahead"])
