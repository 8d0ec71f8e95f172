"""The rehearsal's container bookkeeping (pipelines/containers.py) against docker-py's own
container listing, with a stand-in for the engine's API: KFP starts containers with
``auto_remove``, so one can vanish between being listed and being inspected."""

from __future__ import annotations

from typing import Any

import pytest

docker = pytest.importorskip("docker")

from docker.models.containers import ContainerCollection  # noqa: E402

from pipelines import containers  # noqa: E402


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
