"""Opt-in response cache of worker calls, in SQLite (stdlib ``sqlite3``, WAL journal).

The key is the SHA-256 of canonical JSON of everything that determines a reply: provider, model,
endpoint, generation parameters, messages and ``sample_index`` (so repeated samples of the same
prompt stay distinct). The API key is never part of the key or the stored row. Only successful
calls are stored.

One connection is shared, guarded by a lock (``check_same_thread=False``); the async helpers run
the blocking work in a thread, so the cache is safe for concurrent async use and for several
processes on the same file (WAL, with a busy timeout).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.types import Messages, OutputFormat, Usage

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model TEXT NOT NULL,
    text TEXT NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cost REAL NOT NULL,
    created_at REAL NOT NULL
)
"""


def cache_key(
    worker: WorkerConfig,
    messages: Messages,
    sample_index: int = 0,
    output_format: OutputFormat | None = None,
) -> str:
    """SHA-256 hex digest identifying one call (never includes the API key). A call with an
    ``output_format`` has its own key; one without keeps the key it always had."""
    payload: dict[str, Any] = {
        "provider": worker.provider,
        "model": worker.model,
        "endpoint": worker.endpoint,
        "params": worker.params.model_dump(mode="json"),
        "messages": messages,
        "sample_index": sample_index,
    }
    if output_format is not None:
        payload["output_format"] = output_format.response_format()
    blob = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class CachedResponse:
    """A stored reply. ``cost`` is what the original call cost (a hit costs nothing)."""

    text: str
    usage: Usage
    cost: float
    model: str
    created_at: float


@dataclass
class CacheStats:
    """Counters of one :class:`ResponseCache` instance."""

    hits: int = 0
    misses: int = 0
    writes: int = 0

    def to_dict(self) -> dict[str, int]:
        """Plain dict (for logs and MLflow)."""
        return asdict(self)


class ResponseCache:
    """SQLite-backed cache of successful worker replies.

    Args:
        path: the database file; parent folders are created. ``":memory:"`` works for tests.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            self.path, check_same_thread=False, timeout=30.0, isolation_level=None
        )
        with self._lock:
            if self.path != ":memory:":
                self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute(_SCHEMA)
        self.stats = CacheStats()

    def __repr__(self) -> str:
        return f"ResponseCache(path={self.path!r})"

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError(f"response cache {self.path} is closed")
        return self._conn

    def get(self, key: str) -> CachedResponse | None:
        """The stored reply for ``key``, or ``None``. Counts a hit or a miss."""
        with self._lock:
            row = (
                self._connection()
                .execute(
                    "SELECT text, input_tokens, output_tokens, cost, model, created_at "
                    "FROM responses WHERE key = ?",
                    (key,),
                )
                .fetchone()
            )
            if row is None:
                self.stats.misses += 1
                return None
            self.stats.hits += 1
        text, inp, out, cost, model, created = row
        return CachedResponse(
            text=text,
            usage=Usage(input_tokens=inp, output_tokens=out),
            cost=cost,
            model=model,
            created_at=created,
        )

    def put(self, key: str, *, text: str, usage: Usage, cost: float, model: str) -> None:
        """Store a successful reply (replacing an older one with the same key)."""
        with self._lock:
            self._connection().execute(
                "INSERT OR REPLACE INTO responses "
                "(key, model, text, input_tokens, output_tokens, cost, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (key, model, text, usage.input_tokens, usage.output_tokens, cost, time.time()),
            )
            self.stats.writes += 1

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._connection().execute("SELECT COUNT(*) FROM responses").fetchone()
        return int(count)

    async def aget(self, key: str) -> CachedResponse | None:
        """:meth:`get` in a worker thread."""
        return await asyncio.to_thread(self.get, key)

    async def aput(self, key: str, *, text: str, usage: Usage, cost: float, model: str) -> None:
        """:meth:`put` in a worker thread."""
        await asyncio.to_thread(self.put, key, text=text, usage=usage, cost=cost, model=model)

    def close(self) -> None:
        """Close the database (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
