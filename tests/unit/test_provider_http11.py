"""The OpenAI-compatible provider's small HTTP/1.1 client without a network
(:mod:`conductor_core.workers.providers.http11`): which endpoints it serves, the request head it
encodes once, connection reuse and framing over a scripted in-memory transport, and plain calls
that skip the SDK's per-call machinery (over loopback: tests/integration/test_provider_http11.py).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.providers import http11
from conductor_core.workers.providers.openai_compat import OpenAIProvider
from tests.support.mock_providers import MSG, SECRET, Server, key_without_proxies


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    key_without_proxies(monkeypatch)


def worker(url: str = "http://127.0.0.1:9/v1") -> WorkerConfig:
    return WorkerConfig.model_validate(
        {"provider": "openai", "model": "m", "endpoint": url, "api_key_env": "TEST_OPENAI_KEY"}
    )


def chat(text: str) -> dict[str, Any]:
    return {
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3},
    }


class ScriptedClient(http11.Http11Client):
    """An :class:`~http11.Http11Client` whose connections are in memory: each request written
    is answered with the next scripted reply; counts the connections it opens."""

    def __init__(self, *replies: bytes) -> None:
        super().__init__("http://worker:8000/v1/chat/completions", timeout_s=5)
        self.replies = list(replies)
        self.opened = 0
        self.written: list[bytes] = []

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> Any:
        self.opened += 1
        conn = http11._Connection(loop)
        client = self

        class Transport:
            closing = False

            def write(self, data: bytes) -> None:
                client.written.append(data)
                loop.call_soon(conn.data_received, client.replies.pop(0))

            def is_closing(self) -> bool:
                return self.closing

            def close(self) -> None:
                self.closing = True

        conn.connection_made(Transport())
        return conn


def response(text: str, *, close: bool = False) -> bytes:
    raw = json.dumps(chat(text)).encode()
    extra = b"connection: close\r\n" if close else b""
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (len(raw), extra, raw)


def test_which_endpoints_the_small_client_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    assert http11.fits("http://127.0.0.1:8000/v1/chat/completions")
    assert http11.fits("http://vllm.workers.svc:8000/v1/chat/completions")
    assert not http11.fits("https://api.openai.com/v1/chat/completions")
    assert not http11.fits("http://user:pw@127.0.0.1:8000/v1/chat/completions")
    assert not http11.fits("http://127.0.0.1:99999/v1")
    monkeypatch.setenv("NO_PROXY", "localhost")
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert http11.fits("http://127.0.0.1:8000/v1/chat/completions")  # neither applies here
    monkeypatch.setenv("HTTP_PROXY", "http://proxy:3128")
    assert not http11.fits("http://127.0.0.1:8000/v1/chat/completions")  # httpx's routing
    monkeypatch.delenv("HTTP_PROXY")
    monkeypatch.setenv("ALL_PROXY", "http://proxy:3128")
    assert not http11.fits("http://127.0.0.1:8000/v1/chat/completions")
    assert OpenAIProvider(worker("https://api.openai.com/v1"))._lean is None


def test_request_head_refuses_unsafe_or_framing_fields() -> None:
    client = http11.Http11Client("http://127.0.0.1:8000/v1/x", timeout_s=1)
    head = client.request_head([("Authorization", "Bearer k")])
    assert head.startswith(b"POST /v1/x HTTP/1.1\r\n") and head.endswith(b"Bearer k\r\n")
    assert b"Host: 127.0.0.1:8000\r\n" in head
    with pytest.raises(ValueError):
        client.request_head([("Authorization", "Bearer k\r\nX-Injected: 1")])
    with pytest.raises(ValueError):
        client.request_head([("Content-Length", "5")])
    assert http11.Http11Client("http://h:80/v1", timeout_s=1).host_header == "h"


def test_one_connection_serves_consecutive_requests_until_the_server_closes_it() -> None:
    raw = json.dumps(chat("chunked")).encode()
    chunked = (
        b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"%x\r\n%s\r\n0\r\n\r\n" % (len(raw), raw)
    )
    client = ScriptedClient(
        response("one"), chunked, response("three", close=True), response("four")
    )
    head = client.request_head([("Authorization", "Bearer k")])

    async def main() -> list[str]:
        out = []
        for i in range(4):
            r = await client.post(b'{"n": %d}' % i, head)
            out.append(json.loads(r.content)["choices"][0]["message"]["content"])
        await client.aclose()
        return out

    assert asyncio.run(main()) == ["one", "chunked", "three", "four"]
    assert client.opened == 2  # reused until "Connection: close"
    assert client.written[0] == head + b'Content-Length: 8\r\n\r\n{"n": 0}'


def test_a_plain_call_skips_the_sdk_and_reads_its_headers_once() -> None:
    server = Server(httpx.Response(200, json=chat("four")))
    provider = OpenAIProvider(worker(), http_client=server.client())
    headers_read = 0
    sdk = provider._client

    class CountingClient(type(sdk)):  # type: ignore[misc]
        @property
        def default_headers(self) -> Any:
            nonlocal headers_read
            headers_read += 1
            return super().default_headers

    sdk.__class__ = CountingClient

    async def sdk_call(**kwargs: Any) -> Any:
        raise AssertionError("a plain call went through the SDK")

    sdk.chat.completions.create = sdk_call  # type: ignore[method-assign]

    async def main() -> list[str]:
        try:
            return [(await provider.complete(MSG)).text for _ in range(3)]
        finally:
            await provider.aclose()

    assert asyncio.run(main()) == ["four"] * 3
    assert headers_read == 1
    assert len(server.requests) == 3
    assert all(r.headers["authorization"] == f"Bearer {SECRET}" for r in server.requests)


def test_per_call_fields_are_encoded_and_unsafe_ones_left_out() -> None:
    fields = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    assert http11.header_fields({**fields, "X-Request-ID": "r-1"}) == (
        b"traceparent: 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\r\n"
        b"X-Request-ID: r-1\r\n"
    )
    unsafe = {
        "tracestate": "a=1\r\nX-Injected: 1",
        "baggage": "caf\u00e9",
        "Content-Length": "1",
        "Host": "elsewhere",
        "bad name": "v",
        "empty": "",
    }
    assert http11.header_fields(unsafe) == b""


def test_a_workflows_calls_carry_its_request_id_and_trace_context_on_both_paths() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    from conductor_core import telemetry

    tracer = TracerProvider().get_tracer("test")
    lean = OpenAIProvider(worker())
    lean._lean = scripted = ScriptedClient(response("one"))
    lean._request_headers()  # the head the scripted client is given
    server = Server(httpx.Response(200, json=chat("two")))
    sdk_path = OpenAIProvider(worker(), http_client=server.client())

    async def main() -> tuple[str, str, str]:
        telemetry.bind("req-7", tracer)  # in this run's own context
        try:
            with telemetry.span("conductor.worker_call", kind="client") as span:
                ctx = span.get_span_context()
                await lean.complete(MSG)
                await sdk_path.complete(MSG)
            return f"{ctx.trace_id:032x}", f"{ctx.span_id:016x}", f"{int(ctx.trace_flags):02x}"
        finally:
            await lean.aclose()
            await sdk_path.aclose()

    trace_id, span_id, flags = asyncio.run(main())
    traceparent = f"00-{trace_id}-{span_id}-{flags}"
    written = scripted.written[0]
    fields = f"traceparent: {traceparent}\r\nX-Request-ID: req-7\r\n".encode()
    assert written.startswith(lean._head + fields + b"Content-Length: ")
    (request,) = server.requests
    assert request.headers["traceparent"] == traceparent
    assert request.headers["x-request-id"] == "req-7"
    assert request.headers["authorization"] == f"Bearer {SECRET}"  # still the worker's own key


def test_calls_outside_a_workflow_carry_no_extra_fields() -> None:
    provider = OpenAIProvider(worker())
    provider._lean = scripted = ScriptedClient(response("one"))

    async def main() -> None:
        try:
            await provider.complete(MSG)
        finally:
            await provider.aclose()

    asyncio.run(main())
    assert scripted.written[0].startswith(provider._head + b"Content-Length: ")
    assert b"traceparent" not in scripted.written[0]
    assert b"X-Request-ID" not in scripted.written[0]
