"""The local tracking default on a real MLflow SQLite store: a failed run, its flattened params,
scrubbed tags and artifacts (flattening and scrubbing without a store:
tests/unit/test_track_params.py)."""

from __future__ import annotations

import os

import pytest

from conductor_core.track.scrub import REDACTED, is_secret_key

KEY = "sk-proj-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in list(os.environ):
        if is_secret_key(name):
            monkeypatch.delenv(name)


@pytest.mark.slow
def test_local_sqlite_run_failed_status_and_artifacts(tmp_path, monkeypatch):
    """The embedded default: SQLite store, artifacts in runs/mlartifacts/<experiment>."""
    import mlflow

    from conductor_core.track import log_params_flat, log_table, start_run

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.setenv("CONDUCTOR_RUNS_DIR", str(tmp_path))
    with pytest.raises(ValueError), start_run("unit local", tags={"t": KEY}) as run:
        log_params_flat({"a": {"b": 1}})
        log_table([{"x": 1}, {"x": 2}], "tbl")
        raise ValueError("stop")
    got = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").get_run(run.info.run_id)
    assert got.info.status == "FAILED"
    assert got.data.params == {"a.b": "1"}
    assert got.data.tags["t"] == REDACTED
    assert (tmp_path / "mlflow.db").is_file()
    stored = tmp_path / "mlartifacts" / "unit_local" / run.info.run_id / "artifacts" / "tbl.json"
    assert stored.is_file()
