"""``conductor pipeline run NAME --docker`` with no endpoint given: the command starts its own
MLflow and S3 servers on loopback, runs the committed compiled pipeline (the short curation one),
every task in a container of the built base image, and stops the servers at the end.

Apart from tests/e2e/test_pipeline_docker.py (the training pipeline killed twice and resumed,
against servers the test starts), so that pytest-xdist's ``--dist loadfile`` can run it on the
other worker while that long module runs. Skipped with the reason where no Docker engine runs or
the image is not built.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.containers import clean_env

pytestmark = [pytest.mark.slow]


def _conductor(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).parent / "conductor"), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)


def test_the_command_starts_and_stops_its_own_servers(images, tmp_path):
    import psutil

    before = {p.pid for p in psutil.Process().children(recursive=True)}
    done = _conductor(["pipeline", "run", "curation", "--docker"], tmp_path, clean_env())
    assert done.returncode == 0, done.stderr[-4000:]
    assert "pipeline curation: ok" in done.stdout
    store = tmp_path / "runs" / "services" / "mlflow.db"
    assert store.is_file() and f"sqlite:///{store}" in done.stdout
    after = {p.pid for p in psutil.Process().children(recursive=True)}
    assert after <= before  # the MLflow and S3 servers are gone
