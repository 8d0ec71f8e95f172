"""The cluster rehearsal end to end: the committed compiled training pipeline run by
``conductor pipeline run training --docker`` from an empty folder, every task in a container of
the built base image, sharing only KFP's artifacts, S3 and MLflow (few steps: it checks the
wiring, not the learning). It runs a copy of the committed YAML (``--compiled``) that differs only
in the retry back-off, 1 s instead of 60 s before a retried task (the wait is the same
``time.sleep`` either way; the committed file is checked against the code by
tests/integration/test_pipelines_compile.py, and ``--docker`` without ``--compiled`` runs the
committed file in tests/e2e/test_pipeline_docker_servers.py).

The run is killed twice first. The base stage's container is killed from outside once the
stage has a checkpoint in S3, as a node loses a pod: the task's retry policy runs it again and it
resumes from that checkpoint. Then, in the adaptive stage, the whole run is SIGKILLed, as a lost
session is, and the same command with ``--resume`` stands for KFP's Retry of a failed run: the
finished tasks are not redone. The other tests read the run that resumed.

The S3 and MLflow servers are started here on loopback and given to the command (as a cluster
gives them), so that the test can read what the tasks left in them; with no endpoint given the
command starts its own (tests/e2e/test_pipeline_docker_servers.py, on the short curation
pipeline: a file of its own, so that pytest-xdist can run it on the other worker while this long
module runs). Skipped with the reason where no Docker engine runs or the images are not built.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from conductor_core.track.loopback import running, start_mlflow_server, start_s3_server
from conductor_pipeline_runner.containers import RUN_LABEL
from tests.support.containers import clean_env

pytestmark = [pytest.mark.slow, pytest.mark.minutes]

BUCKET = "rehearsal"
SHORT = [
    "base_steps=30",  # the tiny profile saves a checkpoint every 25 steps: one to resume from
    "adaptive_steps=1",
    "recursive_steps=1",
    "warmup_steps=10",
    "expert_start_steps=10",  # the profile's 400 steps: about 2 minutes of the recursive stage
    "eval_limit=12",
    "eval_shards=2",
    "model_name=rehearsed",
]


def short_backoff(folder: Path) -> Path:
    """A copy of the committed compiled training pipeline whose retried tasks wait 1 s, not 60 s,
    before their retry (KFP's local runner sleeps the policy's back-off)."""
    from conductor_pipelines.registry import COMPILED_DIR

    committed = (COMPILED_DIR / "training.yaml").read_text()
    assert committed.count("backoffDuration: 60s") >= 3, "the training tasks' retry policy moved"
    copy = folder / "training.yaml"
    copy.write_text(committed.replace("backoffDuration: 60s", "backoffDuration: 1s"))
    return copy


def _conductor(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).parent / "conductor"), *args]
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=1500)


@pytest.fixture(scope="module")
def rehearsed(images, tmp_path_factory):
    services = tmp_path_factory.mktemp("services")
    with (
        running(start_s3_server(services, buckets=(BUCKET,))) as s3,
        running(start_mlflow_server(services, f"s3://{BUCKET}/mlflow", s3.env)) as mlflow,
    ):
        prefix = f"runs-{uuid.uuid4().hex[:8]}"
        env = {
            **clean_env(),
            **s3.env,
            "MLFLOW_TRACKING_URI": mlflow.url,
            "CONDUCTOR_ARTIFACT_ROOT": f"s3://{BUCKET}/{prefix}",
        }
        empty = tmp_path_factory.mktemp("empty")
        compiled = short_backoff(tmp_path_factory.mktemp("compiled"))
        sets = [a for kv in SHORT for a in ("--set", kv)]
        command = ["pipeline", "run", "training", "--docker", "--compiled", str(compiled), *sets]
        killed = _killed_twice(command, empty, env, images, s3, prefix)
        done = _conductor([*command, "--resume"], empty, env)
        yield done, empty, s3, mlflow, prefix, killed


def _killed_twice(command, cwd, env, docker, s3, prefix) -> str:
    """Run ``command``; kill the base stage's container once the stage has a checkpoint in S3
    (a lost pod: the task's retry policy runs it again), then, once the adaptive stage runs,
    the whole run (a lost session: SIGKILL, its containers killed with it). Returns what the
    run printed."""
    import boto3

    client = boto3.client("s3", endpoint_url=s3.url, **_credentials(s3))
    out = cwd / "killed.log"
    checkpoint = re.compile(r"/base/checkpoints/checkpoint-\d+/trainer_state.json$")
    with out.open("w") as log:
        proc = subprocess.Popen(
            [str(Path(sys.executable).parent / "conductor"), *command],
            cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 1200
            rehearsal = None  # the run's label value, read off the container killed first
            while proc.poll() is None and time.monotonic() < deadline:
                if rehearsal is None:
                    listed = client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)
                    if any(checkpoint.search(o["Key"]) for o in listed.get("Contents", [])):
                        for container in _task_containers(docker):
                            if re.search(r'"stage":\s*"base"', " ".join(container.attrs["Args"])):
                                container.kill()
                                rehearsal = container.labels[RUN_LABEL]
                elif "train-2 ..." in out.read_text():  # the adaptive stage started
                    os.killpg(proc.pid, signal.SIGKILL)
                    # what a lost node takes with it: this run's containers (not another test's)
                    for container in _task_containers(docker, rehearsal):
                        container.remove(force=True)
                    break
                time.sleep(0.2)
        finally:
            proc.kill()
            proc.wait()
    return out.read_text()


def _task_containers(docker, rehearsal: str | None = None) -> list:
    """The running task containers of any rehearsal, or every container of ``rehearsal``."""
    if rehearsal is None:
        return docker.containers.list(filters={"label": RUN_LABEL})
    return docker.containers.list(all=True, filters={"label": f"{RUN_LABEL}={rehearsal}"})


def test_a_killed_pod_is_retried_from_its_checkpoint(rehearsed):
    """The base stage's container killed: its task's retry policy runs it again (as a cluster
    does for a lost pod), and the stage takes up its checkpoint in S3."""
    _, folder, *_, killed = rehearsed
    assert "train FAILURE" in killed, killed[-3000:]  # the killed container failed its task
    assert "train #2 done" in killed, killed[-3000:]
    first = min((folder / "runs" / "logs").glob("training-*.log"))
    assert "resume: from" in first.read_text()


def test_a_killed_run_resumed_redoes_nothing_that_finished(rehearsed):
    """The whole run killed in the adaptive stage, then the same command with --resume (KFP's
    Retry of a failed run): the finished tasks, the base stage included, are reused."""
    done, *_, killed = rehearsed
    assert "pipeline training:" not in killed and "FAILED" not in killed  # killed: no summary
    run_id = killed.split("training run ", 1)[1].split()[0]
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    assert f"resuming training run {run_id}" in done.stderr
    for task in ("check-params", "curate", "validate", "train"):
        assert f"{task} reused" in done.stderr and f"{task} ..." not in done.stderr, task
    assert "train-2 done" in done.stderr  # the interrupted stage ran again


def test_every_task_ran_in_a_container_and_succeeded(rehearsed):
    done, folder, *_ = rehearsed
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    assert "pipeline training: ok" in done.stdout
    for task in ("train-3", "register"):  # the recursive stage and registration ran
        assert f"{task} done" in done.stderr
    shards = [line.split() for line in done.stdout.splitlines() if line.startswith("eval-shard")]
    assert len(shards) == 2 and all(row[-2] == "success" for row in shards)  # the ParallelFor
    for path in (folder / "runs" / "logs").glob("training-*.log"):
        log = path.read_text()
        assert "conductor-base" in log and "Found image" in log  # containers, nothing pulled
    # No container of the resumed run is left: the command checks its own rehearsal's (other
    # tests' rehearsals may be running beside this one) and fails the run otherwise.
    assert "containers left behind" not in done.stderr


def test_weights_in_s3_and_the_registered_version_points_at_them(rehearsed):
    import boto3
    import mlflow

    done, folder, s3, server, prefix, _ = rehearsed
    assert done.returncode == 0
    client = boto3.client("s3", endpoint_url=s3.url, **_credentials(s3))
    keys = [
        o["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix)
        for o in page.get("Contents", [])
    ]
    for stage in ("base", "adaptive", "recursive"):
        assert any(k.endswith(f"/{stage}/model/config.json") for k in keys), stage
        assert any(f"/{stage}/model/conductor_prompt.json" in k for k in keys), stage
    assert any("/base/checkpoints/checkpoint-" in k for k in keys)
    (output,) = (folder / "runs" / "kfp").glob("*/register*/registered")
    registered = json.loads(output.read_text())
    assert registered["weights_uri"].startswith(f"s3://{BUCKET}/{prefix}/")
    registry = mlflow.MlflowClient(server.url)
    champion = registry.get_model_version_by_alias("rehearsed", "champion")
    assert str(champion.version) == registered["model_version"]


def test_the_parent_mlflow_run_is_finished_with_its_nested_runs(rehearsed):
    import mlflow

    done, _, _, server, _, _ = rehearsed
    assert done.returncode == 0
    client = mlflow.MlflowClient(server.url)
    exp = client.get_experiment_by_name("conductor")
    runs = client.search_runs([exp.experiment_id], max_results=500)
    parents = [r for r in runs if r.data.tags.get("conductor.role") == "pipeline"]
    assert len(parents) == 1
    parent = parents[0]
    assert parent.info.status == "FINISHED"
    kids = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    stages = {r.data.tags.get("conductor.stage") for r in kids}
    assert {"curate", "base", "adaptive", "recursive", "evaluate", "register"} <= stages
    base = next(r for r in kids if r.data.tags.get("conductor.stage") == "base")
    assert base.data.metrics  # training metrics went to the stage run on the server


def _credentials(s3) -> dict[str, str]:
    return {
        "aws_access_key_id": s3.env["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": s3.env["AWS_SECRET_ACCESS_KEY"],
        "region_name": s3.env["AWS_DEFAULT_REGION"],
    }
