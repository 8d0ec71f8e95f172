"""The allow-list proxy in front of vLLM (:mod:`conductor_core.serve.model_proxy`), on loopback
between a real client and a stand-in model server that would answer any path (as vLLM answers
``/tokenize`` or ``/invocations`` without its key): only the gateway's, the probes' and
Prometheus's routes reach it, bodies and headers pass unchanged, streams arrive as they are
written, and a client that leaves aborts the upstream request."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import Any

import httpx
import pytest

from conductor_core.serve.model_proxy import ALLOWED_ROUTES, ModelPathFilter
from conductor_core.simulation.server import running_app

pytest.importorskip("uvicorn")


class StandIn:
    """A model server that answers every path with what it received; ``/v1/chat/completions``
    with ``"stream": true`` as three server-sent events 0.2 s apart, ``"hang": true`` never
    (recording when the client went away)."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str | None, bytes]] = []
        self.aborted = 0

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = dict(scope["headers"])
        auth = headers.get(b"authorization", b"").decode() or None
        self.seen.append((scope["method"], scope["path"], auth, body))
        data = json.loads(body) if body else {}
        if data.get("hang"):
            while (await receive())["type"] != "http.disconnect":
                pass
            self.aborted += 1
            return
        if data.get("stream"):
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            for i in range(3):
                event = f"data: {json.dumps({'i': i, 't': time.monotonic()})}\n\n".encode()
                await send({"type": "http.response.body", "body": event, "more_body": True})
                await asyncio.sleep(0.2)
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
            return
        reply = json.dumps({"path": scope["path"], "query": scope["query_string"].decode()})
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"x-upstream", b"yes")],
            }
        )
        await send({"type": "http.response.body", "body": reply.encode()})


@pytest.fixture(scope="module")
def proxied():
    """(proxy base URL, stand-in) with the proxy served by uvicorn as the chart runs it."""
    stand_in = StandIn()
    with running_app(stand_in) as upstream:
        proxy = ModelPathFilter(upstream.removesuffix("/v1"))
        with running_app(proxy, lifespan="on", http="h11") as url:
            yield url.removesuffix("/v1"), stand_in


def raw_request(url: str, request_line: str) -> bytes:
    """The status line of ``request_line`` sent as it is (no client-side path normalisation)."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"{request_line}\r\nHost: model\r\nContent-Length: 0\r\n\r\n".encode())
        return sock.recv(65536).split(b"\r\n")[0]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/tokenize"),
        ("POST", "/detokenize"),
        ("POST", "/invocations"),
        ("POST", "/pooling"),
        ("POST", "/score"),
        ("POST", "/v1/score"),
        ("POST", "/rerank"),
        ("POST", "/classify"),
        ("POST", "/inference/v1/generate"),
        ("POST", "/v1/embeddings"),
        ("POST", "/v1/audio/transcriptions"),
        ("POST", "/v1/chat/completions/"),
        ("GET", "/v1/chat/completions"),
        ("POST", "/metrics"),
        ("GET", "/"),
    ],
)
def test_routes_the_gateway_does_not_use_are_refused(proxied, method, path) -> None:
    url, stand_in = proxied
    before = len(stand_in.seen)
    response = httpx.request(method, url + path, json={"prompt": "x"}, timeout=10)
    assert response.status_code == 403
    error = response.json()["error"]
    assert error["code"] == "route_not_allowed" and path in error["message"]
    assert "POST /v1/chat/completions" in error["message"]  # says what is allowed
    assert len(stand_in.seen) == before  # never reached the model server


@pytest.mark.parametrize(
    "target",
    [
        "/v1/chat/completions/../../tokenize",
        "//tokenize",
        "/v1/../tokenize",
        "/%74okenize",
        "/v1/chat/completions%2F..%2F..%2Ftokenize",
    ],
)
def test_paths_that_only_resolve_to_another_route_are_refused(proxied, target) -> None:
    url, stand_in = proxied
    before = len(stand_in.seen)
    assert raw_request(url, f"POST {target} HTTP/1.1") == b"HTTP/1.1 403 Forbidden"
    assert len(stand_in.seen) == before


@pytest.mark.parametrize(("method", "path"), sorted(ALLOWED_ROUTES))
def test_the_gateways_probes_and_prometheus_routes_pass(proxied, method, path) -> None:
    url, stand_in = proxied
    content = json.dumps({"model": "m", "messages": []}).encode() if method == "POST" else None
    response = httpx.request(
        method,
        url + path + "?smuggled=1",
        content=content,
        headers={"authorization": "Bearer sk-vllm-key", "content-type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200
    assert response.json() == {"path": path, "query": ""}  # the query string is dropped
    assert response.headers["x-upstream"] == "yes"
    assert stand_in.seen[-1] == (method, path, "Bearer sk-vllm-key", content or b"")


def test_a_stream_arrives_as_it_is_written(proxied) -> None:
    url, _ = proxied
    arrivals = []
    body = {"model": "m", "messages": [], "stream": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=10) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: {"):
                arrivals.append(time.monotonic())
    assert len(arrivals) == 3
    assert arrivals[2] - arrivals[0] > 0.3  # relayed one by one, not buffered to the end


def test_a_client_that_leaves_aborts_the_upstream_request(proxied) -> None:
    url, stand_in = proxied
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{url}/v1/completions", json={"hang": True}, timeout=0.5)
    deadline = time.monotonic() + 5
    while stand_in.aborted == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stand_in.aborted == 1


def test_an_unreachable_model_server_is_a_502() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with running_app(ModelPathFilter(f"http://127.0.0.1:{port}"), lifespan="on") as url:
        response = httpx.get(url.removesuffix("/v1") + "/health", timeout=10)
    assert response.status_code == 502
    assert response.json()["error"]["code"] == "upstream_unreachable"
