"""The gateway's outermost layer, a pure ASGI middleware: every request gets an id (the client's
``X-Request-ID`` when it is sane, else a fresh one, echoed on the response), is timed, counted
in the request metrics and logged once (without keys or bodies), and anything unhandled becomes
an OpenAI-format 500 naming the request id."""

from __future__ import annotations

import json
import logging
import time
import uuid
from typing import Any

from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.serve.protocol import SANE_REQUEST_ID, error_body

__all__ = ["REQUEST_ID_HEADER", "RequestContextMiddleware"]

logger = logging.getLogger("conductor.gateway")
access_logger = logging.getLogger("conductor.gateway.access")

REQUEST_ID_HEADER = "x-request-id"
_ROUTES = frozenset(
    {
        "/v1/chat/completions",
        "/v1/responses",
        "/v1/completions",
        "/v1/models",
        "/healthz",
        "/readyz",
        "/metrics",
    }
)
"""The paths counted under their own name in the request metrics (every route the gateway
serves); any other is ``other``, so that a client cannot create series at will."""
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
"""The HTTP methods counted under their own name; any other is counted as ``other``, so that a
client cannot create metric series (or log fields) at will."""


class RequestContextMiddleware:
    """Pure ASGI middleware: request id (echoed as ``X-Request-ID``), timing, the access log
    line, request metrics, and an OpenAI-format 500 for anything unhandled."""

    def __init__(self, app: Any, metrics: GatewayMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = ""
        for name, value in scope.get("headers", []):
            if name == b"x-request-id":
                given = value.decode("latin-1")
                break
        request_id = given if SANE_REQUEST_ID.match(given) else uuid.uuid4().hex
        start = time.perf_counter()
        scope.setdefault("state", {}).update(request_id=request_id, received_at=start)
        status = 500
        started = False

        async def send_wrapped(message: dict[str, Any]) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", request_id.encode("latin-1")))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_wrapped)
        except Exception:
            logger.exception("unhandled error", extra={"request_id": request_id})
            if not started:
                body = json.dumps(
                    error_body(
                        f"internal server error (request id {request_id})",
                        "server_error",
                        code="internal_error",
                    )
                ).encode()
                await send_wrapped(
                    {
                        "type": "http.response.start",
                        "status": 500,
                        "headers": [(b"content-type", b"application/json")],
                    }
                )
                await send({"type": "http.response.body", "body": body})
        finally:
            seconds = time.perf_counter() - start
            path = scope.get("path", "")
            route = path if path in _ROUTES else "other"
            method = scope.get("method", "")
            method = method if method in _METHODS else "other"
            self.metrics.observe_request(route, method, status, seconds)
            state = scope.get("state", {})
            client = scope.get("client")
            access_logger.info(
                "%s %s %d",
                method,
                route,
                status,
                extra={
                    "request_id": request_id,
                    "method": method,
                    "route": route,
                    "status": status,
                    "duration_ms": round(seconds * 1000, 2),
                    "key_id": state.get("key_id"),
                    "client": client[0] if client else None,
                },
            )
