"""The rehearsal's container bookkeeping (conductor_pipeline_runner/containers.py) against
docker-py's own container listing, with a stand-in for the engine's API: KFP starts containers
with ``auto_remove``, so one can vanish between being listed and being inspected."""

from __future__ import annotations

from typing import Any

import pytest

docker = pytest.importorskip("docker")

from docker.models.containers import ContainerCollection  # noqa: E402

from conductor_pipeline_runner import containers  # noqa: E402


class _EngineAPI:
    """Stand-in for docker-py's low-level API: lists two containers, the first of which the
    engine removes before it is inspected."""

    def __init__(self) -> None:
        self.listed_filters: list[dict[str, Any]] = []
        self.removed: list[str] = []

    def containers(self, **kwargs: Any) -> list[dict[str, str]]:
        self.listed_filters.append(kwargs["filters"])
        return [{"Id": "gone"}, {"Id": "still-here"}]

    def inspect_container(self, container_id: str) -> dict[str, str]:
        if container_id == "gone":
            raise docker.errors.NotFound("No such container: gone")
        return {"Id": container_id, "Name": f"/{container_id}-name"}

    def remove_container(self, container_id: str, **kwargs: Any) -> None:
        self.removed.append(container_id)


class _Client:
    def __init__(self) -> None:
        self.api = _EngineAPI()
        self.containers = ContainerCollection(client=self)
        self.closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def engine(monkeypatch: pytest.MonkeyPatch) -> _Client:
    client = _Client()
    monkeypatch.setattr(containers, "_docker_client", lambda: client)
    return client


def test_a_container_removed_while_listing_is_not_a_leftover_and_not_an_error(engine):
    assert containers.leftover_containers("r1", settle_s=0.0) == ["still-here-name"]
    assert engine.api.listed_filters[0] == {"label": f"{containers.RUN_LABEL}=r1"}
    assert engine.closed


def test_cleanup_removes_what_is_left_and_skips_what_the_engine_removed(engine):
    containers.remove_containers("r1")
    assert engine.api.removed == ["still-here"]
    assert engine.closed


class _Killed:
    """A task container killed from outside (exit 137). Started with ``auto_remove``, the
    engine removes it as it exits, before KFP asks for its exit code."""

    def __init__(self, auto_remove: bool) -> None:
        self.auto_remove = auto_remove
        self.removed = False

    def logs(self, stream: bool) -> list[bytes]:
        return [b"training step 3\n"]

    def wait(self) -> dict[str, int]:
        if self.auto_remove:
            raise docker.errors.NotFound("No such container")
        return {"StatusCode": 137}

    def remove(self, force: bool = False) -> None:
        self.removed = True


class _Image:
    def __init__(self, tag: str) -> None:
        self.tags = [tag]
        self.attrs: dict[str, list[str]] = {"RepoDigests": []}


class _Images:
    def list(self) -> list[_Image]:
        return [_Image("conductor-base:0.1.0")]


class _KillingEngine:
    def __init__(self) -> None:
        self.images = _Images()
        self.containers = self
        self.started: list[_Killed] = []

    def run(self, **kwargs: Any) -> _Killed:
        self.started.append(_Killed(kwargs["auto_remove"]))
        return self.started[-1]


def _run_task(engine: _KillingEngine) -> int:
    from kfp.local import docker_task_handler

    return docker_task_handler.run_docker_container(
        client=engine, image="conductor-base:0.1.0", command=["train"], volumes={}
    )


def test_a_killed_task_container_fails_its_task_and_is_removed_after():
    """kfp 2.17 reads an auto-removed container's exit code as 0: a killed training task would
    pass, and be cached as finished. Within the rehearsal its exit code is read first."""
    assert _run_task(_KillingEngine()) == 0  # kfp alone: the killed task "succeeded"
    engine = _KillingEngine()
    with containers._exit_codes_kept():
        assert _run_task(engine) == 137
    (container,) = engine.started
    assert not container.auto_remove and container.removed


def test_the_compiled_pipeline_caches_every_task_but_its_exit_handler():
    """What lets a --docker --resume reuse the tasks a run finished (training is uncached as
    compiled, for a cluster)."""
    import yaml

    from conductor_pipelines.registry import COMPILED_DIR

    path = COMPILED_DIR / "training.yaml"
    compiled = yaml.safe_load_all(path.read_text())
    spec = next(compiled)

    def caching(spec: dict[str, Any]) -> dict[str, bool]:
        dags = [spec["root"], *spec["components"].values()]
        return {
            name: bool(task.get("cachingOptions", {}).get("enableCache"))
            for dag in dags
            for name, task in dag.get("dag", {}).get("tasks", {}).items()
        }

    assert not caching(spec)["train"]
    loaded = containers.compiled_pipeline(path).pipeline_spec
    from google.protobuf import json_format

    after = caching(json_format.MessageToDict(loaded))
    assert after.keys() == caching(spec).keys()
    assert after == {name: name != "close-run" for name in after}


def test_the_task_containers_get_this_process_s_thread_counts():
    from conductor_pipeline_runner.containers import thread_settings

    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/bin", "HOME": "/root"}
    assert thread_settings(env) == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    assert thread_settings({"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": ""}) == {
        "OMP_NUM_THREADS": "2"
    }
    assert thread_settings({}) == {}  # none set: torch's own default, as before
