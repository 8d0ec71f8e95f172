"""Shards, records (torn lines, resume keys) and aggregation statistics."""

from __future__ import annotations

import math
from pathlib import Path

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


def test_read_record_sources_takes_files_and_shard_folders(tmp_path) -> None:
    from conductor_core.evaluate.records import read_record_sources

    shard = tmp_path / "shard"
    for tag, pid in (("1of2", "b"), ("0of2", "a")):
        with RecordWriter(shard / f"records-{tag}.jsonl") as w:
            w.write(rec(pid))
    with RecordWriter(tmp_path / "more.jsonl") as w:
        w.write(rec("c"))
    got = read_record_sources([shard, tmp_path / "more.jsonl"])
    assert [r.problem_id for r in got] == ["a", "b", "c"]  # a folder's files in name order
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConductorError, match="holds no records"):
        read_record_sources([tmp_path / "empty"])
    with pytest.raises(ConductorError, match="no such file or folder"):
        read_record_sources([tmp_path / "missing.jsonl"])


def test_aggregate_report_counts_each_record_once_the_last_one(tmp_path) -> None:
    from conductor_core.evaluate.report import aggregate_report

    # an infrastructure failure, then its re-run appended after it; and one record read twice
    records = [
        rec("a", infra_error=True),
        rec("b", correct=False),
        rec("a"),
        rec("b", correct=False),
    ]
    report = aggregate_report(records, tmp_path / "out", title="T")
    assert [(r.problem_id, r.infra_error) for r in report.records] == [("a", False), ("b", False)]
    overall = report.summary.get("m", OVERALL)
    assert overall.records == 2 and overall.accuracy == 0.5 and overall.infra_failure_rate == 0
    assert report.summary == aggregate(report.records)
    assert report.paths["markdown"] == str(tmp_path / "out" / "report.md")
    assert all(Path(report.paths[k]).is_file() for k in ("markdown", "html", "summary"))
    assert "# T" in Path(report.paths["markdown"]).read_text()
    empty = aggregate_report([], tmp_path / "none")
    assert empty.records == [] and empty.summary.methods == []


def test_eval_aggregate_command_reads_files_and_folders_and_counts_reruns_once(tmp_path) -> None:
    import json

    from click.testing import CliRunner

    from conductor_core.cli import cli

    with RecordWriter(tmp_path / "shard" / "records-0of2.jsonl") as w:
        w.write(rec("a", infra_error=True))
        w.write(rec("a"))
    with RecordWriter(tmp_path / "records-1of2.jsonl") as w:
        w.write(rec("b", correct=False))
    out = tmp_path / "report"
    args = ["eval", "aggregate", str(tmp_path / "shard"), str(tmp_path / "records-1of2.jsonl")]
    result = CliRunner().invoke(cli, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "summary.json").read_text())["rows"]
    overall = next(r for r in rows if r["benchmark"] == OVERALL)
    assert overall["records"] == 2 and overall["accuracy"] == 0.5
    (tmp_path / "empty.jsonl").write_text("")
    empty = CliRunner().invoke(cli, ["eval", "aggregate", str(tmp_path / "empty.jsonl")])
    assert empty.exit_code == 1 and "no records" in empty.output
