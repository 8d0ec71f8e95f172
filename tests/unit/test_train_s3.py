"""S3 checkpoints against a real S3-protocol server on loopback (moto_server): upload on save,
and a run whose local checkpoints are gone resumes from the latest checkpoint in S3."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    moto = Path(sys.executable).parent / "moto_server"
    if not moto.exists():
        pytest.skip("moto_server is not installed (pip install 'moto[server]')")
    port = _free_port()
    proc = subprocess.Popen(
        [str(moto), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    endpoint = f"http://127.0.0.1:{port}"
    saved = {
        k: os.environ.get(k)
        for k in (
            "AWS_ENDPOINT_URL_S3",
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_DEFAULT_REGION",
        )
    }
    os.environ.update(
        AWS_ENDPOINT_URL_S3=endpoint,
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
    )
    try:
        from conductor_core.train.storage import s3_client

        client = s3_client()
        deadline = time.time() + 30
        while True:
            try:
                client.create_bucket(Bucket="ckpt")
                break
            except Exception:
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        yield client
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def test_storage_round_trip(s3, tmp_path):
    from conductor_core.train import storage

    for step in (1, 2, 3):
        d = tmp_path / "local" / f"checkpoint-{step}"
        d.mkdir(parents=True)
        (d / "weights.bin").write_bytes(b"w" * step)
        if step < 3:  # checkpoint-3 is incomplete (no trainer state)
            (d / "trainer_state.json").write_text("{}")
        storage.upload_dir(d, f"s3://ckpt/run/checkpoint-{step}", client=s3)
    assert storage.latest_remote_checkpoint("s3://ckpt/run", client=s3) == "checkpoint-2"
    got = storage.download_checkpoint("s3://ckpt/run", "checkpoint-2", tmp_path / "dl", client=s3)
    assert (got / "weights.bin").read_bytes() == b"ww"
    assert storage.last_local_checkpoint(tmp_path / "dl") == got


def test_stage_uploads_checkpoints_and_resumes_from_s3(s3, tmp_path):
    from conductor_core.train.config import build_config
    from conductor_core.train.grpo import run_stage

    def config(steps: int):
        return build_config(
            {
                "output_dir": str(tmp_path / "run"),
                "steps": steps,
                "questions_per_step": 2,
                "plans_per_question": 2,
                "model": {
                    "tiny": {"hidden": 64, "heads": 2, "kv_heads": 1, "layers": 1, "vocab": 300}
                },
                "generation": {"max_completion_length": 16},
                "warmup": {"enabled": False},
                "data": {"max_problems": 20},
                "checkpoint": {"dir": "s3://ckpt/stage", "save_steps": 1},
                "tracking": {"backend": "none"},
            },
            stage="base",
            profile="tiny",
        )

    first = run_stage(config(1), progress=False)
    assert first.steps == 1
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="ckpt", Prefix="stage/")["Contents"]]
    assert "stage/checkpoint-1/trainer_state.json" in keys
    shutil.rmtree(tmp_path / "run" / "checkpoints")
    second = run_stage(config(2), progress=False)
    assert second.resumed_from is not None and second.resumed_from.endswith("checkpoint-1")
    assert second.steps == 2
