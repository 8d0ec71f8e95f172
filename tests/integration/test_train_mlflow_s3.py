"""A tiny base stage through the real ``conductor train`` CLI against a real MLflow server with S3
artifacts (moto): killed with SIGKILL once ``checkpoint-2`` is in S3, then restarted as on a new
pod (local checkpoints and run record deleted) and checked end to end: resumed at step 2 from S3,
one MLflow run with the metrics from before and after the kill (ended FINISHED), params without
the worker's key, the sample-plans table, checkpoints in S3, and the model registered with an
alias, its weights in S3 and loadable by ``models:/name@alias``."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import yaml

from conductor_core.train.config import build_config

KEY_ENV = "CONDUCTOR_IT_WORKER_KEY"
FAKE_KEY = "zz-it-" + "4f1c9e7a2b8d6053e1f7"
"""A fake key that matches no credential pattern: only the env-value scrubbing can hide it."""

STEPS = 4
KILL_DEADLINE_S = 150.0
RESTART_TIMEOUT_S = 150.0
WORKER_LATENCY_MS = 250.0
"""Per worker call; widens the window between checkpoint-2 and checkpoint-4 for the kill."""


def _pool(path: Path) -> Path:
    """The bundled training pool, slowed down, with one worker naming a key variable."""
    from conductor_core.workers.bundled import bundled_train_pool_path

    data = yaml.safe_load(Path(bundled_train_pool_path()).read_text(encoding="utf-8"))
    for worker in data["workers"]:
        worker["simulation"]["latency_ms"] = WORKER_LATENCY_MS
    data["workers"][-1]["api_key_env"] = KEY_ENV
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def _config(tmp_path: Path, bucket: str, tag: str, tracking_uri: str):
    """The tiny base stage (the unit tests' fast recipe) tracked on the server, ckpts in S3."""
    data = {
        "output_dir": str(tmp_path / "out"),
        "steps": STEPS,
        "questions_per_step": 4,
        "plans_per_question": 2,
        "model": {"tiny": {"hidden": 64, "heads": 2, "kv_heads": 1, "layers": 1, "vocab": 400}},
        "generation": {"max_completion_length": 24},
        "warmup": {"steps": 5, "batch_size": 4},
        "data": {"max_problems": 40, "pool": str(_pool(tmp_path / "pool.yaml"))},
        "checkpoint": {"dir": f"s3://{bucket}/ckpt/{tag}", "save_steps": 2},
        "tracking": {
            "backend": "mlflow",
            "tracking_uri": tracking_uri,
            "experiment": f"it-train-{tag}",
            "log_model": True,
            "registered_model": f"conductor-it-{tag}",
            "alias": "candidate",
            "sample_plans": 4,
        },
    }
    return build_config(data, stage="base", profile="tiny")


def _train_cmd(config_path: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "conductor_core",
        "train",
        "--config",
        str(config_path),
        "--no-progress",
    ]


def _checkpoint_uploaded(s3, tag: str, local: Path) -> bool:
    """True once every file of the local ``checkpoint-2`` is in S3."""
    state = local / "trainer_state.json"
    if not state.is_file():
        return False
    files = {p.relative_to(local).as_posix() for p in local.rglob("*") if p.is_file()}
    prefix = f"ckpt/{tag}/checkpoint-2/"
    keys = {k[len(prefix) :] for k in s3.keys(prefix)}
    return bool(files) and files <= keys


def _kill_after_checkpoint_2(cmd, env, log: Path, s3, tag: str, out: Path) -> None:
    local = out / "checkpoints" / "checkpoint-2"
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
    try:
        deadline = time.monotonic() + KILL_DEADLINE_S
        while proc.poll() is None and time.monotonic() < deadline:
            if _checkpoint_uploaded(s3, tag, local):
                break
            time.sleep(0.1)
        alive = proc.poll() is None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    tail = log.read_text(errors="replace")[-3000:]
    assert alive, f"the first run ended (rc {proc.returncode}) before the kill:\n{tail}"
    assert _checkpoint_uploaded(s3, tag, local), f"checkpoint-2 never reached S3:\n{tail}"
    assert not (out / "checkpoints" / "checkpoint-4").exists(), "killed too late (checkpoint-4)"


def _artifact_texts(client, run_id: str, dst: Path) -> dict[str, str]:
    """Every small text artifact of the run, by path (weights and other binaries skipped)."""
    import mlflow

    texts: dict[str, str] = {}
    pending = [None]
    while pending:
        folder = pending.pop()
        for item in client.list_artifacts(run_id, folder):
            if item.is_dir:
                pending.append(item.path)
            elif (item.file_size or 0) < 2_000_000:
                local = mlflow.artifacts.download_artifacts(
                    run_id=run_id, artifact_path=item.path, dst_path=str(dst)
                )
                raw = Path(local).read_bytes()
                texts[item.path] = raw.decode("utf-8", errors="ignore")
    return texts


def test_killed_stage_resumes_into_the_same_run_and_registers_the_model(
    mlflow_env, s3_env, tmp_path, monkeypatch
):
    import mlflow

    from conductor_core.track.registry import load_model_dir

    tag = uuid.uuid4().hex[:8]
    config = _config(tmp_path, s3_env.bucket, tag, mlflow_env.uri)
    config_path = tmp_path / "stage.yaml"
    config.to_yaml(config_path)
    out = config.output_path()
    monkeypatch.setenv(KEY_ENV, FAKE_KEY)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    env.pop("MLFLOW_RUN_ID", None)

    _kill_after_checkpoint_2(_train_cmd(config_path), env, tmp_path / "run1.log", s3_env, tag, out)
    first = json.loads((out / "mlflow_run.json").read_text())
    client = mlflow.MlflowClient()
    before = {m.step for m in client.get_metric_history(first["run_id"], "reward")}
    assert before and min(before) <= 2, f"no reward logged before the kill: {before}"
    # A new pod: local checkpoints and run record are gone; their S3 copies remain.
    assert f"ckpt/{tag}/mlflow_run.json" in s3_env.keys(f"ckpt/{tag}/")
    shutil.rmtree(out / "checkpoints")
    (out / "mlflow_run.json").unlink()

    done = subprocess.run(
        _train_cmd(config_path),
        env=env,
        capture_output=True,
        text=True,
        timeout=RESTART_TIMEOUT_S,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]

    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed_from"].endswith("checkpoint-2")
    assert summary["steps"] == STEPS

    run_id = json.loads((out / "mlflow_run.json").read_text())["run_id"]
    assert run_id == first["run_id"]
    exp = client.get_experiment_by_name(config.tracking.experiment)
    runs = client.search_runs([exp.experiment_id])
    assert [r.info.run_id for r in runs] == [run_id], "the restart opened a second run"
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"

    steps = {m.step for m in client.get_metric_history(run_id, "reward")}
    assert {1, 2, 3, 4} <= steps
    assert client.get_metric_history(run_id, "conductor/format_error_rate")

    params = run.data.params
    assert params["stage"] == "base" and params["steps"] == str(STEPS)
    assert params["checkpoint.save_steps"] == "2"
    assert params["pool.workers.3.api_key_env"] == KEY_ENV
    assert all(FAKE_KEY not in v for v in params.values())
    assert all(FAKE_KEY not in v for v in run.data.tags.values())

    texts = _artifact_texts(client, run_id, tmp_path / "artifacts")
    assert "sample_plans.json" in texts and "summary.json" in texts
    plans = json.loads(texts["sample_plans.json"])
    assert "plan" in plans["columns"] and plans["data"]
    assert all(FAKE_KEY not in text for text in texts.values())

    keys = s3_env.keys(f"ckpt/{tag}/")
    for step in (2, 4):
        assert f"ckpt/{tag}/checkpoint-{step}/trainer_state.json" in keys

    name, alias = config.tracking.registered_model, config.tracking.alias
    version = client.get_model_version_by_alias(name, alias)
    assert version.run_id == run_id
    weights = [
        k for k in s3_env.keys(f"mlflow/{exp.experiment_id}/") if k.endswith("model.safetensors")
    ]
    assert weights, "no model weights under the MLflow artifact root in S3"
    assert version.source.startswith("models:/") or version.source.startswith("s3://")

    folder = load_model_dir(f"models:/{name}@{alias}", tmp_path / "loaded")
    assert (folder / "config.json").is_file()
    assert (folder / "tokenizer_config.json").is_file()
    assert json.loads((folder / "config.json").read_text())["hidden_size"] == 64
