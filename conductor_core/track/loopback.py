"""An S3-protocol server and an MLflow tracking server on 127.0.0.1, for runs that need what a
cluster shares (an object store, a tracking server) on one machine.

``conductor pipeline run --docker`` starts both when no endpoint is given, and the integration
tests use the same two functions. The S3 server is moto's ``moto_server`` (the real S3 protocol;
``moto[server]``, any credentials); MLflow is ``mlflow server`` with a SQLite store, its default
artifact root in that S3 bucket and no artifact proxying (clients write to S3 directly, as in a
cluster). Each runs in its own process group, and :meth:`LoopbackServer.stop` ends the whole
group. Both bind 127.0.0.1 only.
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
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from conductor_core.errors import ConductorError

LOOPBACK = "127.0.0.1"
S3_CREDENTIALS: Mapping[str, str] = {
    "AWS_ACCESS_KEY_ID": "loopback",
    "AWS_SECRET_ACCESS_KEY": "loopback",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""Credentials of the loopback S3 server (moto accepts any): never a real account's."""
S3_READY_S = 30.0
MLFLOW_READY_S = 120.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def find_binary(name: str) -> str | None:
    """``name`` next to this Python (a virtual environment's bin), else on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(name)


@dataclass
class LoopbackServer:
    """A server process on loopback: its URL, log and the seconds it took to answer."""

    url: str
    process: subprocess.Popen
    log: Path
    ready_s: float
    env: dict[str, str] = field(default_factory=dict)
    """Environment a client needs to use it (endpoint, credentials)."""

    def stop(self) -> None:
        """Terminate the server's process group (its whole tree), then kill what is left."""
        proc = self.process
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
        # Children that outlived their parent still sit in the group.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def log_tail(path: Path, chars: int = 3000) -> str:
    """The last ``chars`` characters of a log file (or a note that there is none)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-chars:]
    except OSError:
        return "(no log)"


def _start(cmd: list[str], log: Path, env: Mapping[str, str], cwd: Path) -> subprocess.Popen:
    with log.open("wb") as out:
        return subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
        )


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout: float, what: str) -> float:
    """Poll ``url`` until it answers 200; returns the seconds waited."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise ConductorError(f"{what} exited with {proc.returncode}:\n{log_tail(log)}")
        with contextlib.suppress(OSError), urllib.request.urlopen(url, timeout=2) as resp:
            if resp.status == 200:
                return time.monotonic() - start
        time.sleep(0.2)
    raise ConductorError(f"{what} not ready after {timeout:.0f} s:\n{log_tail(log)}")


def start_s3_server(folder: Path, buckets: tuple[str, ...] = ()) -> LoopbackServer:
    """Start ``moto_server`` on a free loopback port, create ``buckets``, and return it; its
    ``env`` holds the credentials and the endpoint (``AWS_ENDPOINT_URL``,
    ``MLFLOW_S3_ENDPOINT_URL``).

    Raises:
        ConductorError: ``moto_server`` is not installed, or did not come up.
    """
    binary = find_binary("moto_server")
    if binary is None:
        raise ConductorError("moto_server not found: pip install 'moto[server]'")
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = folder / "s3.log"
    proc = _start(
        [binary, "-H", LOOPBACK, "-p", str(port)], log, {**os.environ, **S3_CREDENTIALS}, folder
    )
    endpoint = f"http://{LOOPBACK}:{port}"
    try:
        ready = _wait_http(f"{endpoint}/moto-api/", proc, log, S3_READY_S, "moto_server")
        server = LoopbackServer(url=endpoint, process=proc, log=log, ready_s=ready)
        server.env = {
            **S3_CREDENTIALS,
            "AWS_ENDPOINT_URL": endpoint,
            "MLFLOW_S3_ENDPOINT_URL": endpoint,
        }
        if buckets:
            import boto3

            client = boto3.client(
                "s3",
                endpoint_url=endpoint,
                aws_access_key_id=S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                aws_secret_access_key=S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
                region_name=S3_CREDENTIALS["AWS_DEFAULT_REGION"],
            )
            for bucket in buckets:
                client.create_bucket(Bucket=bucket)
    except BaseException:
        LoopbackServer(url=endpoint, process=proc, log=log, ready_s=0.0).stop()
        raise
    return server


def start_mlflow_server(
    folder: Path, artifact_root: str, s3_env: Mapping[str, str]
) -> LoopbackServer:
    """Start ``mlflow server`` (SQLite store in ``folder``, default artifact root
    ``artifact_root``, no artifact serving) on a free loopback port and return it; its ``env``
    holds ``MLFLOW_TRACKING_URI``.

    Raises:
        ConductorError: the ``mlflow`` command is not installed, or the server did not come up.
    """
    binary = find_binary("mlflow")
    if binary is None:
        raise ConductorError(
            "the mlflow command was not found: pip install 'conductor-core[train]'"
        )
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log = folder / "mlflow.log"
    env = {
        **os.environ,
        **s3_env,
        # Without this the server starts a pool of job workers (10 processes, ~2 GB).
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("MLFLOW_RUN_ID", None)
    cmd = [
        binary,
        "server",
        "--host",
        LOOPBACK,
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
    proc = _start(cmd, log, env, folder)
    uri = f"http://{LOOPBACK}:{port}"
    try:
        ready = _wait_http(f"{uri}/health", proc, log, MLFLOW_READY_S, "mlflow server")
    except BaseException:
        LoopbackServer(url=uri, process=proc, log=log, ready_s=0.0).stop()
        raise
    return LoopbackServer(
        url=uri, process=proc, log=log, ready_s=ready, env={"MLFLOW_TRACKING_URI": uri}
    )


@contextlib.contextmanager
def running(server: LoopbackServer) -> Iterator[LoopbackServer]:
    """Stop ``server`` when the block ends, however it ends."""
    try:
        yield server
    finally:
        server.stop()
