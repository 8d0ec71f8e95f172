"""Downloads stay in their folder: object keys chosen by whoever writes the bucket (``..`` parts,
an absolute path after ``//``) are refused before anything is written, against the session's
S3-protocol server on loopback (``s3_env``, a moto_server from ``tests/integration/conftest.py``).

The paths covered are the ones that turn a key into a local path: ``Storage.download_dir`` (the
chart's weight-fetching init container through ``load_model_dir``, the manifest step, checkpoint
resume) and MLflow's own artifact download behind ``load_model_dir("runs:/...")``.
"""

from __future__ import annotations

import uuid

import pytest

from conductor_core.errors import ConfigError
from conductor_core.track.registry import load_model_dir
from conductor_core.track.storage import Storage


@pytest.fixture
def prefix(s3_env) -> str:
    """A fresh key prefix in the session bucket (shared with other tests)."""
    return f"downloads/{uuid.uuid4().hex[:8]}"


def _put(s3_env, key: str, body: bytes = b"x") -> None:
    s3_env.client().put_object(Bucket=s3_env.bucket, Key=key, Body=body)


def _files(root) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize("bad", ["../../climbed.bin", "/ABS/abs.bin"])
def test_download_dir_refuses_a_key_that_leaves_the_folder(s3_env, prefix, tmp_path, bad):
    # "/ABS" becomes this test's folder: `prefix//<tmp>/abs.bin` replaced the destination.
    bad = bad.replace("/ABS", str(tmp_path))
    _put(s3_env, f"{prefix}/model/config.json", b"{}")
    _put(s3_env, f"{prefix}/model/{bad}")
    dest = tmp_path / "work" / "dest"
    with pytest.raises(ConfigError, match="refusing the remote name"):
        Storage().download_dir(f"s3://{s3_env.bucket}/{prefix}/model", dest)
    assert _files(tmp_path) == []  # nothing written, inside or outside


def test_weight_fetch_cannot_replace_another_models_weights(s3_env, prefix, tmp_path):
    # The chart's init container: load_model_dir(MODEL_URI, /models/.download/<key>) on a
    # volume that other servers' weights share.
    models = tmp_path / "models"
    other = models / "other" / "config.json"
    other.parent.mkdir(parents=True)
    other.write_text("original")
    _put(s3_env, f"{prefix}/config.json", b"{}")
    _put(s3_env, f"{prefix}/../../other/config.json", b"planted")
    with pytest.raises(ConfigError, match="refusing the remote name"):
        load_model_dir(f"s3://{s3_env.bucket}/{prefix}", models / ".download" / "conductor")
    assert other.read_text() == "original"


def test_mlflow_artifact_download_stays_inside(s3_env, tmp_path, monkeypatch):
    # MLflow lists and downloads a run's artifacts itself; its own check (MLflow >= the
    # installed 3.x) must keep a planted `..` key out: this pins that for the version in use.
    import mlflow

    from conductor_core.track.mlflow_run import tracking_at

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with tracking_at(uri):
        client = mlflow.MlflowClient()
        artifacts = f"s3://{s3_env.bucket}/downloads/mlflow-{uuid.uuid4().hex[:8]}"
        run = client.create_run(client.create_experiment("downloads", artifacts))
        client.set_terminated(run.info.run_id)
    root = run.info.artifact_uri.removeprefix(f"s3://{s3_env.bucket}/")
    _put(s3_env, f"{root}/model/config.json", b"{}")
    _put(s3_env, f"{root}/model/../../../climbed.bin")
    dest = tmp_path / "work" / "dest"
    try:
        folder = load_model_dir(f"runs:/{run.info.run_id}/model", dest)
    except ConfigError:
        folder = None
    assert folder in (None, dest / "model")
    assert [f for f in _files(tmp_path) if f != "mlflow.db"] in (
        [],
        ["work/dest/model/config.json"],
    )
