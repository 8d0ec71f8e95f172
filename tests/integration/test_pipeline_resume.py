"""A killed local pipeline run taken up with ``--resume``: the run is SIGKILLed (its whole
process group, as a lost session or the OOM killer does) while a task runs; the same command
with ``--resume`` reuses the tasks that finished, runs the rest under the same KFP run id, and
keeps the run's parameters. (The curation pipeline: seconds a task. A training task resumes
from its checkpoint under the same run id: test_pipeline_services.py; the resumed run's MLflow
runs are left open while the others a killed run left are closed: test_pipeline_stale_runs.py.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _conductor(root: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "conductor_core", "pipeline", "run", "curation", "--local",
            "--root", str(root), *args]  # fmt: skip


def test_a_killed_run_resumes_without_redoing_its_finished_tasks(tmp_path) -> None:
    root = tmp_path / "runs"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env["PYTHONUNBUFFERED"] = "1"
    out = tmp_path / "first.log"
    with out.open("w") as log:
        proc = subprocess.Popen(
            _conductor(root, "--set", "curation_config=pipeline"),
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
        )
        deadline = time.time() + 240
        while time.time() < deadline and "validate ..." not in out.read_text():
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # while validate runs
        proc.wait()
    first = out.read_text()
    assert "curate done" in first and "validate done" not in first, first
    run_id = first.split("curation run ", 1)[1].split()[0]
    (curated,) = root.glob("kfp/*/curate/dataset")

    changed = subprocess.run(
        _conductor(root, "--resume", "--set", "curation_config=example"),
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert changed.returncode != 0
    assert "curation_config='example' (the run had 'pipeline')" in changed.stderr

    resumed = subprocess.run(
        _conductor(root, "--resume", run_id), env=env, capture_output=True, text=True, timeout=300
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming curation run {run_id}" in resumed.stderr
    assert "curate reused" in resumed.stderr and "curate ..." not in resumed.stderr
    assert "validate done" in resumed.stderr and "gate done" in resumed.stderr
    assert list(root.glob("kfp/*/curate/dataset")) == [curated]  # not curated again
    (validated,) = root.glob("kfp/*/validate/report")
    assert validated.parent.parent != curated.parent.parent  # validate ran in the new run
