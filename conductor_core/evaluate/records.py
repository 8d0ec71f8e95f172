"""Per-problem evaluation records: one JSON line per (method, problem, repeat), append-only.

The file is the checkpoint: a restarted shard reads it, skips what is done and appends the rest. A
line cut short by a kill is dropped on reopen, so nothing is duplicated or lost.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError

from conductor_core.errors import ConductorError
from conductor_core.outcome import Outcome

RECORD_VERSION = 1

RECORDS_GLOB = "records-*.jsonl"
"""The records files of a shard's output folder (``records-IofN.jsonl``)."""


class EvalRecord(Outcome):
    """The outcome of one method on one problem for one repeat: the graded trace summary
    (:class:`~conductor_core.outcome.Outcome`) plus where it came from."""

    version: int = RECORD_VERSION
    problem_id: str
    benchmark: str
    method: str
    repeat: int
    sample_index: int
    infra_attempts: int = Field(default=1, description="Attempts made (infra failures retried).")
    trace: dict[str, Any] | None = Field(default=None, description="SolveTrace, if kept.")

    @property
    def key(self) -> tuple[str, str, int]:
        """Identity of a record: (method, problem id, repeat)."""
        return (self.method, self.problem_id, self.repeat)


def read_records(path: str | Path, *, repair: bool = False) -> list[EvalRecord]:
    """Read a records file. A torn last line (from a kill) is skipped, and cut off when ``repair``.

    A bad line anywhere else is corruption, not a kill, and raises ``ValueError`` naming the line.
    """
    path = Path(path)
    if not path.exists():
        return []
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    records: list[EvalRecord] = []
    good_bytes = 0
    for i, line in enumerate(lines):
        if not line.strip():
            good_bytes += len(line) + (1 if i < len(lines) - 1 else 0)
            continue
        try:
            records.append(EvalRecord.model_validate_json(line))
        except (ValidationError, ValueError) as exc:
            is_last = all(not rest.strip() for rest in lines[i + 1 :])
            if not is_last:
                raise ValueError(f"{path}:{i + 1}: corrupt evaluation record ({exc})") from exc
            if repair:
                with path.open("r+b") as fh:
                    fh.truncate(good_bytes)
            break
        good_bytes += len(line) + 1
    return records


def read_record_sources(sources: Iterable[str | Path]) -> list[EvalRecord]:
    """Every record of ``sources``, in order, duplicates included (:func:`dedupe` picks the last).

    A source is a records file or a shard's output folder, whose :data:`RECORDS_GLOB` files are
    read in name order. A folder without any, or a source that does not exist, raises
    :class:`ConductorError` (a shard that wrote nothing failed; it is not an empty shard).
    """
    records: list[EvalRecord] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            files = sorted(path.glob(RECORDS_GLOB))
            if not files:
                raise ConductorError(f"evaluation shard {path} holds no {RECORDS_GLOB}")
        elif path.is_file():
            files = [path]
        else:
            raise ConductorError(f"evaluation records {path}: no records (no such file or folder)")
        for f in files:
            records += read_records(f)
    return records


class RecordWriter:
    """Appends records, one flushed and fsynced line each, so a kill loses at most one line."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = self.path.open("a", encoding="utf-8")

    def write(self, record: EvalRecord) -> None:
        """Append one record."""
        self._fh.write(record.model_dump_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        """Close the file."""
        self._fh.close()

    def __enter__(self) -> RecordWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def dedupe(records: Iterable[EvalRecord]) -> list[EvalRecord]:
    """Keep the last record of each key (a re-run of an infra failure replaces it)."""
    latest: dict[tuple[str, str, int], EvalRecord] = {}
    for r in records:
        latest[r.key] = r
    return list(latest.values())
