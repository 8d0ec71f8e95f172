"""Training tracking without a store: the no-op tracker, the default tracking URI, and which
tracker a config makes and when it resumes (on MLflow stores:
tests/integration/test_train_tracking.py)."""

from __future__ import annotations

from conductor_core.train.config import build_config
from conductor_core.train.stage_tracker import (
    RUN_FILE,
    MlflowTracker,
    NoopTracker,
    Tracker,
    default_tracking_uri,
    has_checkpoint,
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


def test_make_tracker_resumes_only_with_a_checkpoint(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    config = build_config({"output_dir": str(tmp_path / "stage")})
    tracker = make_tracker(config)
    assert isinstance(tracker, MlflowTracker) and not tracker.resume
    assert tracker.run_file == tmp_path / "stage" / RUN_FILE
    assert tracker.tracking_uri == f"sqlite:///{(tmp_path / 'stage' / 'mlflow.db').resolve()}"
    ckpt = tmp_path / "stage" / "checkpoints" / "checkpoint-3"
    ckpt.mkdir(parents=True)
    assert not has_checkpoint(config)  # incomplete: no trainer_state.json
    (ckpt / "trainer_state.json").write_text("{}")
    assert has_checkpoint(config)
    assert make_tracker(config).resume


def test_server_store_uses_the_server_artifact_root(tmp_path):
    t = MlflowTracker("http://mlflow:5000", artifact_root=tmp_path / "art")
    assert t.artifact_location is None and t.uri == "http://mlflow:5000"
