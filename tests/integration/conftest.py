"""Session-scoped real servers on loopback for integration tests.

- ``s3_server``: a ``moto_server`` (real S3 protocol) on a free port with one bucket.
- ``mlflow_server``: ``mlflow server`` with a SQLite backend, artifacts in
  ``s3://<bucket>/mlflow`` on that moto server and ``--no-serve-artifacts`` (clients write to
  S3 directly), started once per session.
- ``s3_env`` / ``mlflow_env``: function-scoped environments pointing a test at them (dummy AWS
  credentials, ``MLFLOW_S3_ENDPOINT_URL``, ``MLFLOW_TRACKING_URI``; no ``MLFLOW_RUN_ID``).

The servers are conductor_core.track.loopback's (what `conductor pipeline run --docker` starts):
each in its own process group, the whole group killed at the end. A missing binary skips the tests
that need it, with the package to install.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from conductor_core.track.loopback import (
    S3_CREDENTIALS,
    find_binary,
    running,
    start_mlflow_server,
    start_s3_server,
)

BUCKET = "conductor-test"
DUMMY_CREDENTIALS = dict(S3_CREDENTIALS)


@dataclass
class S3Server:
    """A running moto S3 server."""

    endpoint: str
    bucket: str
    ready_s: float
    env: dict[str, str] = field(default_factory=dict)

    def client(self):
        """A boto3 S3 client for this server."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.endpoint,
            aws_access_key_id=DUMMY_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            region_name=DUMMY_CREDENTIALS["AWS_DEFAULT_REGION"],
        )

    def keys(self, prefix: str = "") -> list[str]:
        """Every key in the bucket under ``prefix``."""
        pages = (
            self.client()
            .get_paginator("list_objects_v2")
            .paginate(Bucket=self.bucket, Prefix=prefix)
        )
        return [obj["Key"] for page in pages for obj in page.get("Contents", [])]


@dataclass
class MlflowServer:
    """A running MLflow tracking server."""

    uri: str
    artifact_root: str
    ready_s: float


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory) -> Iterator[S3Server]:
    """A real-protocol S3 server (moto) on loopback with the bucket ``conductor-test``."""
    if find_binary("moto_server") is None:
        pytest.skip("moto_server not found: pip install 'moto[server]' (in the dev extra)")
    server = start_s3_server(tmp_path_factory.mktemp("moto"), buckets=(BUCKET,))
    with running(server):
        yield S3Server(endpoint=server.url, bucket=BUCKET, ready_s=server.ready_s, env=server.env)


@pytest.fixture(scope="session")
def mlflow_server(s3_server: S3Server, tmp_path_factory) -> Iterator[MlflowServer]:
    """``mlflow server`` (SQLite backend, artifacts in moto S3, no artifact serving)."""
    if find_binary("mlflow") is None:
        pytest.skip("the mlflow command was not found: pip install 'conductor-core[train]'")
    artifact_root = f"s3://{s3_server.bucket}/mlflow"
    server = start_mlflow_server(
        tmp_path_factory.mktemp("mlflow-server"), artifact_root, s3_server.env
    )
    with running(server):
        yield MlflowServer(uri=server.url, artifact_root=artifact_root, ready_s=server.ready_s)


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """Point boto3 (and MLflow's S3 client) of this test at the moto server."""
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    return s3_server


@pytest.fixture
def mlflow_env(
    mlflow_server: MlflowServer, s3_env: S3Server, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MlflowServer]:
    """Point MLflow of this test at the session server; no run is active before or after."""
    import mlflow

    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server.uri)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    from conductor_core.track.mlflow_run import tracking_at

    with tracking_at(mlflow_server.uri):
        while mlflow.active_run() is not None:
            mlflow.end_run()
        yield mlflow_server
        while mlflow.active_run() is not None:
            mlflow.end_run()


@pytest.fixture(scope="session")
def helm() -> Path:
    """The helm binary (tests/support/helm.py); skips the test where there is none."""
    from tests.support.helm import HelmNotFoundError, helm_binary

    try:
        return helm_binary()
    except HelmNotFoundError as exc:
        pytest.skip(f"helm not available: {exc}")
