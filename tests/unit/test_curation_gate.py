"""The Great Expectations gate, the all-or-nothing output folder, and `conductor curate` end to end.

Great Expectations is imported once for this module (one ephemeral context per process).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conductor_core.cli import cli, main
from conductor_core.data.config import load_config
from conductor_core.data.curation import CurationFailed, curate, failed_report_paths
from conductor_core.data.expectations import validate
from conductor_core.data.steps import normalise
from conductor_core.tasks.problem import read_jsonl, read_parquet

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "curation"
BROKEN = FIXTURES / "broken.yaml"


def _good_problems():
    cfg = load_config("example")
    problems = []
    for s in cfg.sources:
        problems.extend(read_jsonl(s.file))
    # ids are unique in the bundled fixtures even before dedup
    return normalise(problems).kept


def test_gate_passes_the_bundled_fixtures() -> None:
    outcome = validate(_good_problems())
    assert outcome.success, outcome.summary()
    suites = {c.suite for c in outcome.checks}
    assert suites == {"dataset", "math", "mcq", "code", "freeform"}
    assert all(c.observed for c in outcome.checks)


def test_gate_fails_the_broken_fixture_listing_failures() -> None:
    outcome = validate(read_jsonl(FIXTURES / "broken.jsonl"))
    assert not outcome.success
    failing = {c.label: [e["id"] for e in c.examples] for c in outcome.failing}
    assert failing == {
        "math reference answer parses": ["bad-math-001"],
        "mcq reference letter is among the choices": ["bad-mcq-001"],
        "code problem has at least one test": ["bad-code-001"],
    }
    text = outcome.summary()
    assert "FAILED [mcq] mcq reference letter is among the choices" in text
    assert "bad-code-001" in text


def test_gate_catches_duplicate_ids_and_unknown_domains() -> None:
    problems = _good_problems()
    dup = problems[1].model_copy(update={"id": problems[0].id})
    outcome = validate([*problems, dup])
    labels = [c.label for c in outcome.failing]
    assert labels == ["ids are unique"]
    assert outcome.failing[0].examples[0]["id"] == problems[0].id
    from conductor_core.data.config import ExpectationsConfig

    only_math = ExpectationsConfig(domains=["math"])
    outcome = validate(problems, only_math)
    assert [c.label for c in outcome.failing] == ["domain is one of math"]


def test_failed_run_writes_nothing_and_keeps_previous_output(tmp_path: Path) -> None:
    out = tmp_path / "curated"
    out.mkdir()
    (out / "train.parquet").write_text("previous good output", encoding="utf-8")
    with pytest.raises(CurationFailed) as info:
        curate(BROKEN, out_dir=out, progress=False)
    assert (out / "train.parquet").read_text(encoding="utf-8") == "previous good output"
    assert sorted(p.name for p in out.iterdir()) == ["train.parquet"]
    md, html = failed_report_paths(out)
    assert info.value.report_md == md and md.exists() and html.exists()
    report = md.read_text(encoding="utf-8")
    assert "Validation FAILED" in report and "bad-mcq-001" in report
    assert "<html" in html.read_text(encoding="utf-8")
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_failed_run_on_fresh_dir_creates_no_output_dir(tmp_path: Path) -> None:
    out = tmp_path / "fresh"
    with pytest.raises(CurationFailed):
        curate(BROKEN, out_dir=out, progress=False)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "fresh.failed-report.html",
        "fresh.failed-report.md",
    ]


def test_cli_curate_bundled_example_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "out"
    stale_md, _ = failed_report_paths(out)
    stale_md.write_text("old failure", encoding="utf-8")
    result = CliRunner().invoke(
        cli, ["curate", "--config", "example", "--out", str(out), "--no-progress"]
    )
    assert result.exit_code == 0, result.output
    assert "17/17 expectations passed" in result.output
    train = read_parquet(out / "train.parquet")
    val = read_parquet(out / "validation.parquet")
    assert len(train) + len(val) == 24 and len(val) == 5
    assert {p.metadata["split"] for p in val} == {"validation"}
    ids = {p.id for p in [*train, *val]}
    # duplicates, near duplicates and contaminated items are gone
    removed = {"fx-math-013", "fx-mcq-009", "fx-math-014", "fx-free-007", "fx-math-015"}
    assert not ids & removed | ({"fx-code-006"} & ids)
    stats = json.loads((out / "stats.json").read_text(encoding="utf-8"))
    assert stats["final"]["by_source"]["math"] == 10
    assert stats["filters"]["dedup_exact"]["removed"] == 2
    assert stats["filters"]["dedup_near"]["removed"] == 2
    assert stats["filters"]["decontaminate"]["removed"] == 2
    reasons = [e["reason"] for e in stats["filters"]["decontaminate"]["examples"]]
    assert any("HumanEval/0" in r for r in reasons)
    assert "PASSED" in (out / "report.md").read_text(encoding="utf-8")
    assert "expect_column_values_to_be_unique" in (out / "report.html").read_text(encoding="utf-8")
    assert (out / "config.yaml").exists()
    assert not stale_md.exists()


def test_cli_rerun_is_deterministic(tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = curate("example", out_dir=out, progress=False)
    ids1 = [p.id for p in read_parquet(first.train_path)]
    second = curate("example", out_dir=out, progress=False)
    assert [p.id for p in read_parquet(second.train_path)] == ids1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_cli_broken_input_exits_1_with_failures_listed(tmp_path: Path) -> None:
    out = tmp_path / "broken-out"
    result = CliRunner().invoke(cli, ["curate", "--config", str(BROKEN), "--out", str(out)])
    assert result.exit_code == 1
    assert "FAILED [code] code problem has at least one test" in result.output
    assert "bad-math-001" in result.output
    assert "failed-report.md" in result.output
    assert not out.exists()


def test_cli_bad_config_is_one_line_exit_2(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - file: x.jsonl\n    quota: -1\n", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        main(["curate", "--config", str(bad)])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error:") and "sources.0.quota" in err and "\n" not in err


def test_curate_with_difficulty_filter_records_rates(tmp_path: Path) -> None:
    cfg = load_config(FIXTURES / "difficulty.yaml")
    cache = str(tmp_path / "cache.sqlite")
    cfg = cfg.model_copy(
        update={"difficulty": cfg.difficulty.model_copy(update={"cache_path": cache})}
    )
    result = curate(cfg, out_dir=tmp_path / "out", progress=False)
    diff = result.stats["filters"]["difficulty"]
    kept = result.stats["final"]["total"]
    assert kept > 0 and kept + diff["removed"] == 8
    problems = [*read_parquet(result.train_path), *read_parquet(result.validation_path)]
    assert all(0.0 < p.metadata["solve_rate"] < 1.0 for p in problems)
