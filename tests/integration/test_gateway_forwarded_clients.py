"""The failed-authentication throttle behind a proxy, against a real server on loopback run with
the options ``conductor serve`` uses (:func:`conductor_core.serve.server.uvicorn_options`): the
client's address comes from ``X-Forwarded-For`` only when the peer is a trusted proxy
(``forwarded_allow_ips``), so clients behind one ingress have their own buckets while a client
that is not a proxy cannot pick a fresh address for each guess; a valid key is never throttled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import pytest

from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.server import uvicorn_options
from conductor_core.simulation.server import running_app
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

pytest.importorskip("prometheus_client")

KEY = "sk-forwarded-0123456789"
KEYS_ENV = "CONDUCTOR_FORWARDED_TEST_KEYS"


@contextlib.contextmanager
def gateway(monkeypatch, trusted: list[str]) -> Iterator[str]:
    """Base URL of a gateway (rate limit 1/min, burst 2) trusting ``trusted`` proxies."""
    monkeypatch.setenv(KEYS_ENV, KEY)
    config = GatewayConfig(
        api_keys_env=KEYS_ENV,
        rate_limit_per_minute=1,
        rate_limit_burst=2,
        forwarded_allow_ips=trusted,
    )
    app = create_app(config, pool=load_pool(bundled_pool_path()))
    with running_app(app, lifespan="on", **uvicorn_options(config, app.state.metrics)) as url:
        yield url


def models(url: str, key: str, forwarded_for: str) -> int:
    headers = {"authorization": f"Bearer {key}", "x-forwarded-for": forwarded_for}
    return httpx.get(f"{url}/models", headers=headers, timeout=10).status_code


def test_clients_behind_a_trusted_proxy_have_their_own_failure_buckets(monkeypatch) -> None:
    with gateway(monkeypatch, ["127.0.0.1"]) as url:
        guesser = [models(url, f"sk-guess-{i}", "203.0.113.7") for i in range(3)]
        neighbour_typo = models(url, "sk-typo", "198.51.100.9")
        valid_from_guesser = models(url, KEY, "203.0.113.7")
    assert guesser == [401, 401, 429]
    assert neighbour_typo == 401  # another client of the same ingress: its own bucket
    assert valid_from_guesser == 200  # a valid key is never refused by the failure throttle


def test_an_untrusted_peer_cannot_choose_its_address(monkeypatch) -> None:
    with gateway(monkeypatch, ["10.0.0.1"]) as url:
        # each guess claims another address; the peer (127.0.0.1) is no trusted proxy
        guesses = [models(url, f"sk-guess-{i}", f"203.0.113.{i}") for i in range(3)]
        valid = models(url, KEY, "203.0.113.0")
    assert guesses == [401, 401, 429]
    assert valid == 200
