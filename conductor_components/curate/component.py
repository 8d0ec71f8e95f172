"""Curate the training data."""

from kfp import dsl
from kfp.dsl import Dataset, Output

from conductor_components._settings import COMPONENT_OPTIONS


@dsl.component(**COMPONENT_OPTIONS)
def curate(
    curation_config: str,
    dataset: Output[Dataset],
    run_id: str = "",
    pipeline: str = "conductor-training",
    tracking_uri: str = "",
) -> str:
    """Curate a training dataset: load the sources, normalise, de-duplicate, decontaminate against
    the evaluation sets, mix and split (train.parquet, validation.parquet, stats.json). The
    config is a curation YAML path or a bundled name (`pipeline`, `example`). With a run id,
    the counts go to the pipeline's MLflow run."""
    import json

    from conductor_core.pipeline_steps.data_steps import curate_step

    stats = curate_step(
        curation_config,
        dataset.path,
        run_id=run_id,
        pipeline=pipeline,
        tracking_uri=tracking_uri or None,
    )
    dataset.metadata["train"] = stats["train"]["total"]
    dataset.metadata["validation"] = stats["validation"]["total"]
    return json.dumps(stats["final"])
