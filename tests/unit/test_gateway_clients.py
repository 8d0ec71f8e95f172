"""Slow and vanishing clients, in process: the gateway's ASGI app is called directly with a
``receive`` that the test controls, so a client can disconnect mid-workflow (``http.disconnect``)
or stall while sending its body, with no socket. (Connections held open at the HTTP level, before
the app sees a request: tests/integration/test_gateway_slow_clients.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import pytest

from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

pytest.importorskip("prometheus_client")

QUESTION = "What is 6 times 7?"  # the scripted plan: two steps, the second reads the first
LATENCY_S = 0.4


def slow_pool(latency_s: float):
    """The bundled simulated pool, every call taking ``latency_s``."""
    pool = load_pool(bundled_pool_path())
    workers = [
        w.model_copy(
            update={
                "simulation": w.simulation.model_copy(
                    update={"latency_ms": latency_s * 1000, "latency_jitter_ms": 0.0}
                )
            }
        )
        for w in pool.workers
    ]
    return pool.model_copy(update={"workers": workers})


@contextlib.asynccontextmanager
async def started(config: GatewayConfig, pool: Any):
    app = create_app(config, pool=pool)
    async with app.router.lifespan_context(app):
        yield app


def scope(body: bytes) -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"gateway"),
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("gateway", 80),
    }


async def call(
    app: Any, body: bytes, then: asyncio.Event, *, stall_after: int | None = None
) -> list[dict[str, Any]]:
    """POST ``body``, then report ``http.disconnect`` once ``then`` is set; with
    ``stall_after``, only that many bytes of the body are sent (``more_body``), then nothing.
    Returns the messages the app sent."""
    if stall_after is None:
        queue = [{"type": "http.request", "body": body, "more_body": False}]
    else:
        queue = [{"type": "http.request", "body": body[:stall_after], "more_body": True}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if queue:
            return queue.pop(0)
        await then.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope(body), receive, send)
    return sent


def payload() -> bytes:
    return json.dumps(
        {"model": "conductor", "messages": [{"role": "user", "content": QUESTION}]}
    ).encode()


def test_a_client_that_disconnects_cancels_its_workflow() -> None:
    async def scenario():
        async with started(GatewayConfig(), slow_pool(LATENCY_S)) as app:
            serving = app.state.serving
            starts: list[float] = []
            finished: list[float] = []
            first_call = asyncio.Event()
            original = serving.pool.call

            async def counting(*args: Any, **kwargs: Any) -> Any:
                starts.append(time.monotonic())
                first_call.set()  # the client hangs up while the first worker call runs
                result = await original(*args, **kwargs)
                finished.append(time.monotonic())
                return result

            serving.pool.call = counting
            t0 = time.monotonic()
            sent = await asyncio.wait_for(call(app, payload(), first_call), 10)
            returned = time.monotonic() - t0
            in_flight = serving.in_flight
            # long enough for the second step to start had the workflow gone on
            await asyncio.sleep(LATENCY_S * 2.5)
            return sent, starts, finished, returned, in_flight, app.state.metrics

    sent, starts, finished, returned, in_flight, metrics = asyncio.run(scenario())
    assert len(starts) == 1, "a worker call started after the client had gone"
    assert finished == [], "the worker call in progress was not cancelled"
    assert returned < LATENCY_S, "the request waited for the worker call to finish"
    assert in_flight == 0
    workflows = "conductor_gateway_workflows_total"
    assert metrics.value(workflows, {"outcome": "client_disconnected"}) == 1
    assert metrics.value(workflows, {"outcome": "answered"}) is None
    assert (
        metrics.value("conductor_gateway_worker_calls_total", {"worker": "sim-code-expert"}) is None
    )
    # the access log and requests_total name the outcome (499: client closed request)
    assert sent[0]["type"] == "http.response.start" and sent[0]["status"] == 499
    assert (
        metrics.value(
            "conductor_gateway_requests_total",
            {"route": "/v1/chat/completions", "method": "POST", "status": "499"},
        )
        == 1
    )


def test_a_client_that_stays_answers_as_before() -> None:
    async def scenario():
        async with started(GatewayConfig(), slow_pool(0.0)) as app:
            never = asyncio.Event()
            sent = await asyncio.wait_for(call(app, payload(), never), 10)
            return sent, app.state.metrics

    sent, metrics = asyncio.run(scenario())
    assert sent[0]["status"] == 200
    body = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))
    assert body["choices"][0]["message"]["content"]
    assert metrics.value("conductor_gateway_workflows_total", {"outcome": "answered"}) == 1


def test_a_body_that_does_not_arrive_in_time_is_a_408_that_closes_the_connection() -> None:
    async def scenario():
        config = GatewayConfig(body_timeout_s=0.3)
        async with started(config, slow_pool(0.0)) as app:
            never = asyncio.Event()  # the client neither sends the rest nor hangs up
            t0 = time.monotonic()
            sent = await asyncio.wait_for(call(app, payload(), never, stall_after=10), 5)
            return sent, time.monotonic() - t0, app.state.metrics

    sent, seconds, metrics = asyncio.run(scenario())
    assert 0.25 < seconds < 3
    start = sent[0]
    assert start["status"] == 408
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    assert headers["connection"] == "close"  # uvicorn then drops the connection
    error = json.loads(b"".join(m.get("body", b"") for m in sent[1:]))["error"]
    assert error["code"] == "request_read_timeout"
    assert metrics.value("conductor_gateway_read_timeouts_total", {"phase": "body"}) == 1
