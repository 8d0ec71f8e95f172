"""A request body read as hostile input allows: at most ``limit`` bytes (the declared length
checked before reading), within a time limit, and a client that leaves half-way told apart."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from conductor_core.serve.protocol import RequestError

__all__ = ["read_body"]


async def read_body(
    request: Any,
    limit: int,
    timeout_s: float | None = None,
    on_timeout: Callable[[], None] | None = None,
) -> bytes:
    """The request body, read up to ``limit`` bytes within ``timeout_s`` seconds (None: no
    time limit; ``on_timeout`` is called when it runs out).

    Raises:
        RequestError: 413 when the declared or actual body is larger than ``limit``; 408
            ``request_read_timeout`` (with ``Connection: close``, so that the server drops the
            connection) when the body did not arrive in time; 499 ``client_disconnected`` when
            the client went away before sending it all.
    """
    # starlette comes with the `serve` extra: imported when a body is read, so that this module
    # (and conductor_core.serve.app, which re-exports it) imports without it
    from starlette.requests import ClientDisconnect

    too_large = RequestError(
        413,
        f"request body too large: the limit is {limit} bytes",
        code="request_too_large",
    )
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise too_large
        except ValueError:
            raise RequestError(400, "invalid Content-Length header") from None
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise too_large
                chunks.append(chunk)
    except TimeoutError:
        if on_timeout is not None:
            on_timeout()
        raise RequestError(
            408,
            f"the request body did not arrive within {timeout_s:g}s",
            code="request_read_timeout",
            headers={"Connection": "close"},
        ) from None
    except ClientDisconnect:
        raise RequestError(
            499,
            "the client closed the connection while sending the body",
            code="client_disconnected",
        ) from None
    return b"".join(chunks)
