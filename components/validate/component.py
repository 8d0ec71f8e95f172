"""The data gate."""

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Markdown, Output

from components._settings import COMPONENT_OPTIONS


@dsl.component(**COMPONENT_OPTIONS)
def validate(
    dataset: Input[Dataset],
    report: Output[HTML],
    summary: Output[Markdown],
    run_id: str = "",
    pipeline: str = "conductor-training",
    tracking_uri: str = "",
) -> int:
    """Validate a curated dataset with its Great Expectations suites (schema, domains, answers,
    lengths, split); the report renders in the run's UI. Fails the run when an expectation
    fails. Returns the number of problems checked."""
    from conductor_core.pipeline.data_steps import validate_step

    checked = validate_step(
        dataset.path,
        report.path,
        summary.path,
        run_id=run_id,
        pipeline=pipeline,
        tracking_uri=tracking_uri or None,
    )
    return checked["problems"]
