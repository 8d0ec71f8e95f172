"""The summary a local pipeline run ends with names its MLflow run and prints the command that
compares what it evaluated (the command itself runs against MLflow in
tests/integration/test_mlflow_compare.py)."""

from __future__ import annotations

import json

from conductor_pipeline_runner.local import LocalRun
from conductor_pipeline_runner.summary import render_summary

COMPARISON = {
    "rows": [
        {
            "method": "conductor",
            "label": "trained Conductor",
            "accuracy": 0.5,
            "stderr": 0.1,
            "calls_per_question": 1.5,
            "cost_per_question": 0.001,
            "tokens_per_question": 100.0,
        }
    ],
    "conductor_ahead": None,
}


def _run(tmp_path, kfp_run_id: str | None, evaluated: bool = True) -> LocalRun:
    run_dir = tmp_path / "kfp" / "conductor-training-2030-01-02-03-04-05-000006"
    folder = run_dir / "aggregate" / "comparison"
    folder.mkdir(parents=True)
    if evaluated:
        (folder / "comparison.json").write_text(json.dumps(COMPARISON))
    return LocalRun(
        pipeline="training",
        run_dir=run_dir,
        log_path=tmp_path / "run.log",
        seconds=3.0,
        kfp_run_id=kfp_run_id,
        mlflow_run_name=f"conductor-training-{kfp_run_id}" if kfp_run_id else None,
    )


def test_the_summary_prints_the_compare_command_for_its_store(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    text = render_summary(_run(tmp_path, "42"), root=tmp_path)
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert "conductor-training-42 (KFP run id 42)" in text
    assert f"MLFLOW_TRACKING_URI={store} conductor eval compare --kfp-run-id 42" in text
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    text = render_summary(_run(tmp_path / "b", "42"), root=tmp_path / "b")
    assert "  conductor eval compare --kfp-run-id 42" in text  # the environment says where


def test_no_compare_command_without_a_run_id_or_an_evaluation(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert "eval compare" not in render_summary(_run(tmp_path, None), root=tmp_path)
    text = render_summary(_run(tmp_path / "b", "7", evaluated=False), root=tmp_path / "b")
    assert "eval compare" not in text and "(KFP run id 7)" in text
