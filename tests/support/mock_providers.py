"""Providers over mocked HTTP (``httpx.MockTransport``) for the provider tests
(``tests/unit/test_providers.py``, ``tests/integration/test_providers.py``): a scripted server
that records requests, and one completion or one error from a provider."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import httpx
import pytest

from conductor_core.workers.types import ProviderError

SECRET = "sk-test-SUPERSECRET-0123456789abcdef"


def key_without_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    """``TEST_OPENAI_KEY`` set to :data:`SECRET` and no ``*_proxy`` variable (a proxy would take
    plain http calls off the small HTTP/1.1 client)."""
    monkeypatch.setenv("TEST_OPENAI_KEY", SECRET)
    for name in list(os.environ):
        if name.lower().endswith("_proxy"):
            monkeypatch.delenv(name)


MSG = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]


class Server:
    """A scripted mock HTTP server recording requests."""

    def __init__(self, *responses: Any) -> None:
        self.responses = list(responses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        item = self.responses[min(len(self.requests), len(self.responses)) - 1]
        if isinstance(item, Exception):
            raise item
        return item

    def client(self, http: Any = httpx) -> Any:
        """An async client of ``http`` (``httpx``, or ``httpx2`` for SDKs that require it)."""
        return http.AsyncClient(transport=http.MockTransport(self))

    def body(self, i: int = -1) -> dict[str, Any]:
        return json.loads(self.requests[i].content)


def complete(provider: Any, messages=MSG) -> Any:
    async def main():
        try:
            return await provider.complete(messages)
        finally:
            await provider.aclose()

    return asyncio.run(main())


def call_error(provider: Any) -> ProviderError:
    with pytest.raises(ProviderError) as info:
        complete(provider)
    return info.value
