"""The training pipeline's exit handler: close the run's MLflow parent run."""

from kfp import dsl

from conductor_components._settings import COMPONENT_OPTIONS


@dsl.component(**COMPONENT_OPTIONS)
def close_run(
    status: dsl.PipelineTaskFinalStatus,
    run_id: str,
    pipeline: str = "conductor-training",
    tracking_uri: str = "",
) -> str:
    """Runs after every other task of the pipeline run, whether they succeeded or not: ends the
    run's MLflow parent run with the pipeline's final state (`COMPLETE` from the backend or
    `SUCCEEDED` from the local runner -> FINISHED, `CANCELED` -> KILLED, else FAILED), and any
    of its runs a killed task left RUNNING. Returns the MLflow status (empty when no task opened
    an MLflow run)."""
    from conductor_core.pipeline_steps.context import close_parent_run

    return close_parent_run(run_id, pipeline, status.state, tracking_uri=tracking_uri or None) or ""
