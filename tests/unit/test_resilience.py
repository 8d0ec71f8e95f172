"""Backoff, Retry-After parsing and the circuit breaker, driven by a fake clock."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from conductor_core.workers.resilience import (
    CircuitBreaker,
    CircuitState,
    backoff_delay,
    parse_retry_after,
    retry_delay,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_backoff_full_jitter_stays_within_exponential_cap() -> None:
    rng = random.Random(1)
    for attempt in range(8):
        cap = min(5.0, 0.5 * 2**attempt)
        delays = [backoff_delay(attempt, base_s=0.5, max_s=5.0, rng=rng) for _ in range(200)]
        assert all(0.0 <= d <= cap for d in delays)
        # full jitter: spread over the whole interval, not clustered at the cap
        assert min(delays) < cap * 0.2
        assert max(delays) > cap * 0.8


def test_backoff_zero_base_and_bad_attempt() -> None:
    assert backoff_delay(3, base_s=0.0, max_s=10.0) == 0.0
    with pytest.raises(ValueError, match="attempt"):
        backoff_delay(-1, base_s=1.0, max_s=1.0)


def test_retry_delay_honours_retry_after() -> None:
    rng = random.Random(0)
    assert retry_delay(0, 7.0, base_s=0.5, max_s=1.0, rng=rng) == 7.0
    small = retry_delay(5, 0.01, base_s=1.0, max_s=1.0, rng=random.Random(3))
    assert small == backoff_delay(5, base_s=1.0, max_s=1.0, rng=random.Random(3))


def test_parse_retry_after_forms() -> None:
    assert parse_retry_after({"Retry-After": "12"}) == 12.0
    assert parse_retry_after({"retry-after": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "-3"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after(None) is None
    when = datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC)
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    assert parse_retry_after(
        {"Retry-After": format_datetime(when, usegmt=True)}, now=lambda: now
    ) == pytest.approx(30.0)
    past = datetime(2000, 1, 1, tzinfo=UTC)
    assert parse_retry_after({"Retry-After": format_datetime(past, usegmt=True)}) == 0.0


def test_circuit_opens_after_threshold_then_half_opens_and_closes() -> None:
    clock = FakeClock()
    cb = CircuitBreaker(failure_threshold=3, reset_s=10.0, clock=clock)
    for _ in range(2):
        assert cb.try_acquire()
        cb.record_failure()
    assert cb.state is CircuitState.CLOSED
    assert cb.try_acquire()
    cb.record_failure()
    assert cb.state is CircuitState.OPEN
    assert not cb.try_acquire()
    assert cb.retry_in() == pytest.approx(10.0)
    clock.now = 9.9
    assert not cb.try_acquire()
    clock.now = 10.0
    assert cb.state is CircuitState.HALF_OPEN
    assert cb.try_acquire()  # the one trial
    assert not cb.try_acquire()  # others refused while the trial runs
    cb.record_success()
    assert cb.state is CircuitState.CLOSED
    assert cb.consecutive_failures == 0
    assert cb.times_opened == 1


def test_failed_trial_reopens_for_another_period() -> None:
    clock = FakeClock()
    cb = CircuitBreaker(failure_threshold=1, reset_s=5.0, clock=clock)
    cb.try_acquire()
    cb.record_failure()
    clock.now = 5.0
    assert cb.try_acquire()
    cb.record_failure()
    assert cb.state is CircuitState.OPEN
    clock.now = 9.0
    assert not cb.try_acquire()
    clock.now = 10.0
    assert cb.try_acquire()
    assert cb.times_opened == 2


def test_success_resets_consecutive_count() -> None:
    cb = CircuitBreaker(failure_threshold=2, reset_s=5.0, clock=FakeClock())
    cb.record_failure()
    cb.record_success()
    cb.record_failure()
    assert cb.state is CircuitState.CLOSED


def test_neutral_trial_outcome_frees_the_trial_slot() -> None:
    clock = FakeClock()
    cb = CircuitBreaker(failure_threshold=1, reset_s=5.0, clock=clock)
    cb.record_failure()
    clock.now = 6.0
    assert cb.try_acquire()
    cb.record_neutral()
    assert cb.try_acquire()  # another trial may start at once


def test_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="failure_threshold"):
        CircuitBreaker(failure_threshold=0, reset_s=1.0, clock=FakeClock())
