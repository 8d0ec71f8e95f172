"""The OpenAI-compatible provider's plain calls over its small HTTP/1.1 client
(:mod:`conductor_core.workers.providers.http11`), against a scripted server on loopback: the
SDK is not called, one connection serves consecutive calls, the request on the wire is the
SDK's, and statuses, framings, broken connections, timeouts and redirects end as the SDK's
client would have them end (which endpoints it serves, its request head, and plain calls over
a mocked client: tests/unit/test_provider_http11.py)."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
from typing import Any

import pytest

from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.providers.openai_compat import OpenAIProvider, build_request
from conductor_core.workers.types import ErrorKind, ProviderError
from tests.support.mock_providers import MSG, SECRET, key_without_proxies

HANG = "hang"  # reply: never answer
DROP = "drop"  # reply: close the connection without answering


def reply(
    status: int = 200,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> bytes:
    """One HTTP/1.1 response: ``body`` as JSON (default: a chat completion saying ``four``)."""
    if raw is None:
        raw = json.dumps(completion("four") if body is None else body).encode()
    fields = {"content-type": "application/json", "content-length": str(len(raw))}
    fields.update(headers or {})
    head = "".join(f"{k}: {v}\r\n" for k, v in fields.items() if v is not None)
    return f"HTTP/1.1 {status} X\r\n{head}\r\n".encode() + raw


def completion(text: str | None) -> dict[str, Any]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"content": text}}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
    }


class RawServer:
    """A loopback HTTP server answering the n-th request with the n-th scripted reply (the last
    one again after the script ends): bytes, ``(bytes, "close")`` to close after it, ``HANG`` or
    ``DROP``. Records each request (request line, lower-case headers, body) and counts
    connections."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.connections = 0
        self._writers: list[asyncio.StreamWriter] = []
        self._tasks: list[asyncio.Task[Any]] = []

    async def __aenter__(self) -> RawServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self._writers.append(writer)
        self._tasks.append(asyncio.current_task())  # type: ignore[arg-type]
        try:
            while True:
                head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
                line, *rest = head.split("\r\n")
                fields = {}
                for item in rest:
                    if item:
                        name, _, value = item.partition(":")
                        fields[name.strip().lower()] = value.strip()
                body = await reader.readexactly(int(fields.get("content-length", "0")))
                self.requests.append((line, fields, body))
                item = self.replies[min(len(self.requests), len(self.replies)) - 1]
                if item == HANG:
                    await asyncio.sleep(3600)
                if item == DROP:
                    writer.close()
                    return
                data, close = item if isinstance(item, tuple) else (item, None)
                writer.write(data)
                await writer.drain()
                if close:
                    writer.close()
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            writer.close()  # the handler ends quietly when the test is over


def worker(url: str, **kw: Any) -> WorkerConfig:
    base: dict[str, Any] = {
        "provider": "openai",
        "model": "m",
        "endpoint": url,
        "api_key_env": "TEST_OPENAI_KEY",
    }
    base.update(kw)
    return WorkerConfig.model_validate(base)


def run(server: RawServer, body: Any, **worker_kw: Any) -> Any:
    """``body(provider)`` against ``server``, the provider closed afterwards."""

    async def main() -> Any:
        async with server:
            provider = OpenAIProvider(worker(server.url, **worker_kw))
            try:
                return await body(provider)
            finally:
                await provider.aclose()

    return asyncio.run(main())


async def error_of(provider: OpenAIProvider) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        await provider.complete(MSG)
    return info.value


@pytest.fixture(autouse=True)
def _env(monkeypatch: pytest.MonkeyPatch) -> None:
    key_without_proxies(monkeypatch)


def test_plain_calls_skip_the_sdk_and_share_one_connection() -> None:
    server = RawServer(reply())

    async def body(provider: OpenAIProvider) -> list[Any]:
        assert provider._lean is not None

        async def sdk_call(**kwargs: Any) -> Any:
            raise AssertionError("a plain call went through the SDK")

        provider._client.chat.completions.create = sdk_call  # type: ignore[method-assign]
        return [await provider.complete(MSG) for _ in range(3)]

    outs = run(server, body, params={"max_tokens": 64, "temperature": 0.3, "extra": {"top_k": 5}})
    assert [o.text for o in outs] == ["four"] * 3
    assert (outs[0].usage.input_tokens, outs[0].usage.output_tokens) == (12, 3)
    assert server.connections == 1 and len(server.requests) == 3
    line, fields, raw = server.requests[0]
    assert line == "POST /v1/chat/completions HTTP/1.1"
    assert fields["authorization"] == f"Bearer {SECRET}"
    assert fields["content-type"] == "application/json"
    sent = json.loads(raw)
    assert sent["model"] == "m" and sent["messages"] == MSG and sent["top_k"] == 5
    assert sent["max_tokens"] == 64 and sent["temperature"] == 0.3 and "extra_body" not in sent


def test_the_small_client_sends_what_the_sdk_sends() -> None:
    server = RawServer(reply())
    w = worker("http://127.0.0.1:1/v1", params={"extra": {"top_k": 5}})

    async def body(provider: OpenAIProvider) -> None:
        await provider.complete(MSG)
        await provider._client.chat.completions.create(**build_request(w, MSG))

    run(server, body, params={"extra": {"top_k": 5}})
    (line, ours, raw), (sdk_line, sdk, sdk_raw) = server.requests
    assert line == sdk_line
    assert ours == sdk  # every header, the key and the SDK's own included
    assert json.loads(raw) == json.loads(sdk_raw)


def test_statuses_map_as_from_the_sdk() -> None:
    echoed = {"error": {"message": f"Incorrect API key provided: {SECRET}."}}
    server = RawServer(
        reply(429, {"error": {"message": "slow down"}}, headers={"retry-after": "7"}),
        reply(500, {"error": {"message": "upstream exploded"}}),
        reply(401, echoed),
        reply(400, {"message": "bad param"}),
        reply(200, raw=b"{not json"),
        reply(200, completion("  ")),
    )

    async def body(provider: OpenAIProvider) -> list[ProviderError]:
        return [await error_of(provider) for _ in range(6)]

    limited, failed, denied, refused, garbled, empty = run(server, body)
    assert limited.kind == ErrorKind.RATE_LIMIT and limited.retry_after == 7.0
    assert str(limited) == "HTTP 429: Error code: 429 - slow down"
    assert failed.kind == ErrorKind.SERVER and failed.retryable and failed.status == 500
    assert "upstream exploded" in str(failed)
    assert denied.kind == ErrorKind.AUTH and not denied.retryable and SECRET not in str(denied)
    assert refused.kind == ErrorKind.CLIENT and str(refused).endswith("Error code: 400 - bad param")
    assert garbled.kind == empty.kind == ErrorKind.MALFORMED
    assert server.connections == 1  # error replies keep the connection


def test_chunked_gzip_and_connection_close() -> None:
    text = json.dumps(completion("chunked")).encode()
    chunked = (
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        + b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (text[:10], text[10:]))
        + b"0\r\n\r\n"
    )
    squeezed = gzip.compress(json.dumps(completion("gzipped")).encode())
    server = RawServer(
        chunked,
        reply(raw=squeezed, headers={"content-encoding": "gzip"}),
        reply(body=completion("last on it"), headers={"connection": "close"}),
        reply(body=completion("fresh")),
    )

    async def body(provider: OpenAIProvider) -> list[str]:
        return [(await provider.complete(MSG)).text for _ in range(4)]

    assert run(server, body) == ["chunked", "gzipped", "last on it", "fresh"]
    assert server.connections == 2  # "Connection: close" ended the first one
    assert server.requests[0][1]["accept-encoding"] == "gzip, deflate"


def test_a_connection_the_server_closed_is_not_reused() -> None:
    server = RawServer((reply(), "close"), reply(body=completion("again")))

    async def body(provider: OpenAIProvider) -> list[str]:
        first = (await provider.complete(MSG)).text
        await asyncio.sleep(0.05)  # the server's FIN arrives while the connection is idle
        return [first, (await provider.complete(MSG)).text]

    assert run(server, body) == ["four", "again"]
    assert server.connections == 2


def test_broken_replies_and_refused_connections_are_connection_errors() -> None:
    partial = reply()[:-5]
    server = RawServer((partial, "close"), DROP, b"NOT HTTP AT ALL\r\n\r\n")

    async def body(provider: OpenAIProvider) -> list[ProviderError]:
        return [await error_of(provider) for _ in range(3)]

    for e in run(server, body):
        assert e.kind == ErrorKind.CONNECTION and e.retryable
        assert str(e) == f"cannot reach {server.url}: Connection error."
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed

    async def refused() -> ProviderError:
        provider = OpenAIProvider(worker(f"http://127.0.0.1:{port}/v1"))
        try:
            return await error_of(provider)
        finally:
            await provider.aclose()

    e = asyncio.run(refused())
    assert e.kind == ErrorKind.CONNECTION and "Connection error." in str(e)


def test_a_silent_server_times_out_and_a_cancelled_call_drops_its_connection() -> None:
    server = RawServer(HANG, HANG, reply(body=completion("late but fine")))

    async def body(provider: OpenAIProvider) -> tuple[ProviderError, str]:
        timed_out = await error_of(provider)
        call = asyncio.create_task(provider.complete(MSG))
        while len(server.requests) < 2:
            await asyncio.sleep(0.01)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        return timed_out, (await provider.complete(MSG)).text

    timed_out, text = run(server, body, timeout_s=0.3)
    assert timed_out.kind == ErrorKind.TIMEOUT and timed_out.retryable
    assert str(timed_out) == "request timed out: Request timed out."
    assert text == "late but fine"
    assert server.connections == 3  # neither the timed-out nor the cancelled one was reused


def test_a_redirect_is_followed_by_the_sdks_client() -> None:
    moved = reply(307, {}, headers={"location": "/elsewhere/chat/completions"})
    server = RawServer(moved, moved, reply(body=completion("moved")))

    async def body(provider: OpenAIProvider) -> str:
        return (await provider.complete(MSG)).text

    assert run(server, body) == "moved"
    paths = [line.split()[1] for line, _, _ in server.requests]
    assert paths == ["/v1/chat/completions"] * 2 + ["/elsewhere/chat/completions"]


class EndlessServer:
    """A loopback server answering every request with a chunked body of 64 KiB chunks until the
    client goes (or, so that a client without a limit cannot take the machine's memory, until
    64 MiB), or with ``declared`` as its Content-Length (then trickling); counts the bytes it
    managed to send."""

    def __init__(self, declared: int | None = None) -> None:
        self.declared = declared
        self.sent = 0

    async def __aenter__(self) -> EndlessServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").lower()
            length = int(head.split("content-length:")[1].split("\r\n")[0])
            await reader.readexactly(length)
            framing = (
                "transfer-encoding: chunked"
                if self.declared is None
                else f"content-length: {self.declared}"
            )
            writer.write(
                f"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{framing}\r\n\r\n".encode()
            )
            piece = b"x" * 65536
            chunk = piece if self.declared is not None else b"10000\r\n" + piece + b"\r\n"
            while self.sent < 64 * 2**20:
                writer.write(chunk)
                await writer.drain()
                self.sent += len(piece)
                if self.declared is not None:
                    await asyncio.sleep(0.01)
            if self.declared is None:
                writer.write(b"0\r\n\r\n")
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


@pytest.mark.parametrize("declared", [None, 10 * 2**30], ids=["endless-chunked", "declared-10GiB"])
def test_an_endless_body_is_a_clear_error_after_a_bounded_read(declared) -> None:
    from conductor_core.workers.providers.http11 import DEFAULT_MAX_BODY_BYTES

    async def main() -> tuple[ProviderError, int]:
        async with EndlessServer(declared) as server:
            provider = OpenAIProvider(worker(server.url, timeout_s=30))
            try:
                error = await error_of(provider)
            finally:
                await provider.aclose()
            await asyncio.sleep(0.05)
            return error, server.sent

    error, sent = asyncio.run(main())
    assert error.kind == ErrorKind.MALFORMED
    assert f"more than the limit of {DEFAULT_MAX_BODY_BYTES} bytes" in str(error)
    # reading stopped at the limit (plus what the sockets' buffers held)
    assert sent < DEFAULT_MAX_BODY_BYTES + 8 * 2**20
    if declared is not None:  # refused on the header, before the body
        assert "declared as" in str(error) and sent < 4 * 2**20


def test_a_gzip_bomb_is_refused_without_expanding_it() -> None:
    import tracemalloc

    from conductor_core.workers.providers.http11 import DEFAULT_MAX_BODY_BYTES

    bomb = gzip.compress(b"0" * (256 * 2**20), compresslevel=9)  # 256 MiB in about 250 KiB
    assert len(bomb) < DEFAULT_MAX_BODY_BYTES
    server = RawServer(reply(raw=bomb, headers={"content-encoding": "gzip"}))

    async def body(provider: OpenAIProvider) -> tuple[ProviderError, int]:
        tracemalloc.start()
        try:
            error = await error_of(provider)
            return error, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    error, peak = run(server, body)
    assert error.kind == ErrorKind.MALFORMED
    assert f"decodes to more than the limit of {DEFAULT_MAX_BODY_BYTES} bytes" in str(error)
    assert peak < 3 * DEFAULT_MAX_BODY_BYTES  # never the 256 MiB


def test_a_truncated_gzip_body_is_a_connection_error() -> None:
    squeezed = gzip.compress(json.dumps(completion("cut")).encode())[:-12]
    server = RawServer(reply(raw=squeezed, headers={"content-encoding": "gzip"}))
    e = run(server, error_of)
    assert e.kind == ErrorKind.CONNECTION
