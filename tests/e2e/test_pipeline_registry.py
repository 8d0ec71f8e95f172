"""Images in a registry, rehearsed on one machine: the built base image pushed by
``scripts/images.sh --push`` to a registry on loopback (tagged by the git commit, its digest
recorded), the curation pipeline compiled against that digest, the local registry-named copy
removed, and ``conductor pipeline run curation --docker --compiled`` run on it: the tasks' image
is pulled from the registry by digest, as a node pulls it (the pull policy itself is a cluster's:
docs/pipelines.md, "Images in a registry").

Skipped with the reason where no Docker engine runs, the base image is not built or there is no
``docker-registry`` binary (Debian: apt-get install docker-registry).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conductor_core.cluster import images
from conductor_core.track.loopback import running
from tests.support.containers import clean_env, docker_or_skip, image_or_skip
from tests.support.registry import registry_binary_or_skip, start_registry

pytestmark = [pytest.mark.slow, pytest.mark.minutes]

ROOT = Path(__file__).resolve().parents[2]


def _conductor(args: list[str], cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess:
    command = [str(Path(sys.executable).parent / "conductor"), *args]
    return subprocess.run(
        command, cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )


def _names(client) -> set[str]:
    return {n for i in client.images.list() for n in (*i.tags, *i.attrs.get("RepoDigests", []))}


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    """The registry, and the push record of the base image pushed there by scripts/images.sh."""
    client = docker_or_skip()
    image_or_skip(client, "base")
    binary = registry_binary_or_skip()
    folder = tmp_path_factory.mktemp("registry")
    state = folder / "state"
    with running(start_registry(folder, binary)) as registry:
        start = time.monotonic()
        push = subprocess.run(
            ["bash", "scripts/images.sh", "--push-only", "--push", registry.url, "base"],
            cwd=ROOT,
            env={**clean_env(), "CONDUCTOR_IMAGES_STATE": str(state)},
            capture_output=True,
            text=True,
            timeout=900,
        )
        push_s = time.monotonic() - start
        assert push.returncode == 0, push.stderr[-3000:]
        record = json.loads((state / images.PUSH_RECORD).read_text())
        try:
            yield registry, record, state, push, push_s, client
        finally:
            entry = record["images"]["base"]
            for ref in (entry["tag"], entry["reference"]):  # untag: the image itself is shared
                if ref in _names(client):
                    client.images.remove(ref)
            client.close()


def test_the_push_is_tagged_by_commit_and_its_digest_recorded(pushed):
    registry, record, _, push, push_s, _ = pushed
    tag = record["tag"]
    assert record["registry"] == registry.url
    assert re.fullmatch(r"[0-9a-f]{12}(-dirty)?", tag), tag
    sha = tag.removesuffix("-dirty")
    known = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{sha}^{{commit}}"])
    assert known.returncode == 0  # a commit of this repository
    entry = record["images"]["base"]
    assert entry["tag"] == f"{registry.url}/conductor-base:{tag}"
    assert entry["reference"] == f"{registry.url}/conductor-base@{entry['digest']}"
    assert entry["reference"] in push.stdout  # printed
    print(f"push of conductor-base to {registry.url}: {push_s:.0f} s")


def test_the_rehearsal_pulls_the_tasks_image_from_the_registry_by_digest(pushed, tmp_path):
    registry, record, state, _, _, client = pushed
    entry = record["images"]["base"]
    compiled = tmp_path / "compiled"
    done = _conductor(
        ["pipeline", "compile", "curation", "--out", str(compiled), "--images",
         str(state / images.PUSH_RECORD)],
        tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    text = (compiled / "curation.yaml").read_text()
    assert text.count(f"image: {entry['reference']}") == 3 and "ghcr.io" not in text
    assert text.count("imagePullPolicy: IfNotPresent") == 3
    # nothing local is named after the registry: the run must pull
    for ref in (entry["tag"], entry["reference"]):
        if ref in _names(client):
            client.images.remove(ref)
    assert not any(n.startswith(registry.url) for n in _names(client))
    run = tmp_path / "run"
    run.mkdir()
    start = time.monotonic()
    done = _conductor(
        ["pipeline", "run", "curation", "--docker", "--compiled", str(compiled / "curation.yaml")],
        run,
    )
    print(f"rehearsal on the pulled image: {time.monotonic() - start:.0f} s")
    assert done.returncode == 0, done.stderr[-4000:] + done.stdout[-2000:]
    assert "pipeline curation: ok" in done.stdout
    (log,) = (run / "runs" / "logs").glob("curation-*.log")
    log_text = log.read_text()
    assert f"Pulling image '{entry['reference']}'" in log_text
    assert "Image pull complete" in log_text
    assert log_text.count(f"Found image '{entry['reference']}'") == 2  # the next tasks
    # the registry was asked for the manifest by digest: GET, or only HEAD when the daemon already
    # holds that content (the image was built here) and needs the registry only to resolve it
    served = registry.log.read_text()
    asked = re.findall(r'"(GET|HEAD) /v2/conductor-base/manifests/([^ ]+) HTTP', served)
    assert any(ref == entry["digest"] for _, ref in asked), asked


def test_an_image_of_another_registry_is_not_pulled_unless_asked(pushed, tmp_path):
    compiled = tmp_path / "compiled"
    done = _conductor(
        ["pipeline", "compile", "curation", "--out", str(compiled),
         "--image-registry", "registry.example.com/ml", "--image-tag", "absent"],
        tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    done = _conductor(
        ["pipeline", "run", "curation", "--docker", "--compiled", str(compiled / "curation.yaml")],
        tmp_path,
        timeout=300,
    )
    assert done.returncode != 0
    assert "registry.example.com/ml/conductor-base:absent" in done.stderr
    assert "not built here" in done.stderr and "--pull" in done.stderr
