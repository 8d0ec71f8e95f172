"""Shards, records (torn lines, resume keys) and aggregation statistics."""

from __future__ import annotations

import math

import pytest

from conductor_core.errors import ConductorError
from conductor_core.evaluate.aggregate import OVERALL, accuracy_with_stderr, aggregate
from conductor_core.evaluate.records import EvalRecord, RecordWriter, dedupe, read_records
from conductor_core.evaluate.shards import (
    parse_shard_spec,
    shard_by_count,
    shard_by_size,
    shard_index,
)
from conductor_core.tasks.problem import Problem


def probs(n: int) -> list[Problem]:
    return [Problem(id=f"p{i:04d}", source="s", domain="math", question=f"q{i}") for i in range(n)]


def rec(pid: str, repeat: int = 0, correct: bool = True, **kw) -> EvalRecord:
    base = dict(
        problem_id=pid,
        benchmark="b",
        domain="math",
        method="m",
        repeat=repeat,
        sample_index=repeat,
        correct=correct,
    )
    return EvalRecord(**{**base, **kw})


def test_shards_partition_problems_stably() -> None:
    items = probs(200)
    shards = [shard_by_count(items, i, 4) for i in range(4)]
    ids = [p.id for s in shards for p in s]
    assert sorted(ids) == sorted(p.id for p in items) and len(ids) == len(set(ids))
    assert all(20 < len(s) < 80 for s in shards)
    # Adding problems never moves an existing one to another shard.
    more = [*items, *probs(300)[200:]]
    assert {p.id for p in shard_by_count(more, 1, 4)} >= {p.id for p in shards[1]}
    assert shard_index("p0001", 4) == shard_index("p0001", 4)


def test_shard_by_size_and_spec_errors() -> None:
    items = probs(10)
    assert [p.id for p in shard_by_size(items[::-1], 1, 4)] == ["p0004", "p0005", "p0006", "p0007"]
    assert len(shard_by_size(items, 2, 4)) == 2
    with pytest.raises(ConductorError):
        shard_by_size(items, 3, 4)
    assert parse_shard_spec(" 2/5 ") == (2, 5)
    for bad in ("5/5", "a/b", "1", "-1/2"):
        with pytest.raises(ConductorError):
            parse_shard_spec(bad)


def test_torn_last_line_is_dropped_and_repaired(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    with RecordWriter(path) as w:
        w.write(rec("a"))
        w.write(rec("b"))
    with path.open("a") as fh:
        fh.write('{"problem_id": "c", "bench')  # a kill in the middle of a write
    assert [r.problem_id for r in read_records(path)] == ["a", "b"]
    read_records(path, repair=True)
    with RecordWriter(path) as w:
        w.write(rec("c"))
    assert [r.problem_id for r in read_records(path)] == ["a", "b", "c"]


def test_corruption_in_the_middle_is_an_error(tmp_path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(rec("a").model_dump_json() + "\nGARBAGE\n" + rec("b").model_dump_json() + "\n")
    with pytest.raises(ValueError, match=":2: corrupt"):
        read_records(path)


def test_dedupe_keeps_latest_per_key() -> None:
    out = dedupe([rec("a", infra_error=True), rec("a", correct=False), rec("a", repeat=1)])
    assert len(out) == 2 and not out[0].infra_error and not out[0].correct


def test_stderr_over_repeats_and_binomial() -> None:
    mean, se, accs = accuracy_with_stderr([[True, False], [True, True]])
    assert accs == [0.5, 1.0] and mean == 0.75
    assert math.isclose(se, math.sqrt(((0.5 - 0.75) ** 2 + 0.25**2) / 1) / math.sqrt(2))
    mean, se, _ = accuracy_with_stderr([[True] * 3 + [False]])
    assert mean == 0.75 and math.isclose(se, math.sqrt(0.75 * 0.25 / 4))


def test_aggregate_excludes_infra_failures_and_averages_benchmarks() -> None:
    records = [
        rec("a", correct=True, benchmark="x", workers=[0, 1], calls=2, cost=0.2, plan_len=2),
        rec("b", correct=False, benchmark="x", workers=[0], calls=1, cost=0.1, plan_len=1),
        rec("c", infra_error=True, benchmark="x", calls=1, cost=0.1),
        rec(
            "d",
            correct=True,
            benchmark="y",
            workers=[1],
            calls=1,
            cost=0.0,
            plan_len=1,
            format_error=False,
        ),
    ]
    s = aggregate(records)
    x, y, avg = s.get("m", "x"), s.get("m", "y"), s.get("m", OVERALL)
    assert x.accuracy == 0.5 and x.infra_failure_rate == pytest.approx(1 / 3)
    assert y.accuracy == 1.0
    assert avg.accuracy == pytest.approx(0.75)
    assert avg.cost_per_question == pytest.approx(0.4 / 4)
    assert avg.worker_share == {0: 0.5, 1: 0.5}
    assert x.plan_lengths == {1: 1, 2: 1}
