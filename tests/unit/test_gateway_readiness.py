"""Readiness means this replica can serve: ``/readyz`` is local (started, not draining, the
Conductor answered within a cached window) and never asks the workers; their health is a metric
from background checks. In process: the upstreams are an ``httpx.MockTransport`` that counts
what the gateway asks (no socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from conductor_core.policy.openai_policy import OpenAIPlanSource
from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import PoolConfig, WorkerConfig, load_pool

pytest.importorskip("prometheus_client")

CONDUCTOR = "http://conductor.internal:8000/v1"
WORKER_UP = "http://worker-up.internal:8000/v1"
WORKER_DOWN = "http://worker-down.internal:8000/v1"


class Upstreams:
    """A mock network: the Conductor and two worker endpoints; ``down`` hosts refuse."""

    def __init__(self, down: set[str] | None = None) -> None:
        self.down = set(down or {"worker-down.internal"})
        self.calls: list[tuple[str, str]] = []  # (host, Authorization header)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.calls.append((request.url.host, request.headers.get("authorization", "")))
        if request.url.host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"object": "list", "data": [{"id": "m"}]})

    def count(self, host: str) -> int:
        return sum(1 for h, _ in self.calls if h == host)


def pool_with_remote_workers() -> PoolConfig:
    bundled = load_pool(bundled_pool_path())
    remote = [
        WorkerConfig(
            name="remote-up", provider="openai", model="up", endpoint=WORKER_UP,
            api_key_env="READY_TEST_WORKER_KEY",
        ),
        WorkerConfig(
            name="remote-down", provider="openai", model="down", endpoint=WORKER_DOWN,
            api_key_env="READY_TEST_WORKER_KEY",
        ),
    ]  # fmt: skip
    return PoolConfig(workers=[*bundled.workers, *remote])


@pytest.fixture
def keys(monkeypatch):
    monkeypatch.setenv("READY_TEST_WORKER_KEY", "sk-worker-provider-key")
    monkeypatch.setenv("READY_TEST_CONDUCTOR_KEY", "sk-conductor-key")


@contextlib.asynccontextmanager
async def gateway(upstreams: Upstreams, **config: Any):
    config.setdefault("worker_health_interval_s", None)
    source = OpenAIPlanSource(CONDUCTOR, "conductor", api_key_env="READY_TEST_CONDUCTOR_KEY")
    app = create_app(
        GatewayConfig(**config),
        pool=pool_with_remote_workers(),
        plan_source=source,
        serving_kwargs={"probe_transport": httpx.MockTransport(upstreams)},
    )
    async with app.router.lifespan_context(app):
        yield app


async def readyz(app: Any) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        return await c.get("/readyz")


def test_readyz_asks_no_worker_and_a_worker_down_leaves_the_replica_ready(keys) -> None:
    upstreams = Upstreams()

    async def scenario():
        async with gateway(upstreams, readiness_cache_s=60) as app:
            return [await readyz(app) for _ in range(20)]

    answers = asyncio.run(scenario())
    assert all(a.status_code == 200 for a in answers), answers[0].text
    assert answers[0].json() == {
        "status": "ready",
        "checks": {"gateway": "ok", "conductor": "ok"},
    }
    assert upstreams.count("worker-up.internal") == upstreams.count("worker-down.internal") == 0
    # the Conductor: once for 20 probes, with its own key (never a provider's)
    assert upstreams.calls == [("conductor.internal", "Bearer sk-conductor-key")]


def test_the_conductor_check_is_cached_and_shared_by_concurrent_probes(keys) -> None:
    upstreams = Upstreams()

    async def scenario():
        async with gateway(upstreams, readiness_cache_s=60) as app:
            together = await asyncio.gather(*(readyz(app) for _ in range(10)))
            cached = upstreams.count("conductor.internal")
        async with gateway(upstreams, readiness_cache_s=0) as app:
            for _ in range(3):
                await readyz(app)
        return together, cached, upstreams.count("conductor.internal") - cached

    together, cached, uncached = asyncio.run(scenario())
    assert all(a.status_code == 200 for a in together)
    assert cached == 1
    assert uncached == 3  # readiness_cache_s=0: a check per probe


def test_a_conductor_that_does_not_answer_makes_the_replica_unready_until_it_does(keys) -> None:
    upstreams = Upstreams(down={"conductor.internal"})

    async def scenario():
        async with gateway(upstreams, readiness_cache_s=0.2) as app:
            down = await readyz(app)
            gauge_down = app.state.metrics.value("conductor_gateway_conductor_up")
            upstreams.down.clear()
            cached = await readyz(app)  # within the window: the cached failure
            await asyncio.sleep(0.3)
            up = await readyz(app)
            gauge_up = app.state.metrics.value("conductor_gateway_conductor_up")
        return down, gauge_down, cached, up, gauge_up

    down, gauge_down, cached, up, gauge_up = asyncio.run(scenario())
    assert down.status_code == 503 and down.json()["status"] == "not_ready"
    assert down.json()["checks"]["conductor"] == "unreachable (ConnectError)"
    assert gauge_down == 0
    assert cached.status_code == 503
    assert up.status_code == 200 and gauge_up == 1


def test_draining_is_not_ready_and_asks_nobody(keys) -> None:
    upstreams = Upstreams()

    async def scenario():
        async with gateway(upstreams) as app:
            app.state.serving.draining = True
            return await readyz(app)

    answer = asyncio.run(scenario())
    assert answer.status_code == 503
    assert answer.json() == {"status": "not_ready", "checks": {"gateway": "draining"}}
    assert upstreams.calls == []


def test_the_drain_file_makes_the_replica_unready_and_an_old_one_is_ignored(
    keys, tmp_path: Path
) -> None:
    upstreams = Upstreams()
    drain = tmp_path / "draining"
    drain.touch()
    old = time.time() - 3600
    os.utime(drain, (old, old))  # left by an earlier container of the pod

    async def scenario():
        async with gateway(upstreams, drain_file=str(drain)) as app:
            before = await readyz(app)
            await asyncio.sleep(0.05)  # past the file system's timestamp granularity
            drain.touch()  # the preStop hook
            after = await readyz(app)
        return before, after

    before, after = asyncio.run(scenario())
    assert before.status_code == 200
    assert after.status_code == 503
    assert after.json()["checks"] == {"gateway": "draining"}


def test_readyz_before_the_lifespan_started_is_not_ready() -> None:
    app = create_app(GatewayConfig())

    async def scenario():
        return await readyz(app)

    answer = asyncio.run(scenario())
    assert answer.status_code == 503
    assert answer.json()["checks"] == {"gateway": "starting"}


def test_worker_health_goes_to_metrics_in_the_background(keys) -> None:
    upstreams = Upstreams()

    async def scenario():
        async with gateway(upstreams, worker_health_interval_s=30) as app:
            metrics = app.state.metrics
            deadline = time.monotonic() + 5
            while metrics.value("conductor_gateway_worker_up", {"worker": "remote-down"}) is None:
                assert time.monotonic() < deadline, "no health check ran"
                await asyncio.sleep(0.01)
            ready = await readyz(app)
            values = {
                name: metrics.value("conductor_gateway_worker_up", {"worker": name})
                for name in ("remote-up", "remote-down", "sim-generalist")
            }
            task = app.state.serving.worker_health.task
        return ready, values, task

    ready, values, task = asyncio.run(scenario())
    assert values == {"remote-up": 1, "remote-down": 0, "sim-generalist": 1}
    assert ready.status_code == 200  # a worker down does not take the replica out
    # each worker endpoint once per pass, with the worker's key
    worker_calls = [c for c in upstreams.calls if c[0].startswith("worker-")]
    assert sorted(worker_calls) == [
        ("worker-down.internal", "Bearer sk-worker-provider-key"),
        ("worker-up.internal", "Bearer sk-worker-provider-key"),
    ]
    assert task is not None and task.done()  # stopped with the lifespan


def test_the_checks_keep_one_http_client_until_shutdown(keys, monkeypatch) -> None:
    """Building an HTTP client costs about 20 ms of CPU (its TLS context): the readiness and
    health checks share one, closed with the gateway."""
    upstreams = Upstreams()
    built: list[httpx.AsyncClient] = []

    class Counting(httpx.AsyncClient):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            if isinstance(kwargs.get("transport"), httpx.MockTransport):
                built.append(self)  # the gateway's checks (the test's own client is ASGI)
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(httpx, "AsyncClient", Counting)

    async def scenario():
        async with gateway(upstreams, readiness_cache_s=0) as app:
            serving = app.state.serving
            for _ in range(3):
                assert (await readyz(app)).status_code == 200
                assert (await serving.check_workers())["remote-up"] == "ok"
        return serving

    serving = asyncio.run(scenario())
    assert upstreams.count("conductor.internal") == 3
    assert upstreams.count("worker-up.internal") == 3
    assert len(built) == 1 and built[0].is_closed and serving.probe.http is None
