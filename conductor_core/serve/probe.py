"""One HTTP check of an upstream (the Conductor for readiness, a worker endpoint for health):
``GET <url>`` with its key within a timeout, answered ``ok`` or why not. The checks share one
HTTP client, built on first use and kept until :meth:`Probe.aclose` (building one costs about
20 ms of CPU, its TLS context: a check every few seconds paid that each time)."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import httpx

__all__ = ["Probe"]


class Probe:
    """The upstream checks of one gateway.

    Args:
        timeout_s: the time one check may take.
        transport: the ``httpx`` transport (tests pass a mock; default: the network).
    """

    def __init__(self, timeout_s: float, transport: Any = None) -> None:
        self.timeout_s = timeout_s
        self.transport = transport
        self.http: httpx.AsyncClient | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def client(self) -> httpx.AsyncClient:
        """The HTTP client of the checks: built once per event loop and kept until
        :meth:`aclose`."""
        loop = asyncio.get_running_loop()
        if self.http is None or self._loop is not loop:
            self.http = httpx.AsyncClient(timeout=self.timeout_s, transport=self.transport)
            self._loop = loop
        return self.http

    async def check(self, url: str, key_env: str | None) -> str:
        """``ok`` when ``url`` answers 200 within the timeout, else why not (``HTTP 503``,
        ``unreachable (ConnectError)``, ``timed out (3s)``). The key is the value of the
        variable ``key_env``, sent as a bearer token when set."""
        key = os.environ.get(key_env, "") if key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self.client().get(url, headers=headers)
        except TimeoutError:
            return f"timed out ({self.timeout_s:g}s)"
        except httpx.HTTPError as exc:
            return f"unreachable ({type(exc).__name__})"
        return "ok" if response.status_code == 200 else f"HTTP {response.status_code}"

    async def aclose(self) -> None:
        """Close the HTTP client (a later check builds a new one)."""
        http, self.http = self.http, None
        if http is not None:
            await http.aclose()
