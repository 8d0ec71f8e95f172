"""A small keep-alive HTTP/1.1 client for the plain ``http://`` endpoints of OpenAI-compatible
workers (vLLM, the worker simulator, servers inside the cluster).

Why: a worker call is a small JSON POST, and the general clients spend more CPU on one than the
gateway spends on the rest of a request (``httpx`` over ``httpcore`` and ``anyio``: about 0.8 ms
of CPU per call on a 2-core machine, this client about 0.3 ms). The protocol itself is ``h11``'s
(framing, chunked bodies, keep-alive rules); this module adds the connections, and writes each
request in one piece from a head encoded once.

What it does: a POST written in one piece; idle connections reused (at most ``max_idle``, each
for at most ``keepalive_expiry_s`` seconds idle, as ``httpx`` keeps them; one that the server
closed, or that received data while idle, is dropped); bodies sized by Content-Length, chunked,
or ended by the connection's end; ``gzip`` and ``deflate`` bodies decoded (the encodings asked
for, as ``httpx`` asks). ``timeout_s`` bounds connecting and each wait for data, like ``httpx``'s
timeout. A body is at most ``max_body_bytes`` as received and again once decoded (a worker
that is broken or compromised cannot exhaust the gateway's memory with an endless body or a
gzip bomb): beyond, the connection is dropped and :class:`HTTPResponseTooLarge` raised. A
timeout raises :class:`HTTPTimeout`; a refused or broken connection, a protocol error or an
undecodable body raises :class:`HTTPConnectionError`.

What it does not do: TLS, proxies, redirects (a 3xx is returned as it is), authentication from
the URL. :class:`~conductor_core.workers.providers.openai_compat.OpenAIProvider` uses it only
where none of these is needed (:func:`fits`) and the SDK's own HTTP client everywhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import urllib.request
import zlib
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import h11

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "HTTPConnectionError",
    "HTTPResponseTooLarge",
    "HTTPTimeout",
    "Http11Client",
    "Response",
    "fits",
    "header_fields",
]


class HTTPTimeout(TimeoutError):
    """Connecting, or waiting for the response, took longer than the timeout."""


class HTTPConnectionError(ConnectionError):
    """The connection could not be made, broke, or carried something that is not HTTP/1.1."""


class HTTPResponseTooLarge(ValueError):
    """A response body, as received or decoded, is larger than the client's limit (a
    ``ValueError``: the reply arrived but cannot be used, as an unreadable body)."""


DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
"""Largest response body :class:`Http11Client` takes, received and decoded (a chat completion
is some kilobytes)."""


def fits(url: str) -> bool:
    """Whether :class:`Http11Client` can serve ``url`` as ``httpx`` would: a plain ``http`` URL
    without credentials, and no proxy for ``http`` URLs in the environment (``httpx`` reads
    ``http_proxy`` and ``all_proxy`` through :func:`urllib.request.getproxies`; with either set,
    whatever ``no_proxy`` says, ``httpx`` decides)."""
    try:
        parts = urlsplit(url)
        port_ok = parts.port is None or parts.port > 0  # reading it checks it
    except ValueError:
        return False
    proxies = urllib.request.getproxies()
    return (
        port_ok
        and parts.scheme == "http"
        and bool(parts.hostname)
        and "@" not in parts.netloc
        and not proxies.get("http")
        and not proxies.get("all")
    )


_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
"""A header field name (RFC 9110's token)."""

_VALUE = re.compile(r"[\x21-\x7e]([\t\x20-\x7e]*[\x21-\x7e])?")
"""A header field value this client writes: visible ASCII, inner spaces and tabs."""

_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection"})


def header_fields(headers: Mapping[str, str]) -> bytes:
    """Header fields to add to one request, after a head from :meth:`Http11Client.request_head`
    (e.g. a trace context that changes with each call), encoded; a field whose name or value
    this client does not write (a line break, a non-ASCII character, a field that frames the
    message) is left out."""
    out = []
    for name, value in headers.items():
        if _TOKEN.fullmatch(name) and _VALUE.fullmatch(value) and name.lower() not in _FRAMING:
            out.append(f"{name}: {value}\r\n".encode("ascii"))
    return b"".join(out)


class Response:
    """A whole response: status, headers (lower-case names; repeated ones joined by ``, ``),
    decoded body."""

    __slots__ = ("content", "headers", "status_code")

    def __init__(self, status_code: int, headers: dict[str, str], content: bytes) -> None:
        self.status_code = status_code
        self.headers = headers
        self.content = content

    @property
    def text(self) -> str:
        """The body as text (the Content-Type's charset, else UTF-8; bad bytes replaced)."""
        charset = "utf-8"
        for part in self.headers.get("content-type", "").split(";")[1:]:
            name, _, value = part.strip().partition("=")
            if name.lower() == "charset" and value:
                charset = value.strip("\"'")
        try:
            return self.content.decode(charset, errors="replace")
        except LookupError:
            return self.content.decode("utf-8", errors="replace")


class _Connection(asyncio.Protocol):
    """One TCP connection: what arrives goes straight into its ``h11`` state machine."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.h11 = h11.Connection(h11.CLIENT)
        self.transport: Any = None
        self.waiter: asyncio.Future[None] | None = None
        self.busy = False  # inside an exchange
        self.dirty = False  # data or EOF arrived while idle: not reusable
        self.lost = False
        self.idle_since = 0.0

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.busy:
            self.dirty = True
        try:
            self.h11.receive_data(data)
        except RuntimeError:  # data after the end: the connection is beyond use
            self.dirty = True
            self.close()
        self._wake()

    def eof_received(self) -> bool:
        self._end()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._end()

    def _end(self) -> None:
        if not self.busy:
            self.dirty = True
        with contextlib.suppress(RuntimeError):  # already ended
            self.h11.receive_data(b"")
        self._wake()

    def _wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def reusable(self, loop: asyncio.AbstractEventLoop) -> bool:
        return (
            loop is self.loop
            and not self.dirty
            and not self.lost
            and self.transport is not None
            and not self.transport.is_closing()
        )

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            with contextlib.suppress(RuntimeError):  # its event loop is closed: nothing to free
                self.transport.close()


class Http11Client:
    """POSTs to one ``http://`` URL over kept-alive connections (see the module's description).

    Args:
        url: the target (must pass :func:`fits`).
        timeout_s: the bound on connecting and on each wait for data (None: none).
        max_idle: idle connections kept for reuse.
        keepalive_expiry_s: how long an idle connection is kept.
        max_body_bytes: the largest response body, as received and once decoded.
    """

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float | None,
        max_idle: int = 100,
        keepalive_expiry_s: float = 5.0,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"not a plain http URL: {url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        netloc = parts.netloc
        self.host_header = netloc[:-3] if netloc.endswith(":80") else netloc  # as httpx sends it
        self.timeout_s = timeout_s
        self.max_idle = max_idle
        self.keepalive_expiry_s = keepalive_expiry_s
        self.max_body_bytes = max_body_bytes
        self._idle: list[_Connection] = []
        self._closed = False

    def request_head(self, headers: Iterable[tuple[str, str]]) -> bytes:
        """The request line and header fields of a POST with ``headers`` (Host, Accept-Encoding
        and Connection added; Content-Length comes with each body), checked and encoded by
        ``h11`` once, for :meth:`post`.

        Raises:
            ValueError: a header field ``h11`` refuses (e.g. a line break in a value), or one
                that frames the body (Content-Length, Transfer-Encoding).
        """
        fields = [
            ("Host", self.host_header),
            ("Accept-Encoding", "gzip, deflate"),
            ("Connection", "keep-alive"),
            *headers,
        ]
        if any(name.lower() in ("content-length", "transfer-encoding") for name, _ in fields):
            raise ValueError("the body's framing is the client's to set")
        try:
            request = h11.Request(method="POST", target=self.target, headers=fields)
        except h11.LocalProtocolError as exc:
            raise ValueError(f"invalid request header: {exc}") from None
        return h11.Connection(h11.CLIENT).send(request)[:-2]  # without the blank line

    async def post(self, content: bytes, head: bytes) -> Response:
        """POST ``content`` after ``head`` (from :meth:`request_head`, maybe followed by
        :func:`header_fields`); returns the whole response.

        Raises:
            HTTPTimeout: connecting or a wait for data took longer than ``timeout_s``.
            HTTPConnectionError: the connection failed or broke, or the reply was not HTTP.
            HTTPResponseTooLarge: the body, received or decoded, is over ``max_body_bytes``.
        """
        if self._closed:
            raise HTTPConnectionError("the client is closed")
        loop = asyncio.get_running_loop()
        conn = self._idle_connection(loop) or await self._connect(loop)
        try:
            response = await self._exchange(conn, loop, content, head)
        except BaseException:
            conn.close()
            raise
        h = conn.h11
        if (
            h.our_state is h11.DONE
            and h.their_state is h11.DONE
            and not self._closed
            and len(self._idle) < self.max_idle
            and conn.reusable(loop)
        ):
            h.start_next_cycle()
            conn.idle_since = loop.time()
            self._idle.append(conn)
        else:
            conn.close()
        return response

    def _idle_connection(self, loop: asyncio.AbstractEventLoop) -> _Connection | None:
        now = loop.time()
        while self._idle:
            conn = self._idle.pop()  # the most recently used: the least likely to be closed
            if conn.reusable(loop) and now - conn.idle_since < self.keepalive_expiry_s:
                return conn
            conn.close()
        return None

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Connection:
        try:
            async with asyncio.timeout(self.timeout_s):
                _, conn = await loop.create_connection(
                    lambda: _Connection(loop), self.host, self.port
                )
        except TimeoutError:
            raise HTTPTimeout(f"connecting to {self.host_header} timed out") from None
        except OSError as exc:
            raise HTTPConnectionError(f"cannot connect to {self.host_header}: {exc}") from exc
        return conn

    async def _exchange(
        self,
        conn: _Connection,
        loop: asyncio.AbstractEventLoop,
        content: bytes,
        head: bytes,
    ) -> Response:
        h = conn.h11
        conn.busy = True
        try:
            # h11 follows the exchange from the fields that frame it (the head's other fields,
            # checked once by request_head, do not change how the request or response is framed)
            length = str(len(content))
            framing = [("Host", self.host_header), ("Content-Length", length)]
            h.send(h11.Request(method="POST", target=self.target, headers=framing))
            h.send(h11.Data(data=content))
            h.send(h11.EndOfMessage())
            conn.transport.write(
                b"".join((head, b"Content-Length: ", length.encode(), b"\r\n\r\n", content))
            )
            status = 0
            response_headers: dict[str, str] = {}
            chunks: list[bytes] = []
            size = 0
            limit = self.max_body_bytes
            timeout = self.timeout_s
            while True:
                event = h.next_event()
                if event is h11.NEED_DATA:
                    if conn.lost:
                        raise HTTPConnectionError("the connection was lost")
                    conn.waiter = waiter = loop.create_future()
                    try:
                        async with asyncio.timeout(timeout):
                            await waiter
                    except TimeoutError:
                        raise HTTPTimeout("no response in time") from None
                    finally:
                        conn.waiter = None
                    continue
                kind = type(event)
                if kind is h11.Data:
                    size += len(event.data)
                    if size > limit:  # stop reading: the caller drops the connection
                        raise self._too_large(f"over {limit} bytes")
                    chunks.append(event.data)
                elif kind is h11.Response:
                    status = event.status_code
                    for name, value in event.headers:
                        key = name.decode("latin-1")
                        text = value.decode("latin-1")
                        seen = response_headers.get(key)
                        response_headers[key] = text if seen is None else f"{seen}, {text}"
                    declared = response_headers.get("content-length", "")
                    if declared.isdigit() and int(declared) > limit:
                        raise self._too_large(f"declared as {declared} bytes")
                elif kind is h11.EndOfMessage:
                    break
                elif kind is h11.ConnectionClosed:
                    raise HTTPConnectionError("the server closed the connection early")
                # InformationalResponse (1xx): wait for the final response
        except h11.ProtocolError as exc:
            raise HTTPConnectionError(f"invalid HTTP from {self.host_header}: {exc}") from None
        finally:
            conn.busy = False
        body = b"".join(chunks)
        encoding = response_headers.get("content-encoding", "").strip().lower()
        if encoding in ("gzip", "deflate") and body:
            body = _decode(body, encoding, limit)
        return Response(status, response_headers, body)

    def _too_large(self, what: str) -> HTTPResponseTooLarge:
        return HTTPResponseTooLarge(
            f"the response body from {self.host_header} is {what}, more than the limit of "
            f"{self.max_body_bytes} bytes"
        )

    async def aclose(self) -> None:
        """Close the idle connections; those in use close when their exchange ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _decode(body: bytes, encoding: str, limit: int) -> bytes:
    """A ``gzip`` or ``deflate`` body decoded to at most ``limit`` bytes (``deflate``:
    zlib-wrapped or raw, as ``httpx`` accepts both).

    Raises:
        HTTPResponseTooLarge: it decodes to more than ``limit`` bytes (decoding stops there).
        HTTPConnectionError: it is not valid or not whole.
    """
    try:
        if encoding == "gzip":
            return _inflate(body, 16 + zlib.MAX_WBITS, limit)
        try:
            return _inflate(body, zlib.MAX_WBITS, limit)
        except zlib.error:
            return _inflate(body, -zlib.MAX_WBITS, limit)
    except zlib.error as exc:
        raise HTTPConnectionError(f"undecodable {encoding} body: {exc}") from None


def _inflate(body: bytes, wbits: int, limit: int) -> bytes:
    # max_length bounds the output, so a small bomb never expands past limit + 1 bytes
    decoder = zlib.decompressobj(wbits)
    out = decoder.decompress(body, limit + 1)
    if len(out) > limit:
        raise HTTPResponseTooLarge(
            f"the response body decodes to more than the limit of {limit} bytes"
        )
    if not decoder.eof:
        raise zlib.error("incomplete or truncated stream")
    return out
