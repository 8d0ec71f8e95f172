"""How uvicorn serves the gateway: the connection limit and the read timeouts.

uvicorn bounds idle kept-alive connections (``timeout_keep_alive``), the number of connections
(``limit_concurrency``) and the size of a request's head (h11's ``max_incomplete_event_size``),
but not the time a client may take to send a request: a connection that opens and sends
nothing, or half a request line, or half its headers, is held for ever, and enough of them
exhaust the connection limit. :func:`read_timeout_protocol` adds that bound to uvicorn's h11
protocol:

* **headers** (``header_timeout_s``): counted from the connection's opening, or on a kept-alive
  connection from the first byte of the next request, until the request's headers are in. Past
  it, a connection that sent part of a request gets a 408 and is closed; one that sent nothing is
  closed.
* **body** (``body_timeout_s``): while the app reads a body, the app bounds the read
  (:func:`conductor_core.serve.request_body.read_body`: 408, connection closed). After the app has
  answered without reading the whole body (a 401, 404 or 413), the client gets that long to
  finish sending it, then the connection is closed.

The protocol class is always h11 (the pure-Python parser, which uvicorn uses when httptools is
absent), so the limits do not depend on which optional packages are installed.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any

from conductor_core.errors import require
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.protocol import error_body

__all__ = ["read_timeout_protocol", "uvicorn_options"]


def _timeout_response(seconds: float) -> bytes:
    """A raw HTTP/1.1 408 with an OpenAI error body; written outside h11, whose state machine
    cannot answer a request it has not parsed yet."""
    body = json.dumps(
        error_body(
            f"the request did not arrive within {seconds:g}s",
            "invalid_request_error",
            code="request_read_timeout",
        )
    ).encode()
    head = (
        "HTTP/1.1 408 Request Timeout\r\n"
        "content-type: application/json\r\n"
        "connection: close\r\n"
        f"content-length: {len(body)}\r\n\r\n"
    ).encode("ascii")
    return head + body


def read_timeout_protocol(
    header_timeout_s: float,
    body_timeout_s: float,
    on_timeout: Callable[[str], None] | None = None,
) -> type[asyncio.Protocol]:
    """uvicorn's h11 protocol with the read timeouts of this module's description.

    Args:
        header_timeout_s: time to send a request's headers.
        body_timeout_s: time to finish sending a body the app answered without reading it all.
        on_timeout: called with the phase (``headers`` or ``body``) of each connection closed
            for being too slow (for metrics).

    Returns:
        A protocol class for ``uvicorn.Config(http=...)``.
    """
    require("uvicorn", extra="serve", purpose="the Conductor gateway")
    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class ReadTimeoutH11Protocol(H11Protocol):
        """H11Protocol whose connections may not take longer than the read timeouts to send a
        request (see the module's description)."""

        _read_timer: asyncio.TimerHandle | None = None
        _read_phase: str | None = None

        def _wanted_phase(self) -> str | None:
            """The read deadline this connection is under now, if any."""
            if self.transport.is_closing():
                return None
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete:
                return None  # the app has the request (it bounds its own body read)
            if self.conn.their_state is h11.SEND_BODY:
                return "body"  # answered early; the client is still sending the body
            if cycle is None or self.conn.trailing_data[0]:
                return "headers"  # a fresh connection, or part of the next request is in
            return None  # idle between requests: uvicorn's keep-alive timeout applies

        def _update_read_timer(self) -> None:
            phase = self._wanted_phase()
            if phase == self._read_phase:
                return  # a deadline runs from the start of its phase, not from the last byte
            self._cancel_read_timer()
            if phase is not None:
                delay = header_timeout_s if phase == "headers" else body_timeout_s
                self._read_phase = phase
                self._read_timer = self.loop.call_later(delay, self._read_timed_out)

        def _cancel_read_timer(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
            self._read_timer = None
            self._read_phase = None

        def _read_timed_out(self) -> None:
            phase = self._read_phase
            self._read_timer = None
            self._read_phase = None
            if phase is None or self._wanted_phase() != phase:
                return
            if phase == "headers" and self.conn.trailing_data[0]:
                self.transport.write(_timeout_response(header_timeout_s))
            self.transport.close()
            if on_timeout is not None:
                on_timeout(phase)

        def connection_made(self, transport: Any) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._update_read_timer()

        def connection_lost(self, exc: Exception | None) -> None:
            self._cancel_read_timer()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._update_read_timer()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._update_read_timer()

    return ReadTimeoutH11Protocol


def uvicorn_options(config: GatewayConfig, metrics: Any = None) -> dict[str, Any]:
    """Keyword arguments of ``uvicorn.run``/``uvicorn.Config`` that serve the gateway under
    ``config``'s connection limit and read timeouts, taking the client's address from
    ``X-Forwarded-For`` only from ``config.forwarded_allow_ips`` (``metrics``: a
    :class:`~conductor_core.serve.metrics.GatewayMetrics` counting the read timeouts). The
    graceful-shutdown window (``drain_timeout_s``) is the caller's to pass."""

    def count(phase: str) -> None:
        if metrics is not None:
            metrics.read_timeouts.labels(phase=phase).inc()

    return {
        # the client's address from X-Forwarded-For, only when the peer is a trusted proxy
        "proxy_headers": True,
        "forwarded_allow_ips": list(config.forwarded_allow_ips),
        "http": read_timeout_protocol(config.header_timeout_s, config.body_timeout_s, count),
        "timeout_keep_alive": config.keep_alive_timeout_s,
        "limit_concurrency": config.max_connections,
        "h11_max_incomplete_event_size": config.max_header_bytes,
    }
