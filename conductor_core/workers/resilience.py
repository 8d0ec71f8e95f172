"""Resilience primitives of the worker pool: backoff with full jitter, Retry-After parsing, and a
per-worker circuit breaker.

All of them take time as plain floats from an injected clock, so tests drive them without sleeping.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from email.utils import parsedate_to_datetime
from enum import StrEnum


def backoff_delay(
    attempt: int,
    *,
    base_s: float,
    max_s: float,
    rng: random.Random | None = None,
) -> float:
    """Delay before retry number ``attempt`` (0-based): full jitter, uniform in [0, cap].

    ``cap = min(max_s, base_s * 2**attempt)``. Full jitter spreads retries of many concurrent
    callers that failed together (the AWS "exponential backoff and jitter" scheme).
    """
    if attempt < 0:
        raise ValueError(f"attempt must be >= 0, got {attempt}")
    cap = min(max_s, base_s * (2.0 ** min(attempt, 62)))
    if cap <= 0:
        return 0.0
    return (rng or random).uniform(0.0, cap)


def retry_delay(
    attempt: int,
    retry_after: float | None,
    *,
    base_s: float,
    max_s: float,
    rng: random.Random | None = None,
) -> float:
    """Delay before a retry: the jittered backoff, but never less than the server's Retry-After."""
    delay = backoff_delay(attempt, base_s=base_s, max_s=max_s, rng=rng)
    if retry_after is not None and retry_after > 0:
        delay = max(delay, retry_after)
    return delay


def parse_retry_after(
    headers: Mapping[str, str] | None, *, now: Callable[[], float] | None = None
) -> float | None:
    """Seconds to wait according to response headers, or ``None`` when absent or unparsable.

    Reads ``retry-after-ms`` (milliseconds, sent by OpenAI and Anthropic), then ``retry-after`` as
    either delta-seconds or an HTTP date. ``now`` (epoch seconds) is injectable for tests.
    """
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
            if value >= 0:
                return value
        except ValueError:
            pass
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        value = float(raw)
        return value if value >= 0 else None
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    import time

    current = now() if now is not None else time.time()
    return max(0.0, when.timestamp() - current)


class CircuitState(StrEnum):
    """States of a circuit breaker."""

    CLOSED = "closed"
    OPEN = "open"
    HALF_OPEN = "half_open"


class CircuitBreaker:
    """Consecutive-failure circuit breaker for one worker.

    * closed: calls pass; ``failure_threshold`` consecutive final failures open the circuit.
    * open: calls are refused until ``reset_s`` has passed since it opened.
    * half-open: exactly one trial call is let through; its success closes the circuit, its
      failure re-opens it for another ``reset_s``. Other calls are refused meanwhile.

    Not thread-safe by design: it is used from one event loop, where its methods never await.
    """

    def __init__(self, failure_threshold: int, reset_s: float, clock: Callable[[], float]) -> None:
        if failure_threshold < 1:
            raise ValueError(f"failure_threshold must be >= 1, got {failure_threshold}")
        self.failure_threshold = failure_threshold
        self.reset_s = reset_s
        self._clock = clock
        self._state = CircuitState.CLOSED
        self._failures = 0
        self._opened_at = 0.0
        self._trial_in_flight = False
        self.times_opened = 0

    @property
    def state(self) -> CircuitState:
        """Current state (an open circuit whose reset time has passed reports half-open)."""
        if self._state is CircuitState.OPEN and self._clock() - self._opened_at >= self.reset_s:
            return CircuitState.HALF_OPEN
        return self._state

    @property
    def consecutive_failures(self) -> int:
        """Final failures since the last success."""
        return self._failures

    def retry_in(self) -> float:
        """Seconds until an open circuit lets a trial call through (0 when not open)."""
        if self._state is not CircuitState.OPEN:
            return 0.0
        return max(0.0, self.reset_s - (self._clock() - self._opened_at))

    def try_acquire(self) -> bool:
        """Ask to make a call. False means fail fast. A True in half-open state is the trial."""
        state = self.state
        if state is CircuitState.CLOSED:
            return True
        if state is CircuitState.OPEN:
            return False
        if self._trial_in_flight:
            return False
        self._state = CircuitState.HALF_OPEN
        self._trial_in_flight = True
        return True

    def record_success(self) -> None:
        """The call succeeded: close the circuit and reset the failure count."""
        self._failures = 0
        self._trial_in_flight = False
        self._state = CircuitState.CLOSED

    def record_failure(self) -> None:
        """The call failed for good (after its retries)."""
        self._failures += 1
        was_trial = self._trial_in_flight
        self._trial_in_flight = False
        tripped = self._state is CircuitState.CLOSED and self._failures >= self.failure_threshold
        if was_trial or tripped:
            self._open()

    def record_neutral(self) -> None:
        """The call ended without telling anything about the worker's health (cancelled, the
        caller's deadline, a rejected request): free the trial slot, keep the counts."""
        if self._trial_in_flight:
            self._trial_in_flight = False
            # Let the next caller run a trial at once.
            self._state = CircuitState.OPEN
            self._opened_at = self._clock() - self.reset_s

    def _open(self) -> None:
        self._state = CircuitState.OPEN
        self._opened_at = self._clock()
        self.times_opened += 1
