"""API keys, per-key rate limits, spend quotas and concurrency limits of the gateway.

Keys come from a file (one per line, for example a mounted Kubernetes Secret) and/or an
environment variable; they are compared in constant time and never logged: logs, metrics and
rate-limit buckets use a short SHA-256 digest of the key (:func:`key_id`) instead.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from conductor_core.errors import ConfigError
from conductor_core.serve.config import API_KEYS_FILE_ENV, GatewayConfig
from conductor_core.serve.protocol import RequestError


def key_id(key: str) -> str:
    """A short, non-reversible id of ``key`` for logs and metrics (``key-`` + 8 hex digits)."""
    return "key-" + hashlib.sha256(key.encode("utf-8")).hexdigest()[:8]


def _split_keys(text: str, *, commas: bool) -> list[str]:
    """The keys of ``text``: one per line ('#' comments and blank lines left out), and with
    ``commas`` also split on commas (the variable's form; a file's line is one key whole, so a
    key holding a comma never becomes two shorter keys)."""
    keys = []
    for line in (text.replace(",", "\n") if commas else text).splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keys.append(line)
    return keys


def load_api_keys(
    config: GatewayConfig, environ: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """The API keys: those of ``config.api_keys_file`` (else of the file named by
    ``$CONDUCTOR_API_KEYS_FILE``) plus those of the variable named by ``config.api_keys_env``.

    Raises:
        ConfigError: a keys file is named but missing, unreadable or holds no key (an operator
            who configures a file means to require keys: the gateway must not start open).
    """
    env = os.environ if environ is None else environ
    keys: list[str] = []
    path = config.api_keys_file or env.get(API_KEYS_FILE_ENV) or None
    if path:
        what = "api_keys_file" if config.api_keys_file else API_KEYS_FILE_ENV
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"{what}: cannot read the API keys file {path} ({exc.strerror or exc}); "
                f"mount it or fix the path"
            ) from None
        from_file = _split_keys(text, commas=False)
        if not from_file:
            raise ConfigError(
                f"{what}: the API keys file {path} holds no key; write one key per line"
            )
        keys += from_file
    keys += _split_keys(env.get(config.api_keys_env, ""), commas=True)
    return tuple(dict.fromkeys(keys))


@dataclass(frozen=True)
class ApiKeyAuth:
    """Bearer-token check against a fixed set of keys; no keys = open."""

    keys: tuple[str, ...] = ()

    @property
    def enabled(self) -> bool:
        """True when at least one key is configured."""
        return bool(self.keys)

    def authenticate(self, authorization: str | None) -> str | None:
        """The caller's :func:`key_id` (None when open).

        Every configured key is compared (in constant time) whatever matches, so the time taken
        does not reveal which key or how much of it matched.

        Raises:
            RequestError: 401 when keys are configured and the header is missing or wrong.
        """
        if not self.keys:
            return None
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise RequestError(
                401,
                "missing API key: send it as 'Authorization: Bearer <key>'",
                "authentication_error",
                code="invalid_api_key",
            )
        given = token.strip().encode("utf-8")
        matched = None
        for key in self.keys:
            if hmac.compare_digest(given, key.encode("utf-8")):
                matched = key
        if matched is None:
            raise RequestError(
                401, "invalid API key", "authentication_error", code="invalid_api_key"
            )
        return key_id(matched)


class TokenBucketLimiter:
    """Per-caller token buckets: ``burst`` requests at once, refilled at ``per_minute`` a minute.

    At most ``max_callers`` buckets are kept (least recently used dropped), so a flood of new
    client addresses cannot grow memory without bound.
    """

    def __init__(
        self,
        per_minute: float,
        burst: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_callers: int = 10_000,
    ) -> None:
        if per_minute <= 0 or burst < 1:
            raise ValueError("per_minute must be > 0 and burst >= 1")
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._clock = clock
        self._max = max_callers
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def acquire(self, caller: str) -> None:
        """Take one token for ``caller``.

        Raises:
            RequestError: 429 with ``Retry-After`` (whole seconds) when the bucket is empty.
        """
        self._take(caller, 1.0)

    def _take(self, caller: str, cost: float) -> None:
        now = self._clock()
        tokens, last = self._buckets.pop(caller, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens < 1.0:
            self._buckets[caller] = (tokens, now)
            wait = (1.0 - tokens) / self.rate
            raise RequestError(
                429,
                f"rate limit exceeded: at most {self.rate * 60:g} requests per minute "
                f"(burst {self.burst:g}); retry after {wait:.1f}s",
                "rate_limit_error",
                code="rate_limit_exceeded",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        self._buckets[caller] = (tokens - cost, now)
        while len(self._buckets) > self._max:
            self._buckets.popitem(last=False)


class SpendQuota:
    """Dollars each caller may spend per period: ``limit`` per ``period_s`` seconds, periods
    starting at multiples of ``period_s`` since the Unix epoch (86400: each UTC day).

    :meth:`check` refuses a caller who has spent its quota; :meth:`charge` adds a finished
    request's cost. A request is charged only when it ends (its cost is known only then), so the
    requests of a caller in flight together may overshoot the quota by their own costs. At most
    ``max_callers`` callers are kept (least recently charged dropped), as in
    :class:`TokenBucketLimiter`.
    """

    def __init__(
        self,
        limit: float,
        period_s: float,
        *,
        clock: Callable[[], float] = time.time,
        max_callers: int = 10_000,
    ) -> None:
        if not (limit > 0 and period_s > 0):
            raise ValueError("limit and period_s must be > 0")
        self.limit = limit
        self.period_s = period_s
        self._clock = clock
        self._max = max_callers
        self._spent: OrderedDict[str, tuple[int, float]] = OrderedDict()  # period index, dollars

    def spent(self, caller: str) -> float:
        """Dollars ``caller`` has spent in the current period."""
        period, dollars = self._spent.get(caller, (-1, 0.0))
        return dollars if period == self._period() else 0.0

    def check(self, caller: str) -> None:
        """Admit a request of ``caller`` unless it has spent its quota.

        Raises:
            RequestError: 429 ``insufficient_quota`` naming the quota, with ``Retry-After`` (the
                seconds until the period ends) and ``x-should-retry: false`` (an SDK's quick
                retries cannot succeed).
        """
        spent = self.spent(caller)
        if spent < self.limit:
            return
        now = self._clock()
        wait = max(1, math.ceil((self._period() + 1) * self.period_s - now))
        raise RequestError(
            429,
            f"spend quota exceeded: this API key (or client) has spent ${spent:.4f} of its "
            f"${self.limit:g} per {self.period_s:g}s (spend_quota); it resets in {wait}s",
            "insufficient_quota",
            code="spend_quota_exceeded",
            headers={"Retry-After": str(wait)},
            retryable=False,
        )

    def charge(self, caller: str, dollars: float) -> None:
        """Add ``dollars`` to what ``caller`` has spent in the current period."""
        period = self._period()  # read once: a period boundary between two reads would carry
        # the old period's dollars into the new one
        was, spent = self._spent.pop(caller, (period, 0.0))
        self._spent[caller] = (period, (spent if was == period else 0.0) + max(0.0, dollars))
        while len(self._spent) > self._max:
            self._spent.popitem(last=False)

    def _period(self) -> int:
        return int(self._clock() // self.period_s)


class ConcurrencySlot:
    """One request admitted by a :class:`ConcurrencyLimiter`; :meth:`release` (idempotent) frees
    it. Also a context manager that releases on exit."""

    def __init__(self, limiter: ConcurrencyLimiter, caller: str) -> None:
        self._limiter = limiter
        self._caller = caller
        self._held = True

    def release(self) -> None:
        """Free the slot (a second call does nothing)."""
        if self._held:
            self._held = False
            self._limiter._release(self._caller)

    def __enter__(self) -> ConcurrencySlot:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class ConcurrencyLimiter:
    """Requests in flight: at most ``max_total`` in all and ``max_per_caller`` per caller (API
    key, or client address when open); None: no such limit.

    Admission never waits: a request over a limit is answered 429 at once with ``Retry-After``,
    so a flood is turned away cheaply instead of queueing work the server cannot do. Runs on the
    event loop's thread only (no await between the check and the count).
    """

    def __init__(
        self, max_total: int | None, max_per_caller: int | None, *, retry_after_s: int = 1
    ) -> None:
        if (max_total is not None and max_total < 1) or (
            max_per_caller is not None and max_per_caller < 1
        ):
            raise ValueError("max_total and max_per_caller must be >= 1 (or None)")
        self.max_total = max_total
        self.max_per_caller = max_per_caller
        self.retry_after_s = retry_after_s
        self.total = 0
        self._per_caller: dict[str, int] = {}

    def acquire(self, caller: str) -> ConcurrencySlot:
        """Admit one request of ``caller``; release the returned slot when it is answered.

        Raises:
            RequestError: 429 ``rate_limit_error`` with ``Retry-After`` when the server or the
                caller is at its limit.
        """
        mine = self._per_caller.get(caller, 0)
        if self.max_total is not None and self.total >= self.max_total:
            self._refuse(f"the server is answering its limit of {self.max_total} requests")
        if self.max_per_caller is not None and mine >= self.max_per_caller:
            self._refuse(
                f"this API key (or client) already has {self.max_per_caller} requests in "
                "flight, its limit"
            )
        self.total += 1
        self._per_caller[caller] = mine + 1
        return ConcurrencySlot(self, caller)

    def in_flight(self, caller: str) -> int:
        """Requests of ``caller`` in flight now."""
        return self._per_caller.get(caller, 0)

    def _refuse(self, why: str) -> None:
        raise RequestError(
            429,
            f"too many concurrent requests: {why}; retry after {self.retry_after_s}s",
            "rate_limit_error",
            code="concurrency_limit_exceeded",
            headers={"Retry-After": str(self.retry_after_s)},
        )

    def _release(self, caller: str) -> None:
        self.total -= 1
        left = self._per_caller.get(caller, 0) - 1
        if left > 0:
            self._per_caller[caller] = left
        else:  # forget idle callers: the table holds only those in flight
            self._per_caller.pop(caller, None)
