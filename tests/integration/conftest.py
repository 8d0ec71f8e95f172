"""Session-scoped real servers on loopback for integration tests.

- ``s3_server``: a ``moto_server`` (real S3 protocol) on a free port with one bucket.
- ``mlflow_server``: ``mlflow server`` with a SQLite backend, artifacts in
  ``s3://<bucket>/mlflow`` on that moto server and ``--no-serve-artifacts`` (clients write to
  S3 directly), started once per session.
- ``s3_env`` / ``mlflow_env``: function-scoped environments pointing a test at them (dummy AWS
  credentials, ``MLFLOW_S3_ENDPOINT_URL``, ``MLFLOW_TRACKING_URI``; no ``MLFLOW_RUN_ID``).

Each server is started in its own process group and the whole group is killed at the end. A
missing binary skips the tests that need it, with the package to install.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

BUCKET = "conductor-test"
DUMMY_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
MLFLOW_READY_S = 120.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def find_binary(name: str) -> str | None:
    """``name`` next to this Python (the venv's bin), else on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(name)


def _log_tail(path: Path, chars: int = 3000) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def _stop_group(proc: subprocess.Popen) -> None:
    """Terminate the process group started for ``proc`` (its whole tree), then kill it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
    # Children that outlived their parent still sit in the group.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float, what: str) -> float:
    """Poll ``url`` until it answers 200; returns the seconds waited. Fails with the log tail."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{_log_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return time.monotonic() - start
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{what} not ready after {timeout:.0f}s:\n{_log_tail(log)}")


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
    binary = find_binary("moto_server")
    if binary is None:
        pytest.skip("moto_server not found: pip install 'moto[server]' (in the dev extra)")
    port = free_port()
    log = tmp_path_factory.mktemp("moto") / "moto.log"
    env = {**os.environ, **DUMMY_CREDENTIALS}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [binary, "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    try:
        endpoint = f"http://127.0.0.1:{port}"
        ready = _wait_http(f"{endpoint}/moto-api/", proc, log, 30.0, "moto_server")
        server = S3Server(endpoint=endpoint, bucket=BUCKET, ready_s=ready)
        server.env = {**DUMMY_CREDENTIALS, "MLFLOW_S3_ENDPOINT_URL": endpoint}
        server.client().create_bucket(Bucket=BUCKET)
        yield server
    finally:
        _stop_group(proc)


@pytest.fixture(scope="session")
def mlflow_server(s3_server: S3Server, tmp_path_factory) -> Iterator[MlflowServer]:
    """``mlflow server`` (SQLite backend, artifacts in moto S3, no artifact serving)."""
    binary = find_binary("mlflow")
    if binary is None:
        pytest.skip("the mlflow command was not found: pip install 'conductor-core[train]'")
    folder = tmp_path_factory.mktemp("mlflow-server")
    log = folder / "server.log"
    port = free_port()
    artifact_root = f"s3://{s3_server.bucket}/mlflow"
    env = {
        **os.environ,
        **s3_server.env,
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("MLFLOW_RUN_ID", None)
    cmd = [
        binary,
        "server",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        "1",
        "--backend-store-uri",
        f"sqlite:///{folder / 'mlflow.db'}",
        "--default-artifact-root",
        artifact_root,
        "--no-serve-artifacts",
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=folder, start_new_session=True
        )
    try:
        uri = f"http://127.0.0.1:{port}"
        ready = _wait_http(f"{uri}/health", proc, log, MLFLOW_READY_S, "mlflow server")
        yield MlflowServer(uri=uri, artifact_root=artifact_root, ready_s=ready)
    finally:
        _stop_group(proc)


@pytest.fixture
def s3_env(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> S3Server:
    """Point boto3 (and MLflow's S3 client) of this test at the moto server."""
    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(key, raising=False)
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
