"""An allow-list reverse proxy in front of a vLLM server: only the routes that the gateway, the
kubelet's probes and Prometheus use reach the model server; any other path gets 403.

Why: vLLM's ``--api-key`` guards only the ``/v1`` routes. In the versions the chart runs,
``/invocations``, ``/tokenize``, ``/detokenize``, ``/pooling``, ``/score``, ``/rerank``,
``/classify`` and more answer without the key (vLLM 0.32's middleware guards only the paths under
``/v1``, ``/v2``, ``/inference`` and ``/cohere``), so any pod that a NetworkPolicy lets in
(Prometheus, for ``/metrics``) would get free inference; a NetworkPolicy filters ports, not
paths. The chart binds vLLM to
127.0.0.1 and puts this proxy on the pod's port (``python -m conductor_core.serve.model_proxy``,
from the gateway's image).

What passes (:data:`ALLOWED_ROUTES`, exact paths): ``POST /v1/chat/completions`` and
``POST /v1/completions`` (inference, still under vLLM's key), ``GET /v1/models`` (the gateway's
health checks), ``GET /health`` (probes) and ``GET /metrics`` (Prometheus). The query string is
dropped (none of these routes takes one from the gateway). Bodies are forwarded as they are, the
response streamed back as vLLM sends it (server-sent events included, undecoded); a client that
goes away before vLLM answers closes the upstream connection, which aborts vLLM's request.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from conductor_core.serve.protocol import error_body

__all__ = ["ALLOWED_ROUTES", "ModelPathFilter", "main"]

logger = logging.getLogger("conductor.model_proxy")

ALLOWED_ROUTES: frozenset[tuple[str, str]] = frozenset(
    {
        ("POST", "/v1/chat/completions"),
        ("POST", "/v1/completions"),
        ("GET", "/v1/models"),
        ("GET", "/health"),
        ("GET", "/metrics"),
    }
)
"""(method, exact path) of every request let through to the model server."""

_HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"te",
        b"trailer",
        b"trailers",
        b"transfer-encoding",
        b"upgrade",
        b"host",
        b"content-length",
    }
)
"""Request and response headers not forwarded: hop-by-hop ones, and those the next hop sets
itself (Host, and Content-Length, recomputed from the body, kept on responses below)."""


class _ClientGone(Exception):
    """The client disconnected before its request was read."""


Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


async def _answer(send: Send, status: int, message: str, code: str) -> None:
    """An OpenAI-format error response of the proxy itself."""
    body = json.dumps(error_body(message, "invalid_request_error", code=code)).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class ModelPathFilter:
    """The ASGI app of the proxy (see the module's description).

    Args:
        upstream: base URL of the model server (``http://127.0.0.1:8001``).
        max_body_bytes: largest request body forwarded; larger: 413.
        connect_timeout_s: bound on connecting to the model server; past it: 502.
        transport: the ``httpx`` transport to the model server (tests; default: the network).
    """

    def __init__(
        self,
        upstream: str,
        *,
        max_body_bytes: int = 32 * 1024 * 1024,
        connect_timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.max_body_bytes = max_body_bytes
        # no read timeout: a generation takes as long as it takes; the gateway bounds it and
        # closes its connection, which closes the upstream one
        self._timeout = httpx.Timeout(None, connect=connect_timeout_s)
        self._transport = transport
        self._client: httpx.AsyncClient | None = None

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                timeout=self._timeout, transport=self._transport, follow_redirects=False
            )
        return self._client

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return  # websockets: refused by closing
        method, path = scope["method"], scope["path"]
        if (method, path) not in ALLOWED_ROUTES:
            allowed = ", ".join(f"{m} {p}" for m, p in sorted(ALLOWED_ROUTES))
            await _answer(
                send,
                403,
                f"{method[:16]} {path[:200]} is not served through this proxy; allowed: {allowed}",
                "route_not_allowed",
            )
            return
        try:
            body = await self._read_body(receive)
        except _ClientGone:
            return  # nobody to answer
        if body is None:
            await _answer(
                send,
                413,
                f"request body over the proxy's limit of {self.max_body_bytes} bytes",
                "request_too_large",
            )
            return
        headers = [(k, v) for k, v in scope["headers"] if k.lower() not in _HOP_BY_HOP]
        request = self._http().build_request(
            method, self.upstream + path, headers=headers, content=body
        )
        sent = asyncio.ensure_future(self._http().send(request, stream=True))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait((sent, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not sent.done():  # the client went first: drop the upstream request
                sent.cancel()
                with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                    await sent
        try:
            if gone.done():  # nobody to answer; a response that came at the same time is closed
                if not sent.cancelled() and sent.exception() is None:
                    await sent.result().aclose()
                return
            try:
                response = sent.result()
            except httpx.HTTPError as exc:
                logger.warning("model server unreachable: %s", type(exc).__name__)
                await _answer(
                    send, 502, "the model server is not reachable", "upstream_unreachable"
                )
                return
            try:
                await self._relay(response, send, gone)
            finally:
                await response.aclose()
        finally:
            gone.cancel()

    async def _relay(self, response: httpx.Response, send: Send, gone: asyncio.Future) -> None:
        """Stream ``response`` to the client as it arrives, until its end or the client's."""
        headers = [
            (k, v)
            for k, v in response.headers.raw
            if k.lower() not in _HOP_BY_HOP or k.lower() == b"content-length"
        ]
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        async for chunk in response.aiter_raw():
            if gone.done():
                return  # the client left mid-stream: closing the response aborts vLLM's request
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})

    async def _read_body(self, receive: Receive) -> bytes | None:
        """The request body; None when it is over ``max_body_bytes``.

        Raises:
            _ClientGone: the client disconnected before sending it all.
        """
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _ClientGone
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._client is not None:
                    await self._client.aclose()
                await send({"type": "lifespan.shutdown.complete"})
                return


async def _disconnected(receive: Receive) -> None:
    """Returns when the client disconnects (after the body, the server's next message is
    ``http.disconnect``; waiting costs nothing until then)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def main(argv: list[str] | None = None) -> None:
    """``python -m conductor_core.serve.model_proxy --port 8000 --upstream URL``."""
    import argparse

    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on")
    parser.add_argument(
        "--upstream", default="http://127.0.0.1:8001", help="base URL of the model server"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    uvicorn.run(
        ModelPathFilter(args.upstream),
        host=args.host,
        port=args.port,
        http="h11",
        lifespan="on",
        access_log=False,  # nothing of a request (its key least of all) reaches the log
        proxy_headers=False,
        log_config=None,
    )


if __name__ == "__main__":
    main()
