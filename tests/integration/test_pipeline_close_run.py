"""The training pipeline's exit handler on a real (SQLite) MLflow store: the parent run of a
pipeline run ends with the pipeline's final state, and so does whatever of it a killed task left
RUNNING; a run that never opened one creates nothing. (The exit handler on KFP's local runner:
tests/integration/test_pipeline_branches_local.py; in the compiled YAML:
tests/integration/test_pipeline_placement.py.)"""

from __future__ import annotations

import pytest

from conductor_core.pipeline_steps.context import close_parent_run
from conductor_core.track.mlflow_run import tracking_at
from conductor_core.track.pipeline_runs import (
    PIPELINE_EXPERIMENT,
    TAG_PARENT,
    TAG_PIPELINE_RUN,
    TAG_STAGE,
    pipeline_run,
    stage_run,
)


@pytest.fixture()
def store(tmp_path, monkeypatch):
    import mlflow

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    with tracking_at(uri):
        yield uri
        while mlflow.active_run() is not None:
            mlflow.end_run()


def _status(uri: str, run_id: str) -> str:
    import mlflow

    return mlflow.MlflowClient(uri).get_run(run_id).info.status


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("SUCCEEDED", "FINISHED"),  # kfp.local
        ("COMPLETE", "FINISHED"),  # the open-source backend's driver (ML Metadata's state)
        ("CACHED", "FINISHED"),
        ("FAILED", "FAILED"),
        ("CANCELED", "KILLED"),
        ("UNKNOWN", "FAILED"),
    ],
)
def test_the_parent_run_ends_with_the_pipelines_final_state(store, state, status):
    parent = pipeline_run("conductor-training", f"kfp-{state}", experiment=PIPELINE_EXPERIMENT)
    with stage_run(parent, "curate"):
        pass
    assert _status(store, parent) == "RUNNING"
    lines = []
    assert close_parent_run(f"kfp-{state}", "conductor-training", state, log=lines.append) == (
        status
    )
    assert _status(store, parent) == status
    assert lines == [f"conductor-training kfp-{state}: {state}; MLflow run {parent} ended {status}"]


def test_a_stage_a_killed_task_left_running_ends_with_it(store):
    import mlflow

    parent = pipeline_run("conductor-training", "kfp-killed", experiment=PIPELINE_EXPERIMENT)
    with stage_run(parent, "curate"):
        pass
    client = mlflow.MlflowClient(store)
    experiment = client.get_run(parent).info.experiment_id
    # a training pod killed inside its stage run: the run is never ended
    killed = client.create_run(
        experiment, tags={TAG_PARENT: parent, TAG_PIPELINE_RUN: parent, TAG_STAGE: "base"}
    ).info.run_id
    assert close_parent_run("kfp-killed", "conductor-training", "FAILED", log=lambda _: None)
    assert _status(store, killed) == "FAILED"
    assert _status(store, parent) == "FAILED"
    curate = client.search_runs([experiment], filter_string="tags.`conductor.stage` = 'curate'")
    assert [r.info.status for r in curate] == ["FINISHED"]  # a finished stage stays finished


def test_nothing_is_created_for_a_run_that_opened_no_mlflow_run(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    lines = []
    assert close_parent_run("kfp-0", "conductor-training", "FAILED", log=lines.append) is None
    assert not (tmp_path / "mlflow.db").exists()
    assert lines == [
        "conductor-training kfp-0: FAILED; no MLflow run to close (no task logged one)"
    ]


def test_the_component_passes_kfps_final_status(store):
    from kfp.dsl import PipelineTaskFinalStatus

    from conductor_components.close_run import close_run

    parent = pipeline_run("conductor-training", "kfp-c", experiment=PIPELINE_EXPERIMENT)
    status = PipelineTaskFinalStatus(
        state="FAILED",
        pipeline_job_resource_name="p",
        pipeline_task_name="exit-handler-1",
        error_code=1,
        error_message="Task exit-handler-1 failed.",
    )
    assert close_run.python_func(status=status, run_id="kfp-c") == "FAILED"
    assert _status(store, parent) == "FAILED"
