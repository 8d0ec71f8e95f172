"""The answer streamed as it is written, over real HTTP on loopback: the gateway (uvicorn, lifespan
on, the scripted plan source) calls its workers as OpenAI-compatible endpoints on the worker
simulator (uvicorn, slow simulated workers), streaming the last step; the official ``openai``
client reads the stream and timestamps each chunk.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import openai
import pytest

from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.simulation.server import create_app as create_simulator
from conductor_core.simulation.server import running_app
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import PoolConfig, load_pool, parse_pool

pytest.importorskip("prometheus_client")

QUESTION = (
    "A train travels 240 kilometres in 3 hours. At the same speed, how many kilometres "
    "does it travel in 5 hours?"
)
LATENCY_S = 0.4  # every simulated worker call


def simulated_pool() -> PoolConfig:
    pool = load_pool(bundled_pool_path())
    for worker in pool.workers:
        worker.simulation.latency_ms = LATENCY_S * 1000
        worker.simulation.latency_jitter_ms = 0
    return pool


def gateway_pool(simulated: PoolConfig, url: str) -> PoolConfig:
    """The same workers as OpenAI-compatible endpoints on the simulator at ``url``."""
    workers = []
    for w in simulated.workers:
        entry = w.model_dump(mode="json", exclude={"provider", "simulation", "endpoint"})
        workers.append({**entry, "provider": "openai", "endpoint": url, "max_retries": 3})
    return parse_pool({"workers": workers, "retry": {"backoff_base_s": 0.01}})


@pytest.fixture
def servers():
    """(gateway URL, the simulator's state), per test: the gateway's event loop (and the thread
    its DNS lookups start) ends with the test."""
    simulated = simulated_pool()
    simulator = create_simulator(simulated)
    with running_app(simulator) as sim_url:
        app = create_app(GatewayConfig(), pool=gateway_pool(simulated, sim_url))
        with running_app(app, lifespan="on") as url:
            yield url, simulator.state.simulator


async def streamed(url: str, **extra: Any) -> list[tuple[float, Any]]:
    """The chunks of one streamed completion, each with the seconds since the request."""
    async with openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0) as client:
        t0 = time.monotonic()
        stream = await client.chat.completions.create(
            model="conductor",
            messages=[{"role": "user", "content": QUESTION}],
            stream=True,
            stream_options={"include_usage": True},
            **extra,
        )
        out = []
        try:
            async for chunk in stream:
                out.append((time.monotonic() - t0, chunk))
        except openai.APIError as exc:
            out.append((time.monotonic() - t0, exc))
        return out


def event_type(chunk: Any) -> str | None:
    return ((getattr(chunk, "model_extra", None) or {}).get("conductor") or {}).get("type")


def pieces(chunks: list[tuple[float, Any]]) -> list[tuple[float, str]]:
    return [
        (t, c.choices[0].delta.content)
        for t, c in chunks
        if not isinstance(c, Exception) and c.choices and c.choices[0].delta.content
    ]


def test_the_answer_streams_before_the_last_step_finishes(servers):
    url, _ = servers
    with openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
        plain = client.chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": QUESTION}], seed=5
        )
    chunks = asyncio.run(streamed(url, seed=5))
    content = pieces(chunks)
    assert len(content) > 1
    assert "".join(text for _, text in content) == plain.choices[0].message.content
    ends = [t for t, c in chunks if event_type(c) == "step_end"]
    starts = [t for t, c in chunks if event_type(c) == "step_start"]
    assert len(ends) == len(starts) == 2
    first, last = content[0][0], content[-1][0]
    # the first piece arrives soon after the last step starts, long before that step ends
    assert starts[-1] < first < ends[-1] - LATENCY_S / 2, (starts, first, ends)
    assert last - first > LATENCY_S / 2  # spread over the worker's latency, not one burst
    final = chunks[-1][1]
    assert final.choices == [] and final.usage.total_tokens == plain.usage.total_tokens
    assert event_type(chunks[-2][1]) == "done"
    assert chunks[-2][1].choices[0].finish_reason == "stop"


def test_a_worker_stream_cut_mid_way_ends_the_answer_with_an_error_not_a_retry(servers):
    url, simulator = servers
    before = simulator.requests
    simulator.set_script(["ok", "cut"])  # the first step answers; the last one's stream breaks
    chunks = asyncio.run(streamed(url, seed=6))
    simulator.set_script([])
    assert simulator.requests - before == 2  # the broken attempt was not retried
    content = "".join(text for _, text in pieces(chunks))
    assert content  # half of the answer went out, once
    error = chunks[-1][1]
    assert isinstance(error, openai.APIError), error
    assert "not sent again" in str(error)
    assert "done" not in [event_type(c) for _, c in chunks]
