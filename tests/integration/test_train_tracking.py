"""Training tracking on MLflow stores (SQLite) through conductor_core.track: params, metrics,
table, reuse of MLFLOW_RUN_ID, FAILED on crash, the run file and re-opening the run on resume,
model registration with an alias loadable by URI (the no-op tracker and the choice of tracker:
tests/unit/test_train_tracking.py)."""

from __future__ import annotations

import json

import pytest

from conductor_core.track.mlflow_run import tracking_at
from conductor_core.track.run_tracker import RunTracker
from conductor_core.train.stage_tracker import (
    RUN_FILE,
    MlflowTracker,
    Tracker,
    read_run_file,
)


# The tests on an MLflow store are marked slow: importing MLflow and creating a store take
# seconds (make test-fast leaves them out; make test runs them).
@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """One SQLite store for the module (creating one costs seconds); one experiment per test."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'm.db'}"


@pytest.fixture()
def tracker(store, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    t = MlflowTracker(store, experiment=f"unit-{tmp_path.name}", artifact_root=tmp_path / "art")
    with tracking_at(store) as mlflow:  # the test reads the store back through MLflow's globals
        yield t
        if mlflow.active_run() is not None:
            mlflow.end_run()


@pytest.mark.slow
def test_mlflow_params_metrics_table_and_failed_status(tracker, tmp_path):
    import mlflow

    assert isinstance(tracker, RunTracker) and isinstance(tracker, Tracker)
    tracker.start()
    assert tracker.mlflow is mlflow
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
    # A new experiment of a SQLite store keeps its artifacts in artifact_root.
    assert run.info.artifact_uri.startswith((tmp_path / "art").resolve().as_uri())


@pytest.mark.slow
def test_mlflow_reuses_an_injected_run_id(tracker, monkeypatch):
    import mlflow

    exp = mlflow.create_experiment("injected")
    run = mlflow.MlflowClient().create_run(exp)
    monkeypatch.setenv("MLFLOW_RUN_ID", run.info.run_id)
    tracker.start()
    assert tracker.run_id == run.info.run_id
    tracker.log_metrics({"reward": 1.0}, step=1)
    tracker.finish()
    assert mlflow.get_run(run.info.run_id).data.metrics["reward"] == 1.0
    assert mlflow.get_run(run.info.run_id).info.status == "FINISHED"


def _tracker(tmp_path, uri: str, resume: bool = False) -> MlflowTracker:
    return MlflowTracker(
        uri,
        experiment=f"unit-{tmp_path.name}",
        artifact_root=tmp_path / "art",
        run_file=tmp_path / "out" / RUN_FILE,
        resume=resume,
    )


@pytest.mark.slow
def test_crashed_run_is_reopened_on_resume_and_ends_finished(store, tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    first = _tracker(tmp_path, store)
    first.start()
    first.log_metrics({"reward": 0.25}, step=1)
    first.finish("FAILED")
    record = json.loads((tmp_path / "out" / RUN_FILE).read_text())
    assert record["run_id"] == first.run_id and record["tracking_uri"] == first.tracking_uri
    assert mlflow.MlflowClient(store).get_run(first.run_id).info.status == "FAILED"

    resumed = _tracker(tmp_path, store, resume=True)
    resumed.start()
    assert resumed.run_id == first.run_id and resumed.resumed
    resumed.log_metrics({"reward": 0.75}, step=2)
    resumed.finish()
    run = mlflow.MlflowClient(store).get_run(first.run_id)
    assert run.info.status == "FINISHED"
    history = mlflow.MlflowClient(store).get_metric_history(first.run_id, "reward")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.25), (2, 0.75)]


@pytest.mark.slow
def test_fresh_start_and_other_store_open_a_new_run(store, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    first = _tracker(tmp_path, store)
    first.start()
    first.finish()
    fresh = _tracker(tmp_path, store, resume=False)
    fresh.start()
    fresh.finish()
    assert fresh.run_id != first.run_id and not fresh.resumed
    assert read_run_file(tmp_path / "out" / RUN_FILE, fresh.tracking_uri) == fresh.run_id
    # The recorded run belongs to another tracking URI: never re-opened there.
    other = _tracker(tmp_path, f"sqlite:///{tmp_path / 'other.db'}", resume=True)
    other.start()
    other.finish()
    assert other.run_id not in (first.run_id, fresh.run_id) and not other.resumed
    assert read_run_file(tmp_path / "out" / RUN_FILE, fresh.tracking_uri) is None


@pytest.mark.slow
def test_deleted_or_garbled_recorded_run_starts_a_new_one(store, tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    first = _tracker(tmp_path, store)
    first.start()
    first.finish("FAILED")
    mlflow.MlflowClient(store).delete_run(first.run_id)
    again = _tracker(tmp_path, store, resume=True)
    again.start()
    again.finish()
    assert again.run_id != first.run_id and not again.resumed
    (tmp_path / "out" / RUN_FILE).write_text("{not json")
    third = _tracker(tmp_path, store, resume=True)
    third.start()
    third.finish()
    assert third.run_id not in (first.run_id, again.run_id)


@pytest.mark.slow
def test_mirror_record_is_read_when_the_run_file_is_gone(store, tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    mirror = str(tmp_path / "ckpt" / RUN_FILE)
    first = MlflowTracker(store, experiment=f"unit-{tmp_path.name}", mirror=mirror)
    first.run_file = tmp_path / "out" / RUN_FILE
    first.start()
    first.finish("FAILED")
    assert read_run_file(mirror, store) == first.run_id
    (tmp_path / "out" / RUN_FILE).unlink()
    again = MlflowTracker(store, run_file=tmp_path / "out" / RUN_FILE, resume=True, mirror=mirror)
    again.start()
    again.finish()
    assert again.run_id == first.run_id and again.resumed


@pytest.mark.slow
def test_injected_run_id_wins_over_the_recorded_run(store, tmp_path, monkeypatch):
    import mlflow

    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    first = _tracker(tmp_path, store)
    first.start()
    first.finish()
    exp = mlflow.MlflowClient(store).get_experiment_by_name(first.experiment).experiment_id
    injected = mlflow.MlflowClient(store).create_run(exp).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", injected)
    t = _tracker(tmp_path, store, resume=True)
    t.start()
    t.finish()
    assert t.run_id == injected and not t.resumed


@pytest.mark.slow
def test_mlflow_logs_and_registers_the_model_with_an_alias(tracker, tmp_path, monkeypatch):
    import mlflow

    from conductor_core.policy.tiny import build_tiny_conductor
    from conductor_core.track.registry import load_model_dir

    model_dir = build_tiny_conductor(
        tmp_path / "m", hidden=64, heads=2, kv_heads=1, layers=1, vocab=300
    )
    from transformers import AutoModelForCausalLM

    from conductor_core.workflow.prompts import PROMPT_SPEC_FILE, save_prompt_spec

    save_prompt_spec(model_dir, "compact")
    tracker.start()
    uri = tracker.log_model(model_dir, registered_name="conductor-unit", alias="champion")
    tracker.finish()
    assert uri == "models:/conductor-unit@champion"
    version = mlflow.MlflowClient().get_model_version_by_alias("conductor-unit", "champion")
    assert int(version.version) == 1 and version.run_id == tracker.run_id
    folder = load_model_dir(uri, tmp_path / "loaded")
    names = {p.name for p in folder.iterdir()}
    assert {"config.json", "tokenizer_config.json", PROMPT_SPEC_FILE} <= names
    assert any(n.endswith(".safetensors") for n in names)
    reloaded = AutoModelForCausalLM.from_pretrained(folder)
    assert reloaded.config.hidden_size == 64
