"""`conductor solve` and `conductor plan` on the embedded default (bundled simulated pool)."""

from __future__ import annotations

import json

import pytest
import yaml

from conductor_core.cli import main

QUESTION = (
    "A train travels 240 kilometres in 3 hours. At the same speed, how many kilometres "
    "does it travel in 5 hours?"
)


def test_solve_shows_plan_steps_answer_and_totals(capsys) -> None:
    main(["solve", QUESTION])
    out = capsys.readouterr().out
    assert "Plan" in out and "step 0" in out and "step 1" in out
    assert "Answer" in out and "calls 2" in out and "cost $" in out
    assert "graded against demo-math-004" in out


def test_solve_json_prints_the_trace(capsys) -> None:
    main(["solve", QUESTION, "--json", "--rounds", "2"])
    trace = json.loads(capsys.readouterr().out)
    assert trace["question"] == QUESTION and trace["answer"]
    first = trace["rounds"][0]
    assert first["raw_plan"].startswith("#") and first["workflow"]["calls"] == 2
    step = first["workflow"]["steps"][1]
    assert step["visible"] == [0] and len(step["prompt_digest"]) == 16 and step["model"]
    assert trace["rounds"][1]["kept_previous"]


def test_solve_grades_a_question_of_the_problems_the_workers_know(tmp_path, capsys) -> None:
    from conductor_core.tasks.problem import Problem, write_jsonl
    from conductor_core.workers.bundled import bundled_pool_path

    question = "What is 6 times 7?"
    problem = Problem(id="m-own", source="t", domain="math", question=question, reference="42")
    write_jsonl([problem], tmp_path / "own.jsonl")
    main(["solve", question])
    assert "graded against" not in capsys.readouterr().out  # not a bundled problem
    main(["solve", question, "--problems", str(tmp_path / "own.jsonl")])
    assert "graded against m-own's reference" in capsys.readouterr().out
    # the pool's own `simulation.problems`, relative to the pool file
    data = yaml.safe_load(bundled_pool_path().read_text())
    for worker in data["workers"]:
        worker["simulation"]["problems"] = ["own.jsonl"]
    (tmp_path / "pool.yaml").write_text(yaml.safe_dump(data))
    main(["solve", question, "--pool", str(tmp_path / "pool.yaml")])
    assert "graded against m-own's reference" in capsys.readouterr().out
    main(["solve", QUESTION, "--pool", str(tmp_path / "pool.yaml")])
    assert "graded against" not in capsys.readouterr().out


def test_plan_only_prints_json(capsys) -> None:
    main(["plan", "Which option is a noble gas?\nA. Chlorine\nB. Neon\nC. Hydrogen\nD. Oxygen"])
    out = json.loads(capsys.readouterr().out)
    assert out["error"] is None and out["plan"]["model_id"][0] == 1  # routed to the mcq expert


def test_missing_key_and_missing_pool_are_one_line_errors(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        yaml.safe_dump(
            {
                "workers": [
                    {
                        "provider": "openai",
                        "model": "gpt-x",
                        "endpoint": "https://api.example.com/v1",
                        "api_key_env": "NO_SUCH_KEY_VAR",
                    }
                ]
            }
        )
    )
    with pytest.raises(SystemExit) as exc:
        main(["solve", "hi", "--pool", str(pool)])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and "NO_SUCH_KEY_VAR" in err
    with pytest.raises(SystemExit) as exc:
        main(["solve", "hi", "--pool", str(tmp_path / "missing.yaml")])
    assert exc.value.code == 2 and "not found" in capsys.readouterr().err
