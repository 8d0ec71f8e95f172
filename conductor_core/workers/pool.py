"""The worker pool runtime: calls a worker by id with concurrency limits, per-call timeouts,
retries with backoff, a per-worker circuit breaker, an optional response cache, and usage/cost
accounting.

:meth:`WorkerPool.call` never raises for a provider failure: it returns a :class:`CallResult`
whose ``error``/``error_kind`` record the failure (distinct from a wrong answer; whether the plan or
the infrastructure caused it is :func:`~conductor_core.workers.types.is_plan_fault`'s to say).

Retry policy (per call):

* retryable failures (rate limit, 5xx, connection, timeout, malformed reply) are retried up to
  ``worker.max_retries`` times; the delay before retry ``n`` (0-based) is uniform in
  ``[0, min(backoff_max_s, backoff_base_s * 2**n)]`` (full jitter), raised to the server's
  Retry-After when that is longer;
* non-retryable failures (auth, other 4xx) fail at once;
* each attempt is limited to ``worker.timeout_s``; a ``deadline`` (absolute event-loop time) caps
  the whole call including queueing and backoff: when it would be passed, the call ends with
  ``deadline_exceeded``.

Circuit breaker: ``retry.circuit_failure_threshold`` consecutive final failures open a worker's
circuit for ``retry.circuit_reset_s``: calls then fail fast with ``circuit_open``; then one trial
call is let through (half-open) and its success closes the circuit. Failures of the request's own
fault (client errors, a context overflow, the caller's deadline: ``is_plan_fault``) do not count
as the worker's failures.

Cache (``config.cache.enabled``): a hit returns ``cached=True`` with the stored text and usage and
``cost=0.0`` (nothing was spent); the original cost is kept in the cache row and summed in
``stats()["workers"][i]["saved_cost"]``. Failures are never cached.

Streaming (``call(..., on_delta=...)``): a provider with ``complete_stream`` streams the reply and
``on_delta`` gets its text piece by piece as it arrives; another provider (or a cache hit) passes
the whole text once it has it. The pieces of a call that succeeds join to its text. An attempt
that fails after some of its text went to ``on_delta`` is **not retried**: the caller has already
passed that text on, and a retry would send a different or a repeated reply; the call fails, its
error saying how much was streamed. Failures before the first piece are retried as usual.

Output format (``call(..., output_format=...)``, the gateway's ``response_format`` for the last
step): a provider that declares ``accepts_output_format`` gets it as ``output_format`` (OpenAI
and vLLM as ``response_format``, Gemini as its JSON mode, the simulated workers answer JSON);
any other is asked in words, by a system message put first (:meth:`OutputFormat.instruction`).
The pool does not check the reply: the caller does. The format is part of the cache key.

Tracing: where a tracer is bound (:mod:`conductor_core.telemetry`), each call is a
``conductor.worker_call`` client span (its attempts, retries and a cache hit included) naming the
worker, its model, retries, tokens and error kind; the providers' HTTP requests carry its trace
context.
"""

from __future__ import annotations

import asyncio
import logging
import random
import sqlite3
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from conductor_core import telemetry
from conductor_core.errors import ConductorError
from conductor_core.workers.cache import ResponseCache, cache_key
from conductor_core.workers.config import PoolConfig, WorkerConfig, load_pool
from conductor_core.workers.providers import build_provider, clean_message
from conductor_core.workers.resilience import CircuitBreaker, retry_delay
from conductor_core.workers.slots import PrioritySlots
from conductor_core.workers.types import (
    CallResult,
    Completion,
    DeltaHandler,
    ErrorKind,
    Messages,
    OutputFormat,
    Provider,
    ProviderError,
    Usage,
    is_plan_fault,
)

logger = logging.getLogger("conductor.workers")

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[Any]]


class _Relay:
    """Passes a streamed reply's pieces on to the caller's handler and remembers what went."""

    def __init__(self, on_delta: DeltaHandler) -> None:
        self._on_delta = on_delta
        self.parts: list[str] = []
        self.chars = 0

    def __call__(self, text: str) -> None:
        if text:
            self.parts.append(text)
            self.chars += len(text)
            self._on_delta(text)

    def finish(self, text: str) -> None:
        """The call succeeded with ``text``: pass on what has not gone yet (all of it for a
        provider that does not stream)."""
        sent = "".join(self.parts)
        if text.startswith(sent):
            self(text[len(sent) :])
        else:  # a provider whose pieces do not join to its reply: the caller sees the mismatch
            logger.warning("a streamed reply differs from the pieces that were streamed")


@dataclass
class WorkerStats:
    """Counters of one worker since the pool was created."""

    worker: int
    name: str
    model: str
    calls: int = 0
    successes: int = 0
    failures: int = 0
    retries: int = 0
    cache_hits: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    saved_cost: float = 0.0
    latency_s: float = 0.0
    errors: dict[str, int] = field(default_factory=dict)
    circuit: str = "closed"

    def to_dict(self) -> dict[str, Any]:
        """Plain dict (for logs, traces and MLflow)."""
        return asdict(self)


class WorkerPool:
    """Runs calls on the workers of a :class:`PoolConfig`; worker id = position in the config.

    Args:
        config: the pool (a simulated worker knows the problems of its ``simulation.problems``).
        providers: one provider per worker, overriding :func:`build_provider` (tests, custom
            backends). Must have the same length as ``config.workers``.
        clock: monotonic time in seconds; defaults to the running event loop's ``time()`` (the
            clock of ``deadline``).
        sleep: awaitable sleep used for backoff (tests inject one that records delays).
        rng: random source of the backoff jitter.
        cache: a response cache to use instead of opening ``config.cache.path``.

    Raises:
        ConfigError: a worker's key variable is missing or its settings are invalid.
        ValueError: ``providers`` has the wrong length.
    """

    def __init__(
        self,
        config: PoolConfig,
        *,
        providers: list[Provider] | None = None,
        clock: Clock | None = None,
        sleep: Sleep | None = None,
        rng: random.Random | None = None,
        cache: ResponseCache | None = None,
    ) -> None:
        self.config = config
        if providers is not None and len(providers) != len(config.workers):
            raise ValueError(
                f"providers has {len(providers)} entries but the pool has "
                f"{len(config.workers)} workers"
            )
        if providers is None:
            providers = [build_provider(w, worker_id=i) for i, w in enumerate(config.workers)]
        self._providers = list(providers)
        self._clock = clock or _loop_time
        self._sleep = sleep or asyncio.sleep
        self._rng = rng or random.Random()
        self._owns_cache = cache is None and config.cache.enabled
        if cache is None and config.cache.enabled:
            cache = ResponseCache(config.cache.path)
        self._cache = cache
        retry = config.retry
        self._breakers = [
            CircuitBreaker(retry.circuit_failure_threshold, retry.circuit_reset_s, self._clock)
            for _ in config.workers
        ]
        self._stats = [
            WorkerStats(worker=i, name=w.display_name, model=w.model)
            for i, w in enumerate(config.workers)
        ]
        self._sem_loop: asyncio.AbstractEventLoop | None = None
        self._sems: list[PrioritySlots] = []
        self._closed = False

    @classmethod
    def from_yaml(cls, path: str | Path, **kwargs: Any) -> WorkerPool:
        """Load a pool YAML file (see :func:`load_pool`) and build the pool."""
        return cls(load_pool(path), **kwargs)

    def __len__(self) -> int:
        return len(self.config.workers)

    def __repr__(self) -> str:
        names = ", ".join(w.display_name for w in self.config.workers)
        return f"WorkerPool({len(self)} workers: {names})"

    def worker(self, worker_id: int) -> WorkerConfig:
        """The config of worker ``worker_id``. Raises ValueError for an unknown id."""
        if isinstance(worker_id, bool) or not isinstance(worker_id, int):
            raise ValueError(f"worker id must be an int, got {worker_id!r}")
        if not 0 <= worker_id < len(self.config.workers):
            raise ValueError(f"unknown worker id {worker_id}: the pool has ids 0..{len(self) - 1}")
        return self.config.workers[worker_id]

    @property
    def cache(self) -> ResponseCache | None:
        """The response cache, when enabled."""
        return self._cache

    def breaker(self, worker_id: int) -> CircuitBreaker:
        """The circuit breaker of worker ``worker_id``."""
        self.worker(worker_id)
        return self._breakers[worker_id]

    def stats(self) -> dict[str, Any]:
        """Per-worker counters and totals (calls, failures, retries, tokens, cost, cache)."""
        workers = []
        for st, breaker in zip(self._stats, self._breakers, strict=True):
            st.circuit = breaker.state.value
            workers.append(st.to_dict())
        total = {
            key: sum(w[key] for w in workers)
            for key in (
                "calls",
                "successes",
                "failures",
                "retries",
                "cache_hits",
                "input_tokens",
                "output_tokens",
                "cost",
                "saved_cost",
            )
        }
        out: dict[str, Any] = {"workers": workers, "total": total}
        if self._cache is not None:
            out["cache"] = self._cache.stats.to_dict()
        return out

    def _semaphore(self, worker_id: int) -> PrioritySlots:
        loop = asyncio.get_running_loop()
        if self._sem_loop is not loop:
            # Semaphores bind to the first loop that waits on them: one set per event loop.
            self._sem_loop = loop
            self._sems = [PrioritySlots(w.concurrency) for w in self.config.workers]
        return self._sems[worker_id]

    async def call(
        self,
        worker_id: int,
        messages: Messages,
        *,
        sample_index: int = 0,
        deadline: float | None = None,
        priority: float = 0.0,
        on_delta: DeltaHandler | None = None,
        output_format: OutputFormat | None = None,
    ) -> CallResult:
        """Call worker ``worker_id`` with ``messages``; never raises for provider failures.

        Args:
            worker_id: position of the worker in the pool.
            messages: chat messages.
            sample_index: distinguishes repeated samples of the same prompt (cache key, seeds).
            deadline: absolute time (``clock()``, by default ``loop.time()``) after which no
                further attempt or retry starts; the call then returns ``deadline_exceeded``.
            priority: calls waiting for a busy worker are served highest priority first (the
                executor passes the length of the longest chain of steps waiting on this one).
            on_delta: stream the reply: gets its text in pieces as it arrives (see the module
                doc: an attempt that fails after its first piece is not retried).
            output_format: the form the reply must take (see the module doc); None: free text.

        Raises:
            ValueError: unknown ``worker_id`` (a programming error).
            RuntimeError: the pool is closed.
        """
        worker = self.worker(worker_id)
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        attributes = {
            "conductor.worker.id": worker_id,
            "conductor.worker.name": worker.display_name,
            "gen_ai.request.model": worker.model,
        }
        with telemetry.span("conductor.worker_call", attributes, kind="client") as span:
            result = await self._call(
                worker_id,
                worker,
                messages,
                sample_index,
                deadline,
                priority,
                on_delta,
                output_format,
            )
            if span.is_recording():
                span.set_attributes(
                    {
                        "conductor.worker.retries": result.retries,
                        "conductor.worker.cached": result.cached,
                        "gen_ai.usage.input_tokens": result.usage.input_tokens,
                        "gen_ai.usage.output_tokens": result.usage.output_tokens,
                    }
                )
                if result.error_kind is not None:
                    telemetry.failed(span, result.error_kind)
            return result

    async def _call(
        self,
        worker_id: int,
        worker: WorkerConfig,
        messages: Messages,
        sample_index: int,
        deadline: float | None,
        priority: float,
        on_delta: DeltaHandler | None,
        output_format: OutputFormat | None,
    ) -> CallResult:
        """:meth:`call`, inside its span."""
        stats = self._stats[worker_id]
        stats.calls += 1
        start = self._clock()

        native: dict[str, Any] = {}
        if output_format is not None:
            if getattr(self._providers[worker_id], "accepts_output_format", False):
                native["output_format"] = output_format
            else:
                instruction = {"role": "system", "content": output_format.instruction()}
                messages = [instruction, *messages]
        key = None
        if self._cache is not None:
            key = cache_key(worker, messages, sample_index, output_format)
            try:
                hit = await self._cache.aget(key)
            except sqlite3.Error as exc:  # a broken cache must not fail the call
                logger.warning("response cache read failed, calling the worker: %s", exc)
                hit = None
            if hit is not None:
                stats.cache_hits += 1
                stats.successes += 1
                stats.saved_cost += hit.cost
                logger.debug("worker %d (%s): cache hit", worker_id, worker.display_name)
                if on_delta is not None:
                    on_delta(hit.text)
                return CallResult(
                    worker=worker_id,
                    model=worker.model,
                    text=hit.text,
                    usage=hit.usage,
                    cost=0.0,
                    latency_s=self._clock() - start,
                    cached=True,
                )

        breaker = self._breakers[worker_id]
        if not breaker.try_acquire():
            return self._failure(
                worker_id,
                start,
                0,
                ProviderError(
                    f"circuit open after {breaker.consecutive_failures} consecutive failures; "
                    f"retry in {breaker.retry_in():.1f}s",
                    kind=ErrorKind.CIRCUIT_OPEN,
                    retryable=False,
                ),
            )

        outcome: str = "neutral"
        try:
            result, outcome = await self._attempts(
                worker_id,
                worker,
                messages,
                sample_index,
                deadline,
                start,
                priority,
                None if on_delta is None else _Relay(on_delta),
                native,
            )
        finally:
            if outcome == "success":
                breaker.record_success()
            elif outcome == "failure":
                breaker.record_failure()
            else:
                breaker.record_neutral()

        if result.ok and key is not None and self._cache is not None:
            try:
                await self._cache.aput(
                    key,
                    text=result.text or "",
                    usage=result.usage,
                    cost=result.cost,
                    model=worker.model,
                )
            except sqlite3.Error as exc:
                logger.warning("response cache write failed (reply kept): %s", exc)
        return result

    async def _attempts(
        self,
        worker_id: int,
        worker: WorkerConfig,
        messages: Messages,
        sample_index: int,
        deadline: float | None,
        start: float,
        priority: float = 0.0,
        relay: _Relay | None = None,
        native: dict[str, Any] | None = None,
    ) -> tuple[CallResult, str]:
        """Run attempts with retries. Returns the result and the breaker outcome."""
        retry = self.config.retry
        retries = 0
        while True:
            try:
                completion = await self._attempt(
                    worker_id, worker, messages, sample_index, deadline, priority, relay, native
                )
            except ProviderError as exc:
                error = exc
            else:
                if relay is not None:
                    relay.finish(completion.text)
                return self._success(worker_id, worker, start, retries, completion), "success"

            if relay is not None and relay.chars:
                # Part of this reply has been passed on: a retry would repeat or contradict it.
                error = ProviderError(
                    f"{error} (after {relay.chars} characters of the reply were streamed; "
                    "not retried)",
                    kind=error.kind,
                    retryable=False,
                    status=error.status,
                )

            if error.kind == ErrorKind.DEADLINE:
                return self._failure(worker_id, start, retries, error), "neutral"
            if not error.retryable or retries >= worker.max_retries:
                # a bad request (the plan's fault) says nothing about the worker's health
                outcome = "neutral" if is_plan_fault(error.kind) else "failure"
                return self._failure(worker_id, start, retries, error), outcome

            delay = retry_delay(
                retries,
                error.retry_after,
                base_s=retry.backoff_base_s,
                max_s=retry.backoff_max_s,
                rng=self._rng,
            )
            if deadline is not None and self._clock() + delay >= deadline:
                late = ProviderError(
                    f"deadline reached before retry {retries + 1} (last error: {error})",
                    kind=ErrorKind.DEADLINE,
                    retryable=False,
                )
                return self._failure(worker_id, start, retries, late), "neutral"
            logger.warning(
                "worker %d (%s): %s, retry %d/%d in %.2fs: %s",
                worker_id,
                worker.display_name,
                error.kind,
                retries + 1,
                worker.max_retries,
                delay,
                error,
            )
            await self._sleep(delay)
            retries += 1
            self._stats[worker_id].retries += 1

    async def _attempt(
        self,
        worker_id: int,
        worker: WorkerConfig,
        messages: Messages,
        sample_index: int,
        deadline: float | None,
        priority: float = 0.0,
        relay: _Relay | None = None,
        native: dict[str, Any] | None = None,
    ) -> Completion:
        """One provider call under the worker's concurrency slot and timeout (streamed to
        ``relay`` when the provider can stream); raises ProviderError."""
        remaining = None if deadline is None else deadline - self._clock()
        if remaining is not None and remaining <= 0:
            raise ProviderError("deadline reached", kind=ErrorKind.DEADLINE, retryable=False)
        sem = self._semaphore(worker_id)
        try:
            async with asyncio.timeout(remaining):
                await sem.acquire(priority)
        except TimeoutError:
            raise ProviderError(
                "deadline reached while waiting for a free slot",
                kind=ErrorKind.DEADLINE,
                retryable=False,
            ) from None
        try:
            limit = worker.timeout_s
            by_deadline = False
            if deadline is not None:
                left = deadline - self._clock()
                if left < limit:
                    limit, by_deadline = max(left, 0.0), True
            try:
                provider = self._providers[worker_id]
                stream = getattr(provider, "complete_stream", None) if relay else None
                async with asyncio.timeout(limit):
                    if stream is not None:
                        completion = await stream(
                            messages, sample_index=sample_index, on_delta=relay, **(native or {})
                        )
                    else:
                        completion = await provider.complete(
                            messages, sample_index=sample_index, **(native or {})
                        )
            except TimeoutError:
                if by_deadline:
                    raise ProviderError(
                        "deadline reached during the call",
                        kind=ErrorKind.DEADLINE,
                        retryable=False,
                    ) from None
                raise ProviderError(
                    f"no reply within timeout_s={worker.timeout_s:g}s",
                    kind=ErrorKind.TIMEOUT,
                    retryable=True,
                ) from None
            except (ProviderError, ConductorError, asyncio.CancelledError):
                raise
            except Exception as exc:
                raise ProviderError(
                    f"provider raised {type(exc).__name__}: {clean_message(exc)}",
                    kind=ErrorKind.SERVER,
                    retryable=False,
                ) from None
        finally:
            sem.release()
        if not isinstance(completion, Completion):
            raise ProviderError(
                f"provider returned {type(completion).__name__}, not a Completion",
                kind=ErrorKind.MALFORMED,
                retryable=False,
            )
        return completion

    def _success(
        self, worker_id: int, worker: WorkerConfig, start: float, retries: int, c: Completion
    ) -> CallResult:
        cost = worker.price.cost(c.usage.input_tokens, c.usage.output_tokens)
        latency = self._clock() - start
        st = self._stats[worker_id]
        st.successes += 1
        st.input_tokens += c.usage.input_tokens
        st.output_tokens += c.usage.output_tokens
        st.cost += cost
        st.latency_s += latency
        logger.debug(
            "worker %d (%s): ok in %.2fs, %d+%d tokens, $%.6f, %d retries",
            worker_id,
            worker.display_name,
            latency,
            c.usage.input_tokens,
            c.usage.output_tokens,
            cost,
            retries,
        )
        return CallResult(
            worker=worker_id,
            model=worker.model,
            text=c.text,
            usage=Usage(input_tokens=c.usage.input_tokens, output_tokens=c.usage.output_tokens),
            cost=cost,
            latency_s=latency,
            retries=retries,
        )

    def _failure(
        self, worker_id: int, start: float, retries: int, error: ProviderError
    ) -> CallResult:
        worker = self.config.workers[worker_id]
        latency = self._clock() - start
        st = self._stats[worker_id]
        st.failures += 1
        st.latency_s += latency
        st.errors[error.kind] = st.errors.get(error.kind, 0) + 1
        level = logging.WARNING if error.kind == ErrorKind.CIRCUIT_OPEN else logging.ERROR
        logger.log(
            level,
            "worker %d (%s): failed (%s) after %d retries: %s",
            worker_id,
            worker.display_name,
            error.kind,
            retries,
            error,
        )
        return CallResult(
            worker=worker_id,
            model=worker.model,
            latency_s=latency,
            retries=retries,
            error=str(error) or error.kind,
            error_kind=error.kind,
        )

    async def aclose(self) -> None:
        """Close every provider and the cache (idempotent)."""
        if self._closed:
            return
        self._closed = True
        for provider in self._providers:
            try:
                await provider.aclose()
            except Exception as exc:  # closing must not hide other providers' cleanup
                logger.warning("closing a provider failed: %s", clean_message(exc))
        if self._cache is not None and self._owns_cache:
            self._cache.close()

    async def __aenter__(self) -> WorkerPool:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


def _loop_time() -> float:
    try:
        return asyncio.get_running_loop().time()
    except RuntimeError:
        import time

        return time.monotonic()
