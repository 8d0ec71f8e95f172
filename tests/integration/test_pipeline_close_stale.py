"""Closing the MLflow runs of cluster pipeline runs that ended without their exit handler (a run
terminated from the KFP UI), by asking the KFP API how each ended: against the KFP stand-in and
a real (SQLite) MLflow store."""

from __future__ import annotations

import pytest

from conductor_core.track.mlflow_run import tracking_at
from conductor_core.track.pipeline_runs import PIPELINE_EXPERIMENT, pipeline_run
from conductor_pipeline_runner.submit import close_stale_runs
from tests.support.kfp_standin import KfpStandIn


def _status(uri: str, run_id: str) -> str:
    import mlflow

    return mlflow.MlflowClient(uri).get_run(run_id).info.status


@pytest.mark.parametrize(
    ("state", "status"),
    [
        ("SUCCEEDED", "FINISHED"),
        ("FAILED", "FAILED"),
        ("CANCELED", "KILLED"),
        ("RUNNING", "RUNNING"),  # still going: left open
        ("CANCELING", "RUNNING"),
    ],
)
def test_a_run_that_ended_is_closed_as_kfp_says(tmp_path, state, status):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with tracking_at(uri):
        parent = pipeline_run("conductor-training", "kfp-1", experiment=PIPELINE_EXPERIMENT)
        unknown = pipeline_run("conductor-training", "local-2", experiment=PIPELINE_EXPERIMENT)
    lines: list[str] = []
    with KfpStandIn() as api:
        api.runs["kfp-1"] = {"run_id": "kfp-1", "display_name": "r", "state": state}
        closed = close_stale_runs(host=api.host, tracking_uri=uri, log=lines.append)
    assert closed == ([] if status == "RUNNING" else [("kfp-1", status)])
    assert _status(uri, parent) == status
    assert _status(uri, unknown) == "RUNNING"  # not a run of this server: left open, said
    assert len(lines) == 1 and lines[0].startswith("local-2: left open (reading run local-2")
