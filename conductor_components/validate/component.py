"""The data gate: validate a curated dataset and report (the `gate` task after it stops the run)."""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import HTML, Dataset, Input, Markdown, Output

from conductor_components._settings import COMPONENT_OPTIONS


@dsl.component(**COMPONENT_OPTIONS)
def validate(
    dataset: Input[Dataset],
    report: Output[HTML],
    summary: Output[Markdown],
    run_id: str = "",
    pipeline: str = "conductor-training",
    tracking_uri: str = "",
) -> NamedTuple("Outputs", [("problems", int), ("passed", bool), ("reason", str)]):
    """Validate a curated dataset with its Great Expectations suites (schema, domains, answers,
    lengths, split); the report renders in the run's UI, also when an expectation fails (this
    task then succeeds, so that KFP keeps its report, and says why in `reason`: the `gate` task
    after it stops the run). Returns the number of problems checked, whether every expectation
    passed, and the reason of a failure."""
    from collections import namedtuple

    from conductor_core.pipeline_steps.data_steps import validate_step

    checked = validate_step(
        dataset.path,
        report.path,
        summary.path,
        run_id=run_id,
        pipeline=pipeline,
        tracking_uri=tracking_uri or None,
        raise_on_failure=False,
    )
    outputs = namedtuple("Outputs", ["problems", "passed", "reason"])
    return outputs(checked["problems"], checked["passed"], checked["reason"])
