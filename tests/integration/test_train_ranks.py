"""`conductor train` under torchrun with two processes (gloo on CPU): both ranks train, rank 0
alone tracks the run in MLflow and writes the checkpoints and the model
(``conductor_core.train.ranks``)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.train_configs import small

pytestmark = pytest.mark.slow


def test_two_ranks_train_and_rank_0_alone_tracks_and_saves(tmp_path):
    import mlflow

    out = tmp_path / "base"
    db = tmp_path / "mlflow.db"
    config = small(
        out,
        tracking={
            "backend": "mlflow",
            "tracking_uri": f"sqlite:///{db}",
            "experiment": "ranks",
            "registered_model": "conductor-ranks",
            "log_model": True,
        },
    )
    config.to_yaml(tmp_path / "c.yaml")
    env = {
        **os.environ,
        "GLOO_SOCKET_IFNAME": "lo",  # the process group talks over loopback only
        "MLFLOW_TRACKING_URI": f"sqlite:///{db}",
    }
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "torch.distributed.run"),
            *("--standalone", "--nproc-per-node", "2"),
            *("-m", "conductor_core", "train", "--config", str(tmp_path / "c.yaml")),
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=240,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    # Every rank trained both steps (DDP: neither could step without the other) and scored its
    # own share of each step's plans.
    for rank in (0, 1):
        assert f"rank {rank}/2: trained 2 steps, its reward scored 2 batches" in log, log[-3000:]
    assert log.count("training summary") == 1  # rank 0 prints the summary

    # One MLflow run, with the metrics, holding the one registered model version.
    client = mlflow.MlflowClient(f"sqlite:///{db}")
    experiment = client.get_experiment_by_name("ranks")
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1
    run = runs[0]
    assert run.info.status == "FINISHED"
    assert "reward" in run.data.metrics and "conductor/format_error_rate" in run.data.metrics
    assert len(client.get_metric_history(run.info.run_id, "reward")) == 2
    versions = client.search_model_versions("name='conductor-ranks'")
    assert [v.run_id for v in versions] == [run.info.run_id]

    # One set of checkpoints (rank 1 adds only its RNG state to them) and one model folder.
    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir() if p.is_dir())
    assert checkpoints == ["checkpoint-1", "checkpoint-2"]
    for name in checkpoints:
        files = {p.name for p in (out / "checkpoints" / name).iterdir()}
        assert {"model.safetensors", "trainer_state.json"} <= files
        assert {f for f in files if f.startswith("rng_state")} == {
            "rng_state_0.pth",
            "rng_state_1.pth",
        }
    assert (out / "model" / "model.safetensors").is_file()
    assert (out / "model" / "conductor_prompt.json").is_file()
    assert sorted(p.name for p in out.iterdir() if p.name.startswith("model")) == ["model"]
    assert (out / "summary.json").is_file() and (out / "mlflow_run.json").is_file()
