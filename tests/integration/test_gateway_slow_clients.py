"""Slow clients against a real server on loopback: connections held open with no request, half
a request head or half a body are closed within the read timeouts (``header_timeout_s``,
``body_timeout_s``), a normal client is served meanwhile, and the connection limit
(``max_connections``) answers 503 beyond it. The gateway runs in uvicorn with the options
``conductor serve`` uses (:func:`conductor_core.serve.server.uvicorn_options`).
"""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import openai
import pytest

from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.server import uvicorn_options
from conductor_core.simulation.server import running_app
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

pytest.importorskip("prometheus_client")

TIMEOUT_S = 1.0
SLACK_S = 2.0  # scheduling on a loaded 2-core machine
QUESTION = (
    "A train travels 240 kilometres in 3 hours. At the same speed, how many kilometres "
    "does it travel in 5 hours?"
)
BODY = json.dumps({"model": "conductor", "messages": [{"role": "user", "content": QUESTION}]})
HEAD = (
    "POST /v1/chat/completions HTTP/1.1\r\n"
    "Host: gateway\r\n"
    "Content-Type: application/json\r\n"
    f"Content-Length: {len(BODY)}\r\n\r\n"
)
# what a held connection sends before it stalls
STALLS = {
    "nothing": b"",
    "half a head": HEAD[:40].encode(),
    "half a body": (HEAD + BODY[:12]).encode(),
}


@contextlib.contextmanager
def gateway(config: GatewayConfig) -> Iterator[tuple[str, int, str, object]]:
    """(host, port, base URL .../v1, app) of a gateway served as ``conductor serve`` serves it."""
    app = create_app(config, pool=load_pool(bundled_pool_path()))
    options = uvicorn_options(config, app.state.metrics)
    with running_app(app, lifespan="on", **options) as url:
        parts = urlsplit(url)
        assert parts.hostname == "127.0.0.1"
        yield parts.hostname, parts.port, url, app


@contextlib.contextmanager
def held(host: str, port: int, sends: list[bytes]) -> Iterator[list[tuple[socket.socket, float]]]:
    """Connections that send ``sends[i]`` and then nothing (with the time each was opened)."""
    socks: list[tuple[socket.socket, float]] = []
    try:
        for data in sends:
            sock = socket.create_connection((host, port), timeout=10)
            socks.append((sock, time.monotonic()))
            if data:
                sock.sendall(data)
        yield socks
    finally:
        for sock, _ in socks:
            sock.close()


def read_until_closed(sock: socket.socket, limit_s: float) -> tuple[bytes, float]:
    """Everything the server sends until it closes the connection, and when it closed (monotonic
    time); fails if it is still open after ``limit_s``."""
    sock.settimeout(limit_s)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except TimeoutError:
        pytest.fail(f"the server held the connection for more than {limit_s:g}s: {data[:80]!r}")
    except ConnectionResetError:
        pass
    return data, time.monotonic()


def ask(url: str) -> str:
    with openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=10) as client:
        reply = client.chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": QUESTION}]
        )
    return reply.choices[0].message.content or ""


def test_thirty_held_requests_are_closed_in_time_and_a_normal_client_is_served() -> None:
    config = GatewayConfig(header_timeout_s=TIMEOUT_S, body_timeout_s=TIMEOUT_S)
    kinds = [kind for kind in STALLS for _ in range(10)]
    with (
        gateway(config) as (host, port, url, _),
        held(host, port, [STALLS[k] for k in kinds]) as socks,
    ):
        assert "\\boxed{400}" in ask(url)  # served while the 30 are held
        outcomes = [read_until_closed(s, TIMEOUT_S + 2 * SLACK_S) for s, _ in socks]
        metrics = httpx.get(url.removesuffix("/v1") + "/metrics", timeout=5).text
    for kind, (_, opened), (data, closed) in zip(kinds, socks, outcomes, strict=True):
        assert TIMEOUT_S - 0.2 < closed - opened < TIMEOUT_S + SLACK_S, (kind, closed - opened)
        if kind == "nothing":
            assert data == b"", data  # nothing asked, nothing answered: just closed
        else:
            head, _, body = data.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 408"), (kind, data[:200])
            assert b"connection: close" in head.lower()
            assert json.loads(body)["error"]["code"] == "request_read_timeout"
    assert 'conductor_gateway_read_timeouts_total{phase="headers"} 20.0' in metrics
    assert 'conductor_gateway_read_timeouts_total{phase="body"} 10.0' in metrics


def test_the_connection_limit_answers_503_beyond_it_until_held_ones_time_out() -> None:
    config = GatewayConfig(header_timeout_s=TIMEOUT_S, max_connections=6)
    with gateway(config) as (host, port, url, _):
        with held(host, port, [STALLS["half a head"]] * 6) as socks:
            beyond = httpx.get(url.removesuffix("/v1") + "/healthz", timeout=5)
            for sock, _ in socks:
                read_until_closed(sock, TIMEOUT_S + 2 * SLACK_S)
        after = httpx.get(url.removesuffix("/v1") + "/healthz", timeout=5)
    assert beyond.status_code == 503
    assert after.status_code == 200


def read_response(sock: socket.socket) -> bytes:
    """One response with a Content-Length body."""
    sock.settimeout(10)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a whole response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a whole response: {data!r}"
        body += chunk
    return head


def test_kept_alive_connections_are_bounded_too() -> None:
    config = GatewayConfig(header_timeout_s=TIMEOUT_S, body_timeout_s=TIMEOUT_S)
    healthz = b"GET /healthz HTTP/1.1\r\nHost: gateway\r\n\r\n"
    with gateway(config) as (host, port, _, _), held(host, port, [b""]) as socks:
        ((reused, _),) = socks
        # idle between requests is the keep-alive's business: the next request is served
        reused.sendall(healthz)
        assert read_response(reused).startswith(b"HTTP/1.1 200")
        time.sleep(TIMEOUT_S * 1.5)
        reused.sendall(healthz)
        assert read_response(reused).startswith(b"HTTP/1.1 200")
        # half of the next request's head: 408 within header_timeout_s of its first byte
        reused.sendall(healthz[:20])
        sent = time.monotonic()
        data, closed = read_until_closed(reused, TIMEOUT_S + 2 * SLACK_S)
        assert data.startswith(b"HTTP/1.1 408") and closed - sent < TIMEOUT_S + SLACK_S
    # answered before its body was read (no such route for POST), then the body stalls:
    # closed body_timeout_s later
    early_post = b"POST /healthz HTTP/1.1\r\nHost: gateway\r\nContent-Length: 100\r\n\r\n{"
    with gateway(config) as (host, port, _, _), held(host, port, [early_post]) as socks:
        ((early, _),) = socks
        assert read_response(early).startswith(b"HTTP/1.1 405")
        answered = time.monotonic()
        data, closed = read_until_closed(early, TIMEOUT_S + 2 * SLACK_S)
        assert data == b"" and closed - answered < TIMEOUT_S + SLACK_S
