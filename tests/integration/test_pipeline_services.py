"""The training pipeline against real services on loopback: an MLflow server (SQLite store,
artifacts in S3) and an S3-protocol server (moto). Checkpoints, models and the registry land
where a cluster run puts them, and a training task killed mid-stage resumes from S3."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.minutes]

SMALL = {
    "questions_per_step": 4,
    "plans_per_question": 2,
    "model": {"tiny": {"hidden": 64, "heads": 2, "kv_heads": 1, "layers": 1, "vocab": 400}},
    "generation": {"max_completion_length": 24},
    "warmup": {"enabled": False},
    "data": {"max_problems": 40},
    "checkpoint": {"save_steps": 2},
    "tracking": {"backend": "none"},
}


def test_local_pipeline_on_real_mlflow_and_s3(mlflow_env, s3_env, tmp_path, monkeypatch):
    """Where containers run, tests/e2e/test_pipeline_docker.py runs the same pipeline against the
    same kind of servers and asserts all of this (every task in a container): one of the two runs
    per test run, not both (about 150 s each on 2 cores)."""
    import mlflow

    from tests.support.containers import containers_run_here

    if containers_run_here("base"):
        pytest.skip("asserted by tests/e2e/test_pipeline_docker.py, which runs here")

    from conductor_pipeline_runner.local import read_comparison, run_local

    monkeypatch.setenv("CONDUCTOR_WORKDIR", str(tmp_path / "workdir"))
    prefix = f"pipelines-{uuid.uuid4().hex[:8]}"
    params = {
        "base_steps": 2,
        "adaptive_steps": 1,
        "recursive_steps": 1,
        "warmup_steps": 10,
        "expert_start_steps": 10,
        "eval_limit": 12,
        "eval_shards": 1,
        "artifact_root": f"s3://{s3_env.bucket}/{prefix}",
        "model_name": "it-pipeline",
    }
    result = run_local("training", params, root=tmp_path / "runs", echo=lambda _: None)
    assert result.ok, f"{result.error}\n{result.log_path.read_text()[-4000:]}"
    assert read_comparison(result)["rows"]

    keys = s3_env.keys(prefix)
    for stage in ("base", "adaptive", "recursive"):
        assert any(k.endswith(f"/{stage}/model/config.json") for k in keys), stage
        assert any(f"/{stage}/model/conductor_prompt.json" in k for k in keys), stage
    assert any("/base/checkpoints/checkpoint-" in k for k in keys)

    registered = json.loads(result.output("register", "registered").read_text())
    assert registered["weights_uri"].startswith(f"s3://{s3_env.bucket}/{prefix}/")
    client = mlflow.MlflowClient(mlflow_env.uri)
    champion = client.get_model_version_by_alias("it-pipeline", "champion")
    assert str(champion.version) == registered["model_version"]

    exp = client.get_experiment_by_name("conductor")
    runs = client.search_runs([exp.experiment_id], max_results=500)
    parent = next(
        r
        for r in runs
        if r.data.tags.get("conductor.role") == "pipeline"
        and r.data.tags.get("conductor.kfp_run_id") in registered["weights_uri"]
    )
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    stages = {r.data.tags.get("conductor.stage") for r in kids}
    assert {"curate", "base", "adaptive", "recursive", "evaluate", "register"} <= stages
    base = next(r for r in kids if r.data.tags.get("conductor.stage") == "base")
    assert base.data.metrics  # training metrics went to the stage run on the server


KILL_AFTER_CHECKPOINT_2 = """
import json, os, signal, sys
from transformers import TrainerCallback
import conductor_core.train.grpo as grpo
from conductor_core.pipeline_steps.train_steps import train_step

class Die(TrainerCallback):
    def on_save(self, args, state, control, **kw):
        if state.global_step == 2:
            os.kill(os.getpid(), signal.SIGKILL)

make = grpo.make_callbacks
grpo.make_callbacks = lambda *a, **k: [*make(*a, **k), Die()]
a = json.loads(sys.argv[1])
train_step(**a)
"""


def test_killed_training_task_resumes_from_its_s3_checkpoint(s3_env, tmp_path, monkeypatch):
    from conductor_core.pipeline_steps.data_steps import curate_step
    from conductor_core.pipeline_steps.manifest import read_manifest
    from conductor_core.pipeline_steps.train_steps import train_step

    monkeypatch.setenv("CONDUCTOR_RUNS_DIR", str(tmp_path / "runs"))  # MLflow's local store
    dataset = tmp_path / "dataset"
    curate_step("pipeline", dataset, log=lambda _: None)
    prefix = f"resume-{uuid.uuid4().hex[:8]}"
    args = {
        "stage": "base",
        "profile": "tiny",
        "dataset_dir": str(dataset),
        "run_id": "run-1",
        "manifest_path": str(tmp_path / "manifest.json"),
        "steps": 4,
        "root": f"s3://{s3_env.bucket}/{prefix}",
        "overrides": SMALL,
    }
    # the first pod: killed right after checkpoint-2 reached S3
    monkeypatch.setenv("CONDUCTOR_WORKDIR", str(tmp_path / "pod-1"))
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_CHECKPOINT_2, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    keys = s3_env.keys(prefix)
    assert any("/base/checkpoints/checkpoint-2/" in k for k in keys)
    assert not any("/base/model/" in k for k in keys)

    # the retried task runs on a fresh pod (an empty work folder): it resumes from S3
    monkeypatch.setenv("CONDUCTOR_WORKDIR", str(tmp_path / "pod-2"))
    manifest = train_step(**{**args, "log": lambda _: None})
    assert manifest.steps == 4
    assert read_manifest(tmp_path / "manifest.json") == manifest
    summary = json.loads(
        (tmp_path / "pod-2" / "conductor-work" / "run-1" / "base" / "summary.json").read_text()
    )
    assert summary["resumed_from"] and summary["resumed_from"].endswith("checkpoint-2")
    assert any(k.endswith("/base/model/config.json") for k in s3_env.keys(prefix))


def test_trainjob_launcher_hands_data_and_weights_through_s3(s3_env, tmp_path, monkeypatch):
    """``launcher=trainjob``: the component uploads the dataset, the TrainJob's nodes run
    ``conductor train --config stage.yaml`` (here: that command in a subprocess, with the node's
    /workspace as a local folder; the Trainer itself is tested against kmock in
    test_trainjob_kmock.py), and the model comes back through S3."""
    import yaml

    import conductor_core.cluster.launcher as launcher
    from conductor_core.cluster.launcher import LaunchResult
    from conductor_core.errors import ConfigError
    from conductor_core.pipeline_steps.data_steps import curate_step
    from conductor_core.pipeline_steps.train_steps import train_step

    dataset = tmp_path / "dataset"
    curate_step("pipeline", dataset, log=lambda _: None)
    root = f"s3://{s3_env.bucket}/tj-{uuid.uuid4().hex[:8]}"
    launched = []

    def node(request, settings, **_):
        config = yaml.safe_load(request.stage_config)
        launched.append(config)
        if request.stage == "base":
            config["output_dir"] = str(tmp_path / "node" / config["output_dir"].lstrip("/"))
            path = tmp_path / "stage.yaml"
            path.write_text(yaml.safe_dump(config))
            cmd = [sys.executable, "-m", "conductor_core", "train", "--stage", "base"]
            subprocess.run([*cmd, "--config", str(path), "--no-progress"], check=True, timeout=600)
        return LaunchResult("cdt-test", "default", "Complete", "", 1.0, False)

    monkeypatch.setattr(launcher, "launch_and_wait", node)
    args = {
        "profile": "tiny",
        "dataset_dir": str(dataset),
        "run_id": "run-tj",
        "steps": 2,
        "launcher": "trainjob",
        "root": root,
        "overrides": SMALL,
        "log": lambda _: None,
    }
    base = train_step(stage="base", manifest_path=str(tmp_path / "base.json"), **args)
    assert base.weights_uri == f"{root}/run-tj/base/model"
    first = launched[0]
    assert first["data"]["problems"] == f"{root}/run-tj/base/data/train.parquet"
    assert first["checkpoint"]["dir"] == f"{root}/run-tj/base/checkpoints"
    keys = s3_env.keys(root.split("/", 3)[3])
    assert any(k.endswith("/base/model/config.json") for k in keys)

    train_step(
        stage="adaptive",
        manifest_path=str(tmp_path / "adaptive.json"),
        init_manifest=str(tmp_path / "base.json"),
        **args,
    )
    assert launched[1]["init_from"] == base.weights_uri  # the nodes download it from S3

    with pytest.raises(ConfigError, match="s3://"):
        train_step(stage="base", manifest_path=str(tmp_path / "x.json"), **{**args, "root": ""})
