"""``conductor parse``: JSON out, exit codes, stdin and files."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conductor_core.cli import cli, main

PLAN = 'ok</think>\nmodel_id = [1, 0]\nsubtasks = ["Solve.", "Check."]\naccess_list = [[], ["all"]]'


def invoke(args: list[str], stdin: str | None = None):
    return CliRunner().invoke(cli, ["parse", *args], input=stdin)


def test_parses_stdin_to_json() -> None:
    result = invoke(["--workers", "2"], stdin=PLAN)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "model_id": [1, 0],
        "subtasks": ["Solve.", "Check."],
        "access_list": [[], ["all"]],
        "access_mode": "binary",
    }


def test_parses_a_file_and_dash(tmp_path) -> None:
    path = tmp_path / "out.txt"
    path.write_text(PLAN, encoding="utf-8")
    assert json.loads(invoke([str(path)]).stdout)["model_id"] == [1, 0]
    assert json.loads(invoke(["-"], stdin=PLAN).stdout)["model_id"] == [1, 0]


def test_format_error_is_json_and_exit_1() -> None:
    result = invoke(["--workers", "1"], stdin=PLAN)
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {
        "error": {
            "code": "unknown_worker",
            "message": "step 0 uses model 1, which is not offered; the only offered model is 0",
        }
    }
    assert "unknown_worker" in result.stderr


def test_options_reach_the_parser() -> None:
    index_plan = 'model_id = [0, 0]\nsubtasks = ["a", "b"]\naccess_list = [[], [0]]'
    assert invoke([], stdin=index_plan).exit_code == 1
    result = invoke(["--access-mode", "index"], stdin=index_plan)
    assert json.loads(result.stdout)["access_list"] == [[], [0]]
    assert json.loads(invoke(["--max-steps", "1"], stdin=index_plan).stdout)["error"]["code"] in {
        "too_many_steps",
        "bad_access_entry",
    }
    empty = "model_id = []\nsubtasks = []\naccess_list = []"
    assert json.loads(invoke([], stdin=empty).stdout)["error"]["code"] == "empty_plan"
    kept = invoke(["--allow-empty"], stdin=empty)
    assert kept.exit_code == 0 and json.loads(kept.stdout)["model_id"] == []


def test_missing_file_is_one_line_exit_2(tmp_path) -> None:
    missing = tmp_path / "nope.txt"
    result = invoke([str(missing)])
    assert result.exit_code == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "does not exist" in lines[0]


def test_main_entry_point_exit_codes(tmp_path, capsys) -> None:
    path = tmp_path / "bad.txt"
    path.write_text("no plan", encoding="utf-8")
    with pytest.raises(SystemExit) as info:
        main(["parse", str(path)])
    assert info.value.code == 1
    assert json.loads(capsys.readouterr().out)["error"]["code"] == "missing_list"
    with pytest.raises(SystemExit) as info:
        main(["parse", str(tmp_path / "absent.txt")])
    assert info.value.code == 2
    good = tmp_path / "good.txt"
    good.write_text(PLAN, encoding="utf-8")
    main(["parse", str(good)])
    assert json.loads(capsys.readouterr().out)["subtasks"] == ["Solve.", "Check."]
