"""Tracking: the no-op tracker, and plain MLflow on SQLite (params, metrics, table, reuse of
MLFLOW_RUN_ID, FAILED on crash, model registration with an alias)."""

from __future__ import annotations

import pytest

from conductor_core.train.config import build_config
from conductor_core.train.tracking import (
    MlflowTracker,
    NoopTracker,
    Tracker,
    default_tracking_uri,
    make_tracker,
)


def test_noop_tracker_records_calls():
    t = NoopTracker()
    assert isinstance(t, Tracker)
    t.start()
    t.log_params({"a": 1})
    t.log_metrics({"reward": 0.5}, step=3)
    t.log_table([{"plan": "x"}], "t.json")
    t.finish("FAILED")
    assert t.params == {"a": 1} and t.metrics == [(3, {"reward": 0.5})]
    assert t.tables["t.json"] == [{"plan": "x"}] and t.status == "FAILED"


def test_default_uri_is_sqlite_under_the_output_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    uri = default_tracking_uri(tmp_path / "run")
    assert uri.startswith("sqlite:///") and uri.endswith("run/mlflow.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert default_tracking_uri(tmp_path) == "http://mlflow:5000"
    config = build_config({"tracking": {"backend": "none"}})
    assert isinstance(make_tracker(config), NoopTracker)


@pytest.fixture()
def tracker(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    t = MlflowTracker(
        f"sqlite:///{tmp_path / 'm.db'}", experiment="unit", artifact_root=tmp_path / "art"
    )
    yield t
    import mlflow

    if mlflow.active_run() is not None:
        mlflow.end_run()


def test_mlflow_params_metrics_table_and_failed_status(tracker):
    import mlflow

    tracker.start()
    params = {f"p{i}": i for i in range(150)}  # more than one MLflow batch
    params["long"] = "x" * 10_000
    tracker.log_params(params)
    tracker.log_metrics({"reward": 0.75, "worker_share/math/0": 0.5, "nan": float("nan")}, step=2)
    tracker.log_table([{"plan": "model_id = [0]", "reward": 1.0}], "sample_plans.json")
    tracker.finish("FAILED")
    run = mlflow.get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert run.data.params["p149"] == "149" and len(run.data.params["long"]) == 6000
    assert run.data.metrics["reward"] == 0.75 and "nan" not in run.data.metrics
    assert run.data.metrics["worker_share/math/0"] == 0.5
    files = [f.path for f in mlflow.MlflowClient().list_artifacts(tracker.run_id)]
    assert "sample_plans.json" in files


def test_mlflow_reuses_an_injected_run_id(tracker, monkeypatch):
    import mlflow

    mlflow.set_tracking_uri(tracker.tracking_uri)
    exp = mlflow.create_experiment("injected")
    run = mlflow.MlflowClient().create_run(exp)
    monkeypatch.setenv("MLFLOW_RUN_ID", run.info.run_id)
    tracker.start()
    assert tracker.run_id == run.info.run_id
    tracker.log_metrics({"reward": 1.0}, step=1)
    tracker.finish()
    assert mlflow.get_run(run.info.run_id).data.metrics["reward"] == 1.0
    assert mlflow.get_run(run.info.run_id).info.status == "FINISHED"


@pytest.mark.slow
def test_mlflow_logs_and_registers_the_model_with_an_alias(tracker, tmp_path):
    import mlflow

    from conductor_core.policy.tiny import build_tiny_conductor

    model_dir = build_tiny_conductor(
        tmp_path / "m", hidden=64, heads=2, kv_heads=1, layers=1, vocab=300
    )
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tracker.start()
    uri = tracker.log_model(model, tok, registered_name="conductor-unit", alias="champion")
    tracker.finish()
    assert uri
    version = mlflow.MlflowClient().get_model_version_by_alias("conductor-unit", "champion")
    assert int(version.version) == 1
