"""conductor_core.track against a real MLflow server (SQLite backend) with artifacts in a real S3
protocol server (moto) on loopback. One server of each per session (see conftest.py)."""

from __future__ import annotations

import json

import pytest

from conductor_core.track import (
    COMPLETE_MARKER,
    RunTracker,
    Storage,
    load_model_dir,
    log_and_register_model,
    log_figure,
    log_metrics,
    log_params_flat,
    log_solve_trace,
    log_table,
    reopen_run,
    start_run,
)
from conductor_core.track.traces import flush_traces
from conductor_core.workers.config import PoolConfig
from conductor_core.workflow.trace import RoundTrace, SolveTrace, StepTrace, WorkflowTrace

LEAKED_KEY = "sk-test-" + "A1b2C3d4E5f6G7h8I9j0K1l2"


def _client():
    import mlflow

    return mlflow.MlflowClient()


def _pool() -> PoolConfig:
    return PoolConfig.model_validate(
        {
            "workers": [
                {
                    "provider": "openai",
                    "model": "gpt-x",
                    "endpoint": "http://vllm:8000/v1",
                    "api_key_env": "TEST_WORKER_KEY",
                },
                {"provider": "simulated", "model": "sim-b"},
            ]
        }
    )


def _run_keys(s3, run_id: str) -> list[str]:
    return [k for k in s3.keys("mlflow/") if f"/{run_id}/" in k]


def test_params_metrics_table_figure_round_trip(mlflow_env, s3_env, monkeypatch):
    monkeypatch.setenv("TEST_WORKER_KEY", LEAKED_KEY)
    config = {"stage": "base", "pool": _pool(), "notes": f"key was {LEAKED_KEY}", "lr": 1e-6}
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot([0, 1, 2], [0.1, 0.5, 0.9])
    with start_run("it-roundtrip", run_name="rt", tags={"stage": "base"}) as run:
        logged = log_params_flat(config)
        for step in range(3):
            log_metrics({"reward/mean": 0.1 * step, "bad": float("nan")}, step=step)
        log_table([{"plan": "p1", "reward": 1.0}, {"plan": "p2", "reward": 0.5}], "samples")
        log_figure(fig, "plots/reward")
    plt.close(fig)
    run_id = run.info.run_id

    got = _client().get_run(run_id)
    assert got.info.status == "FINISHED"
    assert got.data.tags["stage"] == "base"
    params = got.data.params
    assert params == logged
    assert params["pool.workers.0.api_key_env"] == "TEST_WORKER_KEY"
    assert params["pool.workers.1.model"] == "sim-b"
    assert params["notes"] == "***"
    assert all(LEAKED_KEY not in v for v in params.values())
    history = _client().get_metric_history(run_id, "reward/mean")
    assert [(m.step, round(m.value, 6)) for m in history] == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert "bad" not in got.data.metrics

    # Artifacts went straight to the moto bucket (the server does not serve artifacts).
    keys = _run_keys(s3_env, run_id)
    assert any(k.endswith("artifacts/samples.json") for k in keys), keys
    assert any(k.endswith("artifacts/plots/reward.png") for k in keys), keys
    body = (
        s3_env.client()
        .get_object(Bucket=s3_env.bucket, Key=next(k for k in keys if k.endswith("samples.json")))[
            "Body"
        ]
        .read()
    )
    table = json.loads(body)
    assert table["columns"] == ["plan", "reward"]
    assert [row[0] for row in table["data"]] == ["p1", "p2"]


def test_raising_block_marks_run_failed(mlflow_env):
    with pytest.raises(RuntimeError, match="boom"), start_run("it-failed") as run:
        log_metrics({"x": 1.0})
        raise RuntimeError("boom")
    assert _client().get_run(run.info.run_id).info.status == "FAILED"
    import mlflow

    assert mlflow.active_run() is None


def test_injected_run_id_is_reused_and_reopened(mlflow_env, monkeypatch):
    client = _client()
    exp_id = client.create_experiment("it-injected")
    injected = client.create_run(exp_id, run_name="kfp-task").info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", injected)
    with start_run("some-other-experiment", run_name="ignored") as run:
        assert run.info.run_id == injected
        log_params_flat({"a": 1})
    assert client.get_run(injected).info.status == "FINISHED"
    assert len(client.search_runs([exp_id])) == 1
    assert client.get_experiment_by_name("some-other-experiment") is None

    # Something (TRL) ended the run; re-open it to log more.
    with reopen_run(injected):
        log_metrics({"after": 2.0}, step=7)
    run = client.get_run(injected)
    assert run.info.status == "FINISHED"
    assert run.data.metrics["after"] == 2.0
    assert run.data.params["a"] == "1"


def _solve_trace() -> SolveTrace:
    steps = [
        StepTrace(
            index=0,
            worker=0,
            model="gpt-x",
            subtask="solve it",
            access=[],
            response="42",
            input_tokens=10,
            output_tokens=5,
            cost=0.01,
            latency_s=0.5,
            started_s=0.0,
            finished_s=0.5,
        ),
        StepTrace(
            index=1,
            worker=1,
            model="sim-b",
            subtask="also solve it",
            access=[],
            response=f"leaked {LEAKED_KEY} here",
            latency_s=0.4,
            started_s=0.0,
            finished_s=0.4,
        ),
        StepTrace(
            index=2,
            worker=0,
            model="gpt-x",
            subtask="check",
            access=["all"],
            visible=[0, 1],
            error="timeout after 1s",
            error_kind="timeout",
            started_s=0.5,
            finished_s=1.5,
        ),
    ]
    wf = WorkflowTrace(steps=steps, answer="42", calls=3, wall_s=1.5)
    return SolveTrace(
        question="What is 6*7?",
        rounds=[
            RoundTrace(round=1, raw_plan="model_id=[0,1,0]", conductor_latency_s=0.2, workflow=wf),
            RoundTrace(round=2, raw_plan="model_id=[]", kept_previous=True),
        ],
        answer="42",
        calls=3,
        wall_s=1.8,
    )


def test_solve_trace_round_trip(mlflow_env, monkeypatch):
    import mlflow

    with start_run("it-traces") as run:
        trace_id = log_solve_trace(
            _solve_trace().model_dump(), name="conductor q1", attributes={"correct": True}
        )
    flush_traces()
    trace = mlflow.get_trace(trace_id)
    spans = {s.name: s for s in trace.data.spans}
    assert set(spans) == {
        "conductor q1",
        "round 1",
        "round 2",
        "step 0 (worker 0)",
        "step 1 (worker 1)",
        "step 2 (worker 0)",
    }
    root = spans["conductor q1"]
    assert root.parent_id is None
    assert root.inputs == {"question": "What is 6*7?"}
    assert root.attributes["correct"] is True
    r1 = spans["round 1"]
    assert r1.parent_id == root.span_id
    step0, step1, step2 = (spans[f"step {i} (worker {w})"] for i, w in ((0, 0), (1, 1), (2, 0)))
    assert {step0.parent_id, step1.parent_id, step2.parent_id} == {r1.span_id}
    assert step0.inputs["subtask"] == "solve it"
    assert step0.outputs["response"] == "42"
    assert step0.attributes["output_tokens"] == 5
    assert step2.status.status_code == "ERROR"
    assert step2.attributes["error_kind"] == "timeout"
    # The two parallel steps overlap on the timeline; the checker starts after step 0.
    assert step1.start_time_ns < step0.end_time_ns
    assert step2.start_time_ns >= step0.end_time_ns - 1000
    assert LEAKED_KEY not in trace.to_json()
    assert "***" in step1.outputs["response"]
    assert trace.info.request_metadata.get("mlflow.sourceRun") == run.info.run_id


def test_register_alias_and_download(mlflow_env, s3_env, tmp_path):
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text('{"model_type": "qwen2"}')
    weights = bytes(range(256)) * 64
    (model_dir / "model.safetensors").write_bytes(weights)
    (model_dir / "tokenizer.json").write_text("{}")

    uri = log_and_register_model(model_dir, "it-conductor", alias="champion")
    assert uri == "models:/it-conductor@champion"
    client = _client()
    assert client.get_model_version_by_alias("it-conductor", "champion").version == "1"

    (model_dir / "model.safetensors").write_bytes(weights[::-1])
    with start_run("it-models") as run:
        assert log_and_register_model(model_dir, "it-conductor") == uri
    version = client.get_model_version_by_alias("it-conductor", "champion")
    assert version.version == "2"
    assert version.run_id == run.info.run_id

    local = load_model_dir(uri, tmp_path / "download")
    assert (local / "model.safetensors").read_bytes() == weights[::-1]
    assert json.loads((local / "config.json").read_text()) == {"model_type": "qwen2"}
    # The weights live in the moto bucket.
    assert any(k.endswith("artifacts/model/model.safetensors") for k in s3_env.keys("mlflow/"))

    # Without a folder, the download goes to a temporary folder that its process removes on exit.
    import subprocess
    import sys
    from pathlib import Path

    code = f"from conductor_core.track import load_model_dir; print(load_model_dir({uri!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    fetched = Path(done.stdout.strip().splitlines()[-1])
    assert fetched.name and "conductor-model-" in str(fetched)
    assert not fetched.exists()


def test_run_tracker_adapter(mlflow_env):
    tracker = RunTracker(experiment="it-tracker", run_name="adapter")
    tracker.start()
    tracker.log_params({"config": {"lr": 0.1, "api_key": "x"}})
    tracker.log_metrics({"reward": 0.5}, step=1)
    tracker.finish("FAILED")
    run = _client().get_run(tracker.run_id)
    assert run.info.status == "FAILED"
    assert run.data.params == {"config.lr": "0.1"}
    assert run.data.metrics == {"reward": 0.5}


def test_storage_on_s3(s3_env, tmp_path):
    storage = Storage()
    base = f"s3://{s3_env.bucket}/ckpt/run-1"
    for step in (1, 2, 10):
        src = tmp_path / f"checkpoint-{step}"
        (src / "sub").mkdir(parents=True)
        (src / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        (src / "sub" / "w.bin").write_bytes(bytes([step]) * 100)
        assert storage.upload_dir(src, f"{base}/checkpoint-{step}") == 2
    partial = tmp_path / "checkpoint-11"
    partial.mkdir()
    (partial / "trainer_state.json").write_text("{}")
    storage.upload_dir(partial, f"{base}/checkpoint-11", mark_complete=False)

    assert storage.latest_checkpoint(base) == f"{base}/checkpoint-10"
    assert storage.latest_checkpoint(base, marker="trainer_state.json") == f"{base}/checkpoint-11"
    assert storage.latest_checkpoint(f"s3://{s3_env.bucket}/nothing") is None
    assert storage.list(base) == [f"checkpoint-{s}" for s in (1, 10, 11, 2)]
    assert storage.list(f"{base}/checkpoint-2") == [COMPLETE_MARKER, "sub", "trainer_state.json"]
    assert storage.exists(f"{base}/checkpoint-2")
    assert storage.exists(f"{base}/checkpoint-2/sub/w.bin")
    assert not storage.exists(f"{base}/checkpoint-3")

    out = storage.download_dir(f"{base}/checkpoint-10", tmp_path / "restored")
    assert (out / "sub" / "w.bin").read_bytes() == bytes([10]) * 100
    assert json.loads((out / "trainer_state.json").read_text()) == {"global_step": 10}
    assert (out / COMPLETE_MARKER).is_file()


def test_storage_missing_bucket_is_a_clear_error(s3_env, tmp_path):
    from conductor_core.errors import ConfigError

    (tmp_path / "a.txt").write_text("a")
    with pytest.raises(ConfigError, match="bucket 'no-such-bucket' does not exist"):
        Storage().upload_dir(tmp_path, "s3://no-such-bucket/x")
