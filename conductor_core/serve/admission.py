"""Who may call the gateway, and how much: the API key, then the caller's rate limit and spend
quota (:meth:`Gatekeeper.admit`), and the concurrency limits of the chat routes
(:attr:`Gatekeeper.concurrency`), all built from one :class:`GatewayConfig`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conductor_core.serve.auth import (
    ApiKeyAuth,
    ConcurrencyLimiter,
    SpendQuota,
    TokenBucketLimiter,
    load_api_keys,
)
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.protocol import RequestError

__all__ = ["Gatekeeper"]


@dataclass
class Gatekeeper:
    """The admission checks of one gateway.

    Attributes:
        auth: the API keys (none: an open gateway).
        limiter: each caller's rate limit (None: none).
        failures: the rate limit of failed authentications, per client address (None: none).
        quota: each caller's spend quota (None: none).
        concurrency: the requests in flight, in all and per caller.
    """

    auth: ApiKeyAuth
    limiter: TokenBucketLimiter | None
    failures: TokenBucketLimiter | None
    quota: SpendQuota | None
    concurrency: ConcurrencyLimiter

    @classmethod
    def from_config(cls, config: GatewayConfig) -> Gatekeeper:
        """The checks ``config`` asks for. Reads the API keys (a missing keys file raises
        :class:`~conductor_core.errors.ConfigError`)."""
        limiter = failures = None
        if config.rate_limit_per_minute:
            limiter = TokenBucketLimiter(config.rate_limit_per_minute, config.rate_limit_burst)
            # failed authentications, per client address: guessing keys costs the same as calling
            failures = TokenBucketLimiter(config.rate_limit_per_minute, config.rate_limit_burst)
        quota = None
        if config.spend_quota is not None:
            quota = SpendQuota(config.spend_quota, config.spend_quota_period_s)
        concurrency = ConcurrencyLimiter(
            config.max_concurrent_requests, config.max_concurrent_requests_per_key
        )
        return cls(ApiKeyAuth(load_api_keys(config)), limiter, failures, quota, concurrency)

    @property
    def rate_limited(self) -> bool:
        """Whether a caller can be refused a 429 on any route (a rate limit or a quota)."""
        return self.limiter is not None or self.quota is not None

    @property
    def concurrency_limited(self) -> bool:
        """Whether a chat request can be refused a 429 for the requests in flight."""
        c = self.concurrency
        return c.max_total is not None or c.max_per_caller is not None

    def admit(self, request: Any) -> str:
        """The caller of ``request`` (the key id, or the client address when the gateway is
        open), once its key, rate limit and spend quota let it in.

        The key is checked first and only failures are throttled: with a rate limit, each
        failed authentication spends a bucket of the client address, whose empty bucket turns
        the 401 into a 429. A valid key is never refused by it, so a client behind the same
        address (an ingress, a NAT) sending bad keys cannot lock out the others. The address is
        the peer's, or X-Forwarded-For's when the peer is a trusted proxy
        (``config.forwarded_allow_ips``, applied by uvicorn). Sets ``request.state.key_id``.

        Raises:
            RequestError: 401 without a valid key, 429 when a limit is spent.
        """
        address = request.client.host if request.client else "unknown"
        try:
            key = self.auth.authenticate(request.headers.get("authorization"))
        except RequestError:
            if self.failures is not None:
                self.failures.acquire(address)  # 429 once the address has spent its bucket
            raise
        request.state.key_id = key
        caller = key or address
        if self.limiter is not None:
            self.limiter.acquire(caller)
        if self.quota is not None:
            self.quota.check(caller)
        return caller
