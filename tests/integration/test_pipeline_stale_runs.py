"""MLflow runs that a killed pipeline run left RUNNING are closed by the next run: a local run
that finds no other run live under its root closes those of its store as KILLED; a live run's
are never touched; on a cluster the caller says how each run ended (the KFP API's word)."""

from __future__ import annotations

import fcntl

from conductor_core.track.mlflow_run import tracking_at
from conductor_core.track.pipeline_runs import (
    PIPELINE_EXPERIMENT,
    TAG_PARENT,
    TAG_PIPELINE_RUN,
    TAG_STAGE,
    close_stale_pipeline_runs,
    pipeline_run,
)


def _killed_run(uri: str, kfp_run_id: str) -> tuple[str, str]:
    """A parent run and its stage run, both RUNNING: what a SIGKILLed run leaves behind."""
    import mlflow

    with tracking_at(uri):
        parent = pipeline_run("conductor-curation", kfp_run_id, experiment=PIPELINE_EXPERIMENT)
        client = mlflow.MlflowClient(uri)
        experiment = client.get_run(parent).info.experiment_id
        tags = {TAG_PARENT: parent, TAG_PIPELINE_RUN: parent, TAG_STAGE: "curate"}
        stage = client.create_run(experiment, tags=tags).info.run_id
    return parent, stage


def _status(uri: str, run_id: str) -> str:
    import mlflow

    return mlflow.MlflowClient(uri).get_run(run_id).info.status


def test_the_caller_says_how_each_run_ended_and_a_live_one_stays(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    live, live_stage = _killed_run(uri, "kfp-live")
    gone, gone_stage = _killed_run(uri, "kfp-gone")
    states = {"kfp-live": None, "kfp-gone": "FAILED"}  # as a KFP API would answer
    assert close_stale_pipeline_runs(states.get, tracking_uri=uri) == [("kfp-gone", "FAILED")]
    assert _status(uri, gone) == _status(uri, gone_stage) == "FAILED"
    assert _status(uri, live) == _status(uri, live_stage) == "RUNNING"


def test_a_run_under_a_root_where_another_run_is_live_closes_nothing(tmp_path):
    from conductor_pipeline_runner.local import _run_lock

    with _run_lock(tmp_path) as alone:
        assert alone
        with _run_lock(tmp_path) as second:  # another open file: another run's lock
            assert not second
    with open(tmp_path / ".run.lock") as other:  # a run that is still going, in another process
        fcntl.flock(other, fcntl.LOCK_SH)
        with _run_lock(tmp_path) as alone:
            assert not alone
    with _run_lock(tmp_path) as alone:  # the other run ended, however: its lock went with it
        assert alone


def test_the_next_local_run_closes_what_a_killed_run_left_running(tmp_path, monkeypatch):
    from conductor_pipeline_runner.local import run_local

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    root = tmp_path / "runs"
    root.mkdir()
    uri = f"sqlite:///{root / 'mlflow.db'}"
    parent, stage = _killed_run(uri, "kfp-killed")
    lines: list[str] = []
    run = run_local("curation", root=root, echo=lines.append)
    assert run.ok, run.error
    assert _status(uri, parent) == _status(uri, stage) == "KILLED"
    assert "MLflow: the run kfp-killed was left RUNNING by a killed run; closed it KILLED" in lines


def test_a_resumed_runs_own_runs_stay_open(tmp_path):
    from conductor_pipeline_runner.local import _close_killed_runs

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    resumed, resumed_stage = _killed_run(uri, "kfp-resumed")
    other, _ = _killed_run(uri, "kfp-other")
    lines: list[str] = []
    _close_killed_runs(uri, "kfp-resumed", lines.append)
    assert _status(uri, other) == "KILLED"
    assert _status(uri, resumed) == _status(uri, resumed_stage) == "RUNNING"
    assert lines == ["MLflow: the run kfp-other was left RUNNING by a killed run; closed it KILLED"]
