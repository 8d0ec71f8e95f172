"""What a client may read of an upstream's error: no URL and no internal ``host[:port]`` (the
Conductor's, a worker's). The full error goes to the gateway's log; the client gets it with each
URL replaced by ``<url>`` and each internal host by ``<host>``."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["internal_hosts", "redact_errors", "redact_urls"]

_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{}]+")


def redact_urls(text: str, hosts: Iterable[str] = ()) -> str:
    """``text`` without URLs (each replaced by ``<url>``) nor the given ``host[:port]`` names
    (each replaced by ``<host>``): what an upstream error says, fit for a client."""
    text = _URL.sub("<url>", text)
    for host in hosts:
        if host:
            text = text.replace(host, "<host>")
    return text


def _netloc(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return urlsplit(url).netloc or None
    except ValueError:
        return None


def internal_hosts(urls: Iterable[str | None]) -> tuple[str, ...]:
    """The ``host[:port]`` of each upstream URL (None and non-URLs skipped), longest first, so
    that a host is replaced before a shorter one inside it."""
    return tuple(sorted({h for h in map(_netloc, urls) if h}, key=len, reverse=True))


def redact_errors(data: Any, hosts: Iterable[str]) -> Any:
    """A trace dump with every string under an ``error`` key passed through :func:`redact_urls`
    (worker errors may quote an endpoint)."""
    if isinstance(data, dict):
        return {
            k: redact_urls(v, hosts)
            if k == "error" and isinstance(v, str)
            else redact_errors(v, hosts)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [redact_errors(v, hosts) for v in data]
    return data
