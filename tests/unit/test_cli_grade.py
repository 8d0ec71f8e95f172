"""`conductor grade` and `conductor tasks` end to end through click."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from conductor_core.cli import cli, main
from conductor_core.tasks.problem import Problem, read_jsonl, write_jsonl, write_parquet

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def _problems() -> list[Problem]:
    return [
        Problem(id="m1", source="t", domain="math", question="1+1?", reference="2"),
        Problem(id="m2", source="t", domain="math", question="2+2?", reference="4"),
        Problem(
            id="q1",
            source="t",
            domain="mcq",
            question="Pick",
            reference="B",
            choices=["a", "b", "c", "d"],
        ),
        Problem(id="f1", source="t", domain="freeform", question="Who?", reference="Ada"),
    ]


def _answers(path: Path) -> Path:
    rows = [
        {"id": "m1", "answer": "\\boxed{2}"},
        {"id": "m2", "answer": "It is 5."},
        {"id": "q1", "answer": "Answer: B"},
        {"id": "ghost", "answer": "1"},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


def test_grade_json(tmp_path: Path) -> None:
    probs = tmp_path / "p.jsonl"
    write_jsonl(_problems(), probs)
    res = CliRunner().invoke(
        cli, ["grade", str(probs), str(_answers(tmp_path / "a.jsonl")), "--json"]
    )
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    by_id = {r["id"]: r for r in report["results"]}
    assert by_id["m1"]["correct"] and not by_id["m2"]["correct"] and by_id["q1"]["correct"]
    assert by_id["m2"]["extracted"] == "5"
    s = report["summary"]
    assert s["graded"] == 3 and s["correct"] == 2 and s["problems"] == 4
    assert s["accuracy"] == pytest.approx(2 / 3)
    assert s["per_domain"]["math"] == {"graded": 2, "correct": 1, "accuracy": 0.5}
    assert report["missing"] == ["f1"] and report["unknown_ids"] == ["ghost"]


def test_grade_table_from_parquet(tmp_path: Path) -> None:
    probs = tmp_path / "p.parquet"
    write_parquet(_problems(), probs)
    res = CliRunner().invoke(cli, ["grade", str(probs), str(_answers(tmp_path / "a.jsonl"))])
    assert res.exit_code == 0, res.output
    assert "Verdicts" in res.output and "accuracy 66.7%" in res.output
    assert "without an answer" in res.output and "f1" in res.output
    assert "not among the problems" in res.output and "ghost" in res.output


def test_grade_bad_answers_file_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    probs = tmp_path / "p.jsonl"
    write_jsonl(_problems(), probs)
    bad = tmp_path / "a.jsonl"
    bad.write_text('{"answer": "no id"}\n')
    with pytest.raises(SystemExit) as exc:
        main(["grade", str(probs), str(bad)])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and ":1:" in err and '"id"' in err


def test_tasks_list_shows_every_benchmark() -> None:
    res = CliRunner().invoke(cli, ["tasks", "list"], terminal_width=250)
    assert res.exit_code == 0, res.output
    for name in ("livecodebench", "gpqa_diamond", "bigcodebench", "humaneval", "rlpr"):
        assert name in res.output


def test_tasks_export_lcb_v6_new(tmp_path: Path) -> None:
    out = tmp_path / "lcb_v6.jsonl"
    res = CliRunner().invoke(
        cli,
        [
            "tasks",
            "export",
            "livecodebench",
            "--path",
            str(FIX / "livecodebench.jsonl"),
            "--version",
            "v6",
            "--only-new",
            "--out",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "wrote 1 problem" in res.output
    assert [p.id for p in read_jsonl(out)] == ["livecodebench/2050A"]


def test_tasks_export_humaneval_limit_and_option(tmp_path: Path) -> None:
    out = tmp_path / "he.jsonl"
    res = CliRunner().invoke(
        cli, ["tasks", "export", "humaneval", "--limit", "3", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert len(read_jsonl(out)) == 3
    out2 = tmp_path / "mmlu.jsonl"
    res = CliRunner().invoke(
        cli,
        [
            "tasks",
            "export",
            "mmlu",
            "--path",
            str(FIX / "mmlu.parquet"),
            "--option",
            "subject=biology",
            "--out",
            str(out2),
        ],
    )
    assert res.exit_code == 0, res.output
    assert [p.reference for p in read_jsonl(out2)] == ["C"]


def test_tasks_export_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(
            [
                "tasks",
                "export",
                "math500",
                "--path",
                str(tmp_path / "none"),
                "--out",
                str(tmp_path / "o.jsonl"),
            ]
        )
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: benchmark 'math500'") and "\n" not in err
    assert not (tmp_path / "o.jsonl").exists()
    with pytest.raises(SystemExit):
        main(
            [
                "tasks",
                "export",
                "gsm8k",
                "--version",
                "v1",
                "--path",
                str(FIX / "gsm8k.jsonl"),
                "--out",
                str(tmp_path / "o.jsonl"),
            ]
        )
    assert "does not take option" in capsys.readouterr().err
