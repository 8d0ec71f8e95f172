"""The SQLite response cache: keys, persistence, concurrency."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from conductor_core.workers.cache import ResponseCache, cache_key
from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.types import Usage

MSG = [{"role": "user", "content": "What is 2+2?"}]


def _worker(**kw) -> WorkerConfig:
    base = {"provider": "openai", "model": "m", "endpoint": "http://127.0.0.1:8000/v1"}
    base.update(kw)
    return WorkerConfig.model_validate(base)


def test_key_depends_on_everything_that_shapes_the_reply() -> None:
    w = _worker()
    k = cache_key(w, MSG, 0)
    assert len(k) == 64
    assert cache_key(w, MSG, 0) == k
    assert cache_key(w, MSG, 1) != k
    assert cache_key(_worker(model="other"), MSG, 0) != k
    assert cache_key(_worker(endpoint="http://x/v1"), MSG, 0) != k
    assert cache_key(_worker(params={"temperature": 0.9}), MSG, 0) != k
    assert cache_key(w, [{"role": "user", "content": "What is 2+3?"}], 0) != k


def test_key_ignores_key_env_and_price(monkeypatch: pytest.MonkeyPatch) -> None:
    w = _worker()
    assert cache_key(_worker(api_key_env="SOME_KEY", price={"input_per_mtok": 3}), MSG) == (
        cache_key(w, MSG)
    )


def test_put_get_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "cache.sqlite"
    cache = ResponseCache(path)
    assert cache.get("k") is None
    cache.put("k", text="4", usage=Usage(input_tokens=10, output_tokens=2), cost=0.5, model="m")
    hit = cache.get("k")
    assert hit is not None and hit.text == "4" and hit.usage.output_tokens == 2
    assert hit.cost == 0.5
    assert cache.stats.to_dict() == {"hits": 1, "misses": 1, "writes": 1}
    cache.close()
    cache.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        cache.get("k")
    reopened = ResponseCache(path)
    assert len(reopened) == 1
    assert reopened.get("k").text == "4"
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode.lower() == "wal"
    reopened.close()


def test_concurrent_async_use(tmp_path: Path) -> None:
    async def main() -> None:
        with ResponseCache(tmp_path / "c.sqlite") as cache:
            await asyncio.gather(
                *(
                    cache.aput(f"k{i}", text=str(i), usage=Usage(), cost=0.0, model="m")
                    for i in range(40)
                )
            )
            got = await asyncio.gather(*(cache.aget(f"k{i}") for i in range(40)))
            assert [g.text for g in got] == [str(i) for i in range(40)]
            assert len(cache) == 40

    asyncio.run(main())


def test_repr_has_only_path(tmp_path: Path) -> None:
    with ResponseCache(tmp_path / "c.sqlite") as cache:
        assert "c.sqlite" in repr(cache)
