"""S3 checkpoints against the session's S3-protocol server on loopback (``s3_env``, a moto_server
started by ``tests/integration/conftest.py``): upload on save, and a run whose local checkpoints
are gone resumes from the latest checkpoint in S3."""

from __future__ import annotations

import shutil
import uuid

import pytest

pytestmark = pytest.mark.slow


@pytest.fixture
def s3(s3_env):
    """A boto3 client built the way training builds it (endpoint and keys from ``s3_env``)."""
    from conductor_core.train.checkpoints import s3_client

    return s3_client()


@pytest.fixture
def base(s3_env) -> str:
    """A fresh ``s3://`` folder in the session bucket (shared with other tests)."""
    return f"s3://{s3_env.bucket}/train-s3/{uuid.uuid4().hex[:8]}"


def test_storage_round_trip(s3, base, tmp_path):
    from conductor_core.train import checkpoints

    for step in (1, 2, 3):
        d = tmp_path / "local" / f"checkpoint-{step}"
        d.mkdir(parents=True)
        (d / "weights.bin").write_bytes(b"w" * step)
        if step < 3:  # checkpoint-3 is incomplete (no trainer state)
            (d / "trainer_state.json").write_text("{}")
        checkpoints.upload_dir(d, f"{base}/run/checkpoint-{step}", client=s3)
    assert checkpoints.latest_remote_checkpoint(f"{base}/run", client=s3) == "checkpoint-2"
    got = checkpoints.download_checkpoint(f"{base}/run", "checkpoint-2", tmp_path / "dl", client=s3)
    assert (got / "weights.bin").read_bytes() == b"ww"
    assert checkpoints.last_local_checkpoint(tmp_path / "dl") == got


def test_an_upload_cut_short_leaves_no_checkpoint_to_resume_from(s3, base, tmp_path):
    """The trainer's state marks a checkpoint complete, so it goes up last: an upload killed
    after any other file (``vocab.json`` sorts after it) is not taken for a checkpoint."""
    from conductor_core.train import checkpoints

    d = tmp_path / "checkpoint-5"
    (d / "nested").mkdir(parents=True)
    for name in ("model.safetensors", "trainer_state.json", "vocab.json", "nested/z.bin"):
        (d / name).write_text(name)
    order: list[str] = []

    class _Killed(Exception):
        pass

    real = s3.upload_file

    def upload_file(path: str, bucket: str, key: str) -> None:
        order.append(key.rsplit("checkpoint-5/", 1)[1])
        if len(order) == 4:  # killed while uploading the last file
            raise _Killed
        real(path, bucket, key)

    s3.upload_file = upload_file
    with pytest.raises(_Killed):
        checkpoints.upload_dir(d, f"{base}/cut/checkpoint-5", client=s3)
    assert order[-1] == "trainer_state.json"
    assert checkpoints.latest_remote_checkpoint(f"{base}/cut", client=s3) is None


def test_stage_uploads_checkpoints_and_resumes_from_s3(s3_env, base, tmp_path):
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
                "checkpoint": {"dir": f"{base}/stage", "save_steps": 1},
                "tracking": {"backend": "none"},
            },
            stage="base",
            profile="tiny",
        )

    first = run_stage(config(1), progress=False)
    assert first.steps == 1
    prefix = base.removeprefix(f"s3://{s3_env.bucket}/")
    assert f"{prefix}/stage/checkpoint-1/trainer_state.json" in s3_env.keys(f"{prefix}/stage/")
    shutil.rmtree(tmp_path / "run" / "checkpoints")
    second = run_stage(config(2), progress=False)
    assert second.resumed_from is not None and second.resumed_from.endswith("checkpoint-1")
    assert second.steps == 2
