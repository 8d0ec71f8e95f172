"""WorkerPool with in-process fake providers: retries, timeouts, deadline, circuit, concurrency,
cost, cache, stats."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

import pytest

from conductor_core.workers.cache import ResponseCache
from conductor_core.workers.config import PoolConfig, parse_pool
from conductor_core.workers.pool import WorkerPool
from conductor_core.workers.types import Completion, ErrorKind, ProviderError, Usage

MSG = [{"role": "user", "content": "hi"}]


def ok(text: str = "answer", inp: int = 100, out: int = 20) -> Completion:
    return Completion(text=text, usage=Usage(input_tokens=inp, output_tokens=out))


def err(kind: str, retryable: bool = True, retry_after: float | None = None) -> ProviderError:
    return ProviderError(f"fake {kind}", kind=kind, retryable=retryable, retry_after=retry_after)


class Scripted:
    """Returns or raises the scripted items in order; the last item repeats."""

    def __init__(self, *script: Any) -> None:
        self.script = list(script)
        self.calls: list[int] = []
        self.closed = False

    async def complete(self, messages, *, sample_index: int = 0) -> Completion:
        item = self.script[min(len(self.calls), len(self.script) - 1)]
        self.calls.append(sample_index)
        if item == "hang":
            await asyncio.sleep(3600)
        if isinstance(item, BaseException):
            raise item
        return item

    async def aclose(self) -> None:
        self.closed = True


class FakeTime:
    """Clock + sleep: sleeping advances the clock and records the delay."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.delays: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.delays.append(delay)
        self.now += delay


def config(n: int = 1, **over: Any) -> PoolConfig:
    worker = {
        "provider": "simulated",
        "model": "fake",
        "max_retries": 3,
        "timeout_s": 5,
        "price": {"input_per_mtok": 2.0, "output_per_mtok": 10.0},
    }
    worker.update(over.pop("worker", {}))
    retry = {
        "backoff_base_s": 1.0,
        "backoff_max_s": 8.0,
        "circuit_failure_threshold": 3,
        "circuit_reset_s": 30.0,
    }
    retry.update(over.pop("retry", {}))
    return parse_pool({"workers": [dict(worker) for _ in range(n)], "retry": retry, **over})


def make_pool(
    providers: list, cfg: PoolConfig | None = None, **kw: Any
) -> tuple[WorkerPool, FakeTime]:
    t = FakeTime()
    cfg = cfg or config(len(providers))
    pool = WorkerPool(
        cfg, providers=providers, clock=t.clock, sleep=t.sleep, rng=random.Random(0), **kw
    )
    return pool, t


def run(coro):
    return asyncio.run(coro)


def test_success_usage_cost_and_stats() -> None:
    prov = Scripted(ok(inp=1_000, out=500))
    pool, _ = make_pool([prov])
    res = run(pool.call(0, MSG, sample_index=3))
    assert res.ok and res.text == "answer" and res.retries == 0 and not res.cached
    assert res.usage == Usage(input_tokens=1000, output_tokens=500)
    assert res.cost == pytest.approx((1000 * 2.0 + 500 * 10.0) / 1e6)
    assert prov.calls == [3]
    st = pool.stats()
    assert st["workers"][0]["calls"] == 1 and st["workers"][0]["successes"] == 1
    assert st["total"]["cost"] == pytest.approx(res.cost)
    assert st["total"]["output_tokens"] == 500


def test_retries_rate_limit_then_succeeds_honouring_retry_after() -> None:
    prov = Scripted(err(ErrorKind.RATE_LIMIT, retry_after=20.0), err(ErrorKind.SERVER), ok())
    pool, t = make_pool([prov])
    res = run(pool.call(0, MSG))
    assert res.ok and res.retries == 2
    assert len(prov.calls) == 3
    assert t.delays[0] == 20.0  # Retry-After longer than backoff cap (1.0)
    assert 0.0 <= t.delays[1] <= 2.0  # second backoff: full jitter under base * 2
    assert pool.stats()["workers"][0]["retries"] == 2


def test_jitter_bounded_and_max_retries_respected() -> None:
    prov = Scripted(err(ErrorKind.SERVER))
    pool, t = make_pool([prov], config(1, worker={"max_retries": 5}))
    res = run(pool.call(0, MSG))
    assert not res.ok and res.error_kind == ErrorKind.SERVER
    assert res.retries == 5 and len(prov.calls) == 6
    caps = [1.0, 2.0, 4.0, 8.0, 8.0]
    assert len(t.delays) == 5
    assert all(0.0 <= d <= cap for d, cap in zip(t.delays, caps, strict=True))
    st = pool.stats()["workers"][0]
    assert st["failures"] == 1 and st["errors"] == {ErrorKind.SERVER: 1}


def test_non_retryable_fails_at_once() -> None:
    for kind in (ErrorKind.AUTH, ErrorKind.CLIENT):
        prov = Scripted(err(kind, retryable=False), ok())
        pool, t = make_pool([prov])
        res = run(pool.call(0, MSG))
        assert res.error_kind == kind and res.retries == 0
        assert len(prov.calls) == 1 and t.delays == []
        assert res.text is None and res.error


def test_hanging_provider_hits_per_call_timeout() -> None:
    prov = Scripted("hang")
    cfg = config(1, worker={"timeout_s": 0.05, "max_retries": 1})
    pool, _ = make_pool([prov], cfg)
    res = run(pool.call(0, MSG))
    assert res.error_kind == ErrorKind.TIMEOUT
    assert "timeout_s" in res.error
    assert len(prov.calls) == 2 and res.retries == 1


def test_timeout_then_success_is_retried() -> None:
    prov = Scripted("hang", ok("late"))
    pool, _ = make_pool([prov], config(1, worker={"timeout_s": 0.05}))
    res = run(pool.call(0, MSG))
    assert res.ok and res.text == "late" and res.retries == 1


def test_deadline_stops_retrying() -> None:
    prov = Scripted(err(ErrorKind.RATE_LIMIT, retry_after=60.0), ok())
    pool, t = make_pool([prov])
    res = run(pool.call(0, MSG, deadline=t.now + 10.0))
    assert res.error_kind == ErrorKind.DEADLINE
    assert "rate_limit" in res.error or "fake" in res.error
    assert len(prov.calls) == 1 and t.delays == []


def test_deadline_already_passed_makes_no_call() -> None:
    prov = Scripted(ok())
    pool, t = make_pool([prov])
    res = run(pool.call(0, MSG, deadline=t.now - 1))
    assert res.error_kind == ErrorKind.DEADLINE and prov.calls == []


def test_deadline_cuts_a_hanging_call_short() -> None:
    async def main() -> Any:
        prov = Scripted("hang")
        pool = WorkerPool(config(1, worker={"timeout_s": 60}), providers=[prov])
        loop = asyncio.get_running_loop()
        start = loop.time()
        res = await pool.call(0, MSG, deadline=loop.time() + 0.05)
        return res, loop.time() - start

    res, elapsed = run(main())
    assert res.error_kind == ErrorKind.DEADLINE
    assert elapsed < 2.0


def test_circuit_opens_fails_fast_half_opens_and_closes() -> None:
    prov = Scripted(err(ErrorKind.SERVER, retryable=False))
    cfg = config(1, retry={"circuit_failure_threshold": 2, "circuit_reset_s": 30.0})
    pool, t = make_pool([prov], cfg)
    for _ in range(2):
        assert run(pool.call(0, MSG)).error_kind == ErrorKind.SERVER
    res = run(pool.call(0, MSG))
    assert res.error_kind == ErrorKind.CIRCUIT_OPEN
    assert len(prov.calls) == 2  # failed fast, provider untouched
    assert pool.stats()["workers"][0]["circuit"] == "open"
    t.now += 30.0
    prov.script = [ok("back")]
    prov.calls.clear()
    res = run(pool.call(0, MSG))  # the half-open trial
    assert res.ok and res.text == "back"
    assert pool.breaker(0).state.value == "closed"
    assert run(pool.call(0, MSG)).ok


def test_half_open_lets_one_trial_through() -> None:
    async def main() -> list:
        gate = asyncio.Event()

        class Slow:
            calls = 0

            async def complete(self, messages, *, sample_index=0):
                Slow.calls += 1
                await gate.wait()
                return ok()

            async def aclose(self):
                return None

        cfg = config(1, retry={"circuit_failure_threshold": 1, "circuit_reset_s": 5.0})
        pool, t = make_pool([Slow()], cfg)
        breaker = pool.breaker(0)
        breaker.record_failure()  # open it
        t.now += 5.0
        trial = asyncio.create_task(pool.call(0, MSG))
        await asyncio.sleep(0)
        others = await asyncio.gather(*(pool.call(0, MSG) for _ in range(3)))
        gate.set()
        return [await trial, *others, Slow.calls]

    trial, *others, calls = run(main())
    assert trial.ok
    assert all(o.error_kind == ErrorKind.CIRCUIT_OPEN for o in others)
    assert calls == 1


def test_client_errors_do_not_open_the_circuit() -> None:
    prov = Scripted(err(ErrorKind.CLIENT, retryable=False))
    pool, _ = make_pool([prov], config(1, retry={"circuit_failure_threshold": 1}))
    for _ in range(3):
        assert run(pool.call(0, MSG)).error_kind == ErrorKind.CLIENT
    assert len(prov.calls) == 3


def test_a_context_overflow_is_the_requests_fault_not_the_workers() -> None:
    """A prompt too long for the worker is not retried, does not open its circuit, and the
    result says the plan caused it."""
    prov = Scripted(err(ErrorKind.CONTEXT_OVERFLOW, retryable=False))
    pool, t = make_pool([prov], config(1, retry={"circuit_failure_threshold": 1}))
    results = [run(pool.call(0, MSG)) for _ in range(3)]
    assert all(r.error_kind == ErrorKind.CONTEXT_OVERFLOW and r.plan_fault for r in results)
    assert len(prov.calls) == 3 and t.delays == []
    server = Scripted(err(ErrorKind.SERVER, retryable=False))
    pool, _ = make_pool([server])
    assert not run(pool.call(0, MSG)).plan_fault


def test_concurrency_limit_never_exceeded() -> None:
    class Counting:
        def __init__(self) -> None:
            self.in_flight = 0
            self.max_seen = 0

        async def complete(self, messages, *, sample_index=0):
            self.in_flight += 1
            self.max_seen = max(self.max_seen, self.in_flight)
            await asyncio.sleep(0.001 * (sample_index % 3))
            self.in_flight -= 1
            return ok(str(sample_index))

        async def aclose(self):
            return None

    a, b = Counting(), Counting()
    cfg = parse_pool(
        [
            {"provider": "simulated", "model": "a", "concurrency": 3},
            {"provider": "simulated", "model": "b", "concurrency": 1},
        ]
    )
    pool = WorkerPool(cfg, providers=[a, b])

    async def main():
        return await asyncio.gather(*(pool.call(i % 2, MSG, sample_index=i) for i in range(60)))

    results = run(main())
    assert all(r.ok for r in results)
    assert [r.text for r in results] == [str(i) for i in range(60)]
    assert a.max_seen == 3 and b.max_seen == 1


def test_unexpected_exception_is_recorded_not_raised() -> None:
    pool, _ = make_pool([Scripted(KeyError("boom"))])
    res = run(pool.call(0, MSG))
    assert res.error_kind == ErrorKind.SERVER and "KeyError" in res.error


def test_wrong_return_type_is_malformed() -> None:
    pool, _ = make_pool([Scripted("not a completion")])
    res = run(pool.call(0, MSG))
    assert res.error_kind == ErrorKind.MALFORMED


def test_unknown_worker_id_raises_value_error() -> None:
    pool, _ = make_pool([Scripted(ok())])
    for bad in (1, -1, True):
        with pytest.raises(ValueError, match="worker id"):
            run(pool.call(bad, MSG))
    assert pool.worker(0).model == "fake" and len(pool) == 1


def test_cache_hit_avoids_second_call_and_survives_reopen(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite"
    cfg = config(1, cache={"enabled": True, "path": str(path)})
    prov = Scripted(ok("cached answer", inp=1000, out=1000))
    pool, _ = make_pool([prov], cfg)
    first = run(pool.call(0, MSG))
    second = run(pool.call(0, MSG))
    assert first.ok and not first.cached and first.cost > 0
    assert second.cached and second.text == "cached answer" and second.cost == 0.0
    assert second.usage == first.usage
    assert len(prov.calls) == 1
    other_sample = run(pool.call(0, MSG, sample_index=1))
    assert not other_sample.cached and len(prov.calls) == 2
    st = pool.stats()
    assert st["workers"][0]["cache_hits"] == 1
    assert st["workers"][0]["saved_cost"] == pytest.approx(first.cost)
    assert st["cache"]["hits"] == 1
    run(pool.aclose())

    prov2 = Scripted(ok("fresh"))
    pool2, _ = make_pool([prov2], cfg)
    again = run(pool2.call(0, MSG))
    assert again.cached and again.text == "cached answer" and prov2.calls == []
    run(pool2.aclose())


def test_failures_are_not_cached(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    prov = Scripted(err(ErrorKind.AUTH, retryable=False), ok("now ok"))
    pool, _ = make_pool([prov], cache=cache)
    assert not run(pool.call(0, MSG)).ok
    assert len(cache) == 0
    res = run(pool.call(0, MSG))
    assert res.ok and not res.cached
    assert len(cache) == 1
    cache.close()


def test_async_context_manager_closes_providers() -> None:
    provs = [Scripted(ok()), Scripted(ok())]

    async def main():
        async with WorkerPool(config(2), providers=provs) as pool:
            await pool.call(1, MSG)
        with pytest.raises(RuntimeError, match="closed"):
            await pool.call(0, MSG)

    run(main())
    assert all(p.closed for p in provs)


def test_provider_count_must_match() -> None:
    with pytest.raises(ValueError, match="providers"):
        WorkerPool(config(2), providers=[Scripted(ok())])


def test_from_yaml_builds_simulated_pool(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(
        "workers:\n  - provider: simulated\n    model: sim-a\n  - provider: simulated\n"
        "    model: sim-b\n    concurrency: 2\n",
        encoding="utf-8",
    )
    pool = WorkerPool.from_yaml(path)
    assert len(pool) == 2 and pool.worker(1).concurrency == 2
    res = run(pool.call(1, MSG))
    assert res.worker == 1 and res.model == "sim-b"
    assert res.ok or res.error_kind is not None
    run(pool.aclose())


def test_simulated_workers_need_no_bank(tmp_path: Path) -> None:
    from conductor_core.tasks.problem import Problem, write_jsonl

    known = Problem(id="k", source="t", domain="math", question="What is 2 + 2?", reference="4")
    write_jsonl([known], tmp_path / "known.jsonl")
    cfg = parse_pool(
        [{"provider": "simulated", "model": f"sim-{i}", "simulation": {"seed": i}} for i in (0, 1)]
    ).with_simulation_problems([tmp_path / "known.jsonl"], replace=True)
    pool = WorkerPool(cfg)
    assert [[p.id for p in prov.bank] for prov in pool._providers] == [["k"], ["k"]]


def test_pool_works_across_event_loops() -> None:
    pool, _ = make_pool([Scripted(ok())])
    assert run(pool.call(0, MSG)).ok
    assert run(pool.call(0, MSG)).ok


def test_logs_never_contain_messages_content(caplog: pytest.LogCaptureFixture) -> None:
    prov = Scripted(err(ErrorKind.SERVER), ok())
    pool, _ = make_pool([prov])
    with caplog.at_level("DEBUG", logger="conductor.workers"):
        run(pool.call(0, [{"role": "user", "content": "PRIVATE-PROMPT"}]))
    assert caplog.records
    assert all(r.name == "conductor.workers" for r in caplog.records)
    assert "PRIVATE-PROMPT" not in caplog.text


def test_deadline_while_queued_for_a_slot() -> None:
    async def main():
        gate = asyncio.Event()

        class Blocking:
            async def complete(self, messages, *, sample_index=0):
                await gate.wait()
                return ok()

            async def aclose(self):
                return None

        pool = WorkerPool(config(1, worker={"concurrency": 1}), providers=[Blocking()])
        first = asyncio.create_task(pool.call(0, MSG))
        await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        queued = await pool.call(0, MSG, deadline=loop.time() + 0.05)
        gate.set()
        return await first, queued

    first, queued = run(main())
    assert first.ok
    assert queued.error_kind == ErrorKind.DEADLINE and "slot" in queued.error


def test_cancelled_trial_frees_the_half_open_slot() -> None:
    async def main():
        prov = Scripted("hang")
        cfg = config(1, retry={"circuit_failure_threshold": 1, "circuit_reset_s": 1.0})
        pool, t = make_pool([prov], cfg)
        pool.breaker(0).record_failure()
        t.now += 1.0
        trial = asyncio.create_task(pool.call(0, MSG))
        await asyncio.sleep(0.01)
        assert (await pool.call(0, MSG)).error_kind == ErrorKind.CIRCUIT_OPEN
        trial.cancel()
        with pytest.raises(asyncio.CancelledError):
            await trial
        prov.script = [ok("after")]
        return await pool.call(0, MSG)

    res = run(main())
    assert res.ok and res.text == "after"


def test_broken_cache_does_not_fail_the_call(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c.sqlite")
    cache._connection().execute("DROP TABLE responses")
    prov = Scripted(ok("still fine"))
    pool, _ = make_pool([prov], cache=cache)
    res = run(pool.call(0, MSG))
    assert res.ok and res.text == "still fine" and not res.cached
    cache.close()
