"""Compiling against images in a registry: `conductor pipeline compile --images` (a push record)
or `--image-registry/--image-tag` names every task's image by digest or tag with an explicit pull
policy, the TrainJob's image too; the commit tag of a git tree (the pure parts:
tests/unit/test_image_pins.py; a real push and a rehearsal on it:
tests/e2e/test_pipeline_registry.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conductor_core.cluster import images
from conductor_pipelines.registry import COMPILED_DIR, compile_pipeline

DIGEST = "sha256:" + "0c6d" * 16


def _executors(path: Path) -> tuple[dict, dict]:
    spec, platform = yaml.safe_load_all(path.read_text())
    pods = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    return spec["deploymentSpec"]["executors"], pods


def test_every_task_names_its_pinned_image_with_a_pull_policy(tmp_path) -> None:
    record = tmp_path / images.PUSH_RECORD
    images.record_push(record, "base", "127.0.0.1:5000", "0bf1c021ffbb", DIGEST)
    path = compile_pipeline("training", tmp_path / "t.yaml", pins=images.pins(record=record))
    executors, pods = _executors(path)
    seen = {}
    for name, executor in executors.items():
        ref = executor["container"]["image"]
        seen[ref] = pods[name]["imagePullPolicy"]
    assert seen == {
        f"127.0.0.1:5000/conductor-base@{DIGEST}": "IfNotPresent",
        "127.0.0.1:5000/conductor-train:0bf1c021ffbb": "Always",
    }
    # the TrainJob the launcher creates runs the same train image
    text = path.read_text()
    assert set(re.findall(r'"image":"([^"]+)"', text)) == {
        "127.0.0.1:5000/conductor-train:0bf1c021ffbb"
    }
    assert "ghcr.io" not in text
    # the committed YAML stays on the release's references, without a pull policy
    _, committed = _executors(COMPILED_DIR / "training.yaml")
    assert not any("imagePullPolicy" in pod for pod in committed.values())


def test_the_compile_command_takes_a_push_record_or_a_registry_and_tag(tmp_path) -> None:
    conductor = str(Path(sys.executable).parent / "conductor")
    record = tmp_path / images.PUSH_RECORD
    images.record_push(record, "base", "127.0.0.1:5000", "abc123", DIGEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_IMAGE")}
    out = subprocess.run(
        [conductor, "pipeline", "compile", "curation", "--out", str(tmp_path / "a"),
         "--images", str(record)],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert f"image base: 127.0.0.1:5000/conductor-base@{DIGEST} (IfNotPresent)" in out.stdout
    executors, pods = _executors(tmp_path / "a" / "curation.yaml")
    assert {e["container"]["image"] for e in executors.values()} == {
        f"127.0.0.1:5000/conductor-base@{DIGEST}"
    }
    assert {p["imagePullPolicy"] for p in pods.values()} == {"IfNotPresent"}
    subprocess.run(
        [conductor, "pipeline", "compile", "curation", "--out", str(tmp_path / "b")],
        capture_output=True, text=True, check=True,
        env={**env, "CONDUCTOR_IMAGE_REGISTRY": "registry.example.com/ml",
             "CONDUCTOR_IMAGE_TAG": "v2"},
    )  # fmt: skip
    executors, pods = _executors(tmp_path / "b" / "curation.yaml")
    assert {e["container"]["image"] for e in executors.values()} == {
        "registry.example.com/ml/conductor-base:v2"
    }
    assert {p["imagePullPolicy"] for p in pods.values()} == {"Always"}
    bad = subprocess.run(
        [conductor, "pipeline", "compile", "curation", "--out", str(tmp_path / "c"),
         "--image-tag", "-bad"],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert bad.returncode == 2 and "not a valid image tag" in bad.stderr


def test_the_tag_is_the_commit_and_dirty_when_the_tree_changed(tmp_path) -> None:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    git("init", "-q")
    (tmp_path / "a.txt").write_text("a")
    git("add", "a.txt")
    git("-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "a")
    sha = git("rev-parse", "--short=12", "HEAD")
    assert images.commit_tag(tmp_path) == sha
    (tmp_path / "a.txt").write_text("b")
    assert images.commit_tag(tmp_path) == f"{sha}-dirty"
    out = subprocess.run(
        [sys.executable, "-m", "conductor_core.cluster.images", "commit-tag", str(tmp_path)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == f"{sha}-dirty"
    with pytest.raises(ValueError, match="not a git checkout"):
        images.commit_tag(tmp_path / "none")


def test_the_record_command_reads_the_push_output(tmp_path) -> None:
    record = tmp_path / images.PUSH_RECORD
    push = f"abc123: digest: {DIGEST} size: 1375\n"
    out = subprocess.run(
        [sys.executable, "-m", "conductor_core.cluster.images", "record", str(record), "base",
         "127.0.0.1:5000", "abc123"],
        input=push, capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == f"127.0.0.1:5000/conductor-base@{DIGEST}"
    assert json.loads(record.read_text())["images"]["base"]["digest"] == DIGEST
    failed = subprocess.run(
        [sys.executable, "-m", "conductor_core.cluster.images", "record", str(record), "base",
         "127.0.0.1:5000", "abc123"],
        input="unauthorized\n", capture_output=True, text=True,
    )  # fmt: skip
    assert failed.returncode == 2 and "no 'digest" in failed.stderr
