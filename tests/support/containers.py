"""The Docker engine and the built images for container tests: skip with the reason where no
engine runs or an image is not built (`make images` builds them; `.ci/run` does so first).

``POD_LIKE`` holds the settings the chart and the pipeline pods give a container: the images'
numeric user, a read-only root filesystem with writable /tmp (an emptyDir in the pods), every
capability dropped, no privilege escalation.
"""

from __future__ import annotations

from typing import Any

import pytest

POD_LIKE: dict[str, Any] = {
    "user": "10001:10001",
    "read_only": True,
    "tmpfs": {"/tmp": "", "/home/conductor/.conductor-cache": ""},
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "network_mode": "host",
}


def docker_or_skip() -> Any:
    """A Docker SDK client, or skip the test naming what is missing."""
    try:
        import docker
    except ImportError:
        pytest.skip("the Docker SDK is not installed: pip install 'conductor-core[containers]'")
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        pytest.skip(
            f"no Docker engine answers here ({type(exc).__name__}); `make images` starts one"
        )
    return client


def containers_run_here(kind: str = "base") -> bool:
    """Whether a container test of image ``kind`` runs here (an engine answers and the image is
    built) rather than skipping."""
    try:
        client = docker_or_skip()
    except pytest.skip.Exception:
        return False
    try:
        image_or_skip(client, kind)
    except pytest.skip.Exception:
        return False
    finally:
        client.close()
    return True


def image_or_skip(client: Any, kind: str) -> str:
    """The reference of image ``kind`` as conductor_core.cluster.images names it, or skip the
    test when it is not built."""
    from conductor_core.cluster.images import image

    ref = image(kind)  # type: ignore[arg-type]
    if not any(ref in i.tags for i in client.images.list()):
        pytest.skip(f"image {ref} is not built here: run `make images`")
    return ref


def clean_env() -> dict[str, str]:
    """This process's environment without the endpoints and image overrides a rehearsal command
    would otherwise take from it (each test gives its own)."""
    import os

    from conductor_core.cluster import images

    env = dict(os.environ)
    for key in (
        "MLFLOW_TRACKING_URI",
        "MLFLOW_RUN_ID",
        "MLFLOW_S3_ENDPOINT_URL",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "CONDUCTOR_ARTIFACT_ROOT",
        images.REGISTRY_ENV,
        images.TAG_ENV,
    ):
        env.pop(key, None)
    return env
