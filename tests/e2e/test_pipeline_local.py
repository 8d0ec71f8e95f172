"""The training pipeline end to end on Kubeflow's local runner (few steps: it checks the wiring,
the artifacts and the MLflow records; the README's main command runs the full profile)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.minutes]

# Plumbing only: a short warm-up (the profile's 300 steps took about 60 of the run's 160 s) and a
# short expert start in the recursive stage (the profile's 400 steps took 126 of the run's 217 s,
# 2026-12-06).
PARAMS = {
    "base_steps": 2,
    "adaptive_steps": 1,
    "recursive_steps": 1,
    "warmup_steps": 10,
    "expert_start_steps": 10,
    "eval_limit": 24,
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    from conductor_pipeline_runner.local import read_comparison, run_local

    root = tmp_path_factory.mktemp("pipeline")
    saved = {k: os.environ.pop(k, None) for k in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID")}
    try:
        result = run_local("training", PARAMS, root=root, echo=lambda _: None)
    finally:
        for k, v in saved.items():
            if v is not None:
                os.environ[k] = v
    assert result.ok, f"{result.error}\n{result.log_path.read_text()[-4000:]}"
    return root, result, read_comparison(result)


def test_every_task_ran_and_the_summary_compares_the_trained_model(run):
    from conductor_pipeline_runner.summary import render_summary

    root, result, comparison = run
    names = [t.name for t in result.tasks]
    for task in ("check-params", "curate", "validate", "train", "train-2", "train-3"):
        assert task in names
    assert sum(n.startswith("eval-shard") for n in names) == 2  # the ParallelFor's two shards
    assert all(t.status == "SUCCESS" for t in result.tasks)
    labels = [r["label"].split(" (")[0] for r in comparison["rows"]]
    assert labels == ["trained Conductor", "best single worker", "mixture of agents"]
    text = render_summary(result, root=root)
    assert "trained Conductor" in text and "train-3" in text
    assert f"sqlite:///{root / 'mlflow.db'}" in text
    assert result.kfp_run_id and f"conductor eval compare --kfp-run-id {result.kfp_run_id}" in text


def test_stages_hand_on_manifests_and_the_model_is_registered(run):

    import mlflow

    root, result, _ = run
    registered = json.loads(result.output("register", "registered").read_text())
    assert registered["stage"] == "recursive"
    assert (root / "pipelines").resolve() in Path(registered["weights_uri"]).resolve().parents
    client = mlflow.MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    champion = client.get_model_version_by_alias("conductor", "champion")
    assert str(champion.version) == registered["model_version"]
    assert "conductor.accuracy" in champion.tags


def test_one_parent_mlflow_run_with_stage_and_method_runs(run):
    import mlflow

    root, _, comparison = run
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    exp = client.get_experiment_by_name("conductor")
    runs = client.search_runs([exp.experiment_id], max_results=200)
    parents = [r for r in runs if r.data.tags.get("conductor.role") == "pipeline"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.data.tags["conductor.pipeline"] == "conductor-training"
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    stages = {r.data.tags.get("conductor.stage") for r in kids}
    assert {"curate", "validate", "base", "adaptive", "recursive", "evaluate", "register"} <= stages
    evaluate = next(r for r in kids if r.data.tags.get("conductor.stage") == "evaluate")
    methods = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == evaluate.info.run_id]
    assert {r.data.params["method"] for r in methods} >= {"conductor", "moa:1"}
    for r in methods:
        assert "accuracy" in r.data.metrics and "cost_per_question" in r.data.metrics
    conductor = next(r for r in methods if r.data.params["method"] == "conductor")
    assert conductor.data.metrics["accuracy"] == pytest.approx(comparison["rows"][0]["accuracy"])


def test_solve_asks_the_registered_model(run):
    import subprocess
    import sys

    from conductor_core.pipeline_steps.context import pool_path

    root, _, _ = run
    env = {
        **os.environ,
        "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
        "HF_HUB_OFFLINE": "1",
    }
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "conductor_core",
            "solve",
            "--json",
            "--pool",
            pool_path("bundled"),
            "--conductor",
            "models:/conductor@champion",
            "Calculate: (56 + 26) * 25 = ?",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    # 0: answered; 1: the model's plan did not parse (a 4-step model may not write one)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    trace = json.loads(proc.stdout)
    assert trace["question"] == "Calculate: (56 + 26) * 25 = ?"
    assert trace["rounds"][0]["raw_plan"]  # the registered model wrote the plan text


def test_a_bad_parameter_stops_the_run_with_one_clear_line(tmp_path):
    from conductor_pipeline_runner.local import run_local
    from conductor_pipeline_runner.summary import render_summary

    result = run_local("training", {"profile": "tinny"}, root=tmp_path, echo=lambda _: None)
    assert not result.ok
    assert result.error == (
        "task 'check-params' failed: pipeline parameters: profile: 'tinny' is not one of paper, "
        "small, tiny"
    )
    started = {t.name for t in result.tasks}
    assert "check-params" in started and not started & {"curate", "train"}  # nothing ran on
    summary = render_summary(result, root=tmp_path)
    assert "pipeline training: FAILED" in summary and str(result.log_path) in summary


def test_print_and_logging_are_as_they_were_after_a_run(tmp_path, monkeypatch):
    """kfp's local runner swaps ``builtins.print`` and the root logger's handlers per task, and
    parallel tasks can leave them swapped; the run puts them back, even when it fails."""
    import builtins
    import logging

    from kfp.pipeline_spec import pipeline_spec_pb2

    import conductor_pipelines.registry
    from conductor_pipeline_runner.local import run_local

    real = builtins.print
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]

    def leaky_pipeline(**_: object) -> None:
        inner = builtins.print
        builtins.print = lambda *a, **k: inner("    ", end="") or inner(*a, **k)
        root.handlers[:] = [logging.StreamHandler()]
        root.setLevel(logging.INFO if level != logging.INFO else logging.DEBUG)
        raise RuntimeError("task failed")

    leaky_pipeline.pipeline_spec = pipeline_spec_pb2.PipelineSpec()  # as a built one has
    monkeypatch.setattr(conductor_pipelines.registry, "build", lambda *a, **k: leaky_pipeline)
    result = run_local("training", root=tmp_path, echo=lambda _: None)
    assert not result.ok and result.run_dir is None
    assert builtins.print is real
    assert root.handlers == handlers
    assert root.level == level
