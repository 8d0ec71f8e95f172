"""The synchronous Python API (``conductor_core.api``) on the embedded default: the bundled
simulated pool, scripted and fixed plans; ``evaluate`` and ``train`` resolve what the CLI does."""

from __future__ import annotations

import asyncio
import json
import threading

import pytest

from conductor_core.api import Conductor, PlanStep, SolveResult, eval_config, evaluate, train_config

# demo-math-004, one of the bundled demo questions the bundled pool's workers know
QUESTION = (
    "A train travels 240 kilometres in 3 hours. At the same speed, how many kilometres "
    "does it travel in 5 hours?"
)


def _api_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("conductor-api")]


def test_the_api_imports_only_the_standard_library_at_module_level() -> None:
    """``from conductor_core import Conductor`` loads no dependency (a fresh interpreter's
    modules are checked in tests/integration/test_notebook.py)."""
    import ast
    from pathlib import Path

    import conductor_core
    import conductor_core.api as api

    for module in (conductor_core, api):
        tree = ast.parse(Path(module.__file__).read_text())
        names = {
            n.module or "" if isinstance(n, ast.ImportFrom) else a.name
            for n in tree.body
            if isinstance(n, ast.Import | ast.ImportFrom)
            for a in n.names
        }
        stdlib = {"__future__", "asyncio", "threading", "collections.abc", "concurrent.futures"}
        assert names <= stdlib | {"dataclasses", "pathlib", "typing"}, names
    assert "Conductor" in dir(conductor_core) and conductor_core.Conductor is Conductor
    with pytest.raises(AttributeError):
        conductor_core.no_such_name  # noqa: B018


def test_solve_returns_answer_plan_calls_and_cost() -> None:
    with Conductor() as conductor:
        result = conductor.solve(QUESTION)
    assert isinstance(result, SolveResult)
    assert result.ok and result.error is None and result.answer
    assert result.calls == 2 == len(result.plan)
    assert all(isinstance(s, PlanStep) for s in result.plan)
    first, second = result.plan
    assert first.worker_name == conductor.workers[first.worker] and first.subtask
    assert second.reads == (0,)  # the verification step reads the first step
    assert result.cost > 0 and result.tokens > 0 and result.rounds == 1
    assert result.grade is not None and result.grade.reference_id == "demo-math-004"
    assert result.correct is result.grade.correct
    data = json.loads(json.dumps(result.to_dict()))
    assert data["answer"] == result.answer and data["trace"]["calls"] == 2
    assert data["plan"][1]["reads"] == [0]
    assert not _api_threads()  # closed: the helper thread ended


def test_solve_is_what_the_cli_runs(capsys) -> None:
    """The same trace as ``conductor solve --json`` (same plan source, pool, options, seed)."""
    from conductor_core.cli import main

    main(["solve", QUESTION, "--json", "--rounds", "2", "--seed", "3"])
    printed = json.loads(capsys.readouterr().out)
    with Conductor(rounds=2) as conductor:
        result = conductor.solve(QUESTION, seed=3)
    assert result.answer == printed["answer"]
    assert result.trace.rounds[0].raw_plan == printed["rounds"][0]["raw_plan"]
    assert result.rounds == len(printed["rounds"]) == 2
    assert result.calls == printed["calls"] and result.cost == pytest.approx(printed["cost"])


def test_an_unknown_question_has_no_grade_and_events_reach_the_caller() -> None:
    events: list[str] = []
    with Conductor() as conductor:
        result = conductor.solve("What is 6 times 7?", on_event=lambda e: events.append(e["type"]))
    assert result.ok and result.grade is None and result.correct is None
    assert events[:2] == ["plan_start", "plan_end"] and "step_end" in events


def test_a_fixed_plan_source_object_and_a_format_error() -> None:
    from conductor_core.policy.fixed import FixedPlanSource, one_step
    from conductor_core.workflow.model import Step, Workflow

    with Conductor(one_step(2, "Answer the question.")) as conductor:
        result = conductor.solve(QUESTION)
    assert [s.worker for s in result.plan] == [2] and result.calls == 1
    assert result.plan[0].worker_name == conductor.workers[2]

    # a plan naming a worker the pool does not have: a format error, no call made
    bad = FixedPlanSource("bad", lambda _r: Workflow(steps=(Step(worker=9, subtask="x"),)))
    with Conductor(bad) as conductor:
        result = conductor.solve(QUESTION)
    assert not result.ok and result.answer is None and result.calls == 0
    assert result.error is not None and result.error.startswith("format_error: ")
    assert result.plan == ()


def test_solve_blocks_inside_a_running_event_loop_as_in_a_notebook() -> None:
    """A notebook's cell runs inside an event loop, where asyncio.run is refused."""

    async def cell() -> tuple[SolveResult, SolveResult]:
        with Conductor() as conductor:
            sync = conductor.solve(QUESTION)
            awaited = await conductor.asolve(QUESTION)
        return sync, awaited

    sync, awaited = asyncio.run(cell())
    assert sync.answer == awaited.answer and sync.ok
    assert not _api_threads()


def test_unknown_model_and_missing_pool_are_clear_errors(tmp_path) -> None:
    from conductor_core.errors import ConductorError

    with pytest.raises(ConductorError, match="pool config not found"):
        Conductor(pool=tmp_path / "absent.yaml")
    with Conductor("no-such-model") as conductor, pytest.raises(ConductorError, match="cannot use"):
        conductor.solve(QUESTION)


def test_evaluate_runs_a_shard_with_baselines(tmp_path) -> None:
    result = evaluate("demo", baselines="single:0,moa", limit=4, output_dir=tmp_path)
    assert result.methods == ["conductor:scripted", "single:sim-math-expert", "moa:1"]
    assert result.problems == 4 and result.records == 12
    row = result.summary.get("conductor:scripted")
    assert 0 <= row.accuracy <= 1 and row.calls_per_question == 2
    assert (tmp_path / "report.md").is_file() and result.records_path.is_file()
    # the records are the checkpoint: the same call adds nothing
    again = evaluate("demo", baselines=["single:0", "moa"], limit=4, output_dir=tmp_path)
    assert again.new_records == 0 and again.records == 12


def test_evaluate_inside_a_running_loop_and_through_the_conductor(tmp_path) -> None:
    async def cell():
        with Conductor(rounds=2) as conductor:
            return conductor.evaluate(limit=2, output_dir=tmp_path, evaluate_conductor=True)

    result = asyncio.run(cell())
    assert result.config.rounds == 2 and result.config.conductor == "scripted"
    assert result.config.conductor_temperature is None
    assert result.methods == ["conductor:scripted"] and result.problems == 2
    assert not _api_threads()


def test_the_conductors_decoding_reaches_its_plan_source_and_evaluation(monkeypatch) -> None:
    import conductor_core.api as api

    with Conductor("http://127.0.0.1:9/v1", temperature=0.0, plan_tokens=96) as conductor:
        assert (conductor.plan_source.temperature, conductor.plan_source.max_tokens) == (0.0, 96)
        monkeypatch.setattr(api, "evaluate", lambda benchmark, **fields: fields)
        fields = conductor.evaluate("demo")
        assert (fields["conductor_temperature"], fields["conductor_max_tokens"]) == (0.0, 96)


def test_eval_config_is_the_clis(tmp_path) -> None:
    from conductor_core.errors import ConfigError

    cfg = eval_config("demo", baselines=("single", "moa"), shard="1/4", pool=None)
    assert cfg.baselines == ["single", "moa"] and str(cfg.shard) == "1/4" and cfg.pool is None
    (tmp_path / "eval.yaml").write_text("benchmark: demo\nrepeats: 3\nlimit: 5\n")
    cfg = eval_config(config=tmp_path / "eval.yaml", repeats=2)
    assert (cfg.benchmark, cfg.repeats, cfg.limit) == ("demo", 2, 5)
    with pytest.raises(ConfigError, match="repeats"):
        eval_config("demo", repeats=0)
    with pytest.raises(ConfigError, match="give a benchmark"):
        eval_config()


def test_train_config_is_the_clis(tmp_path) -> None:
    """``train()`` resolves its config as ``conductor train --print-config`` does."""
    from click.testing import CliRunner

    from conductor_core.cli.train import command

    out = str(tmp_path / "out")
    argv = ["--profile", "tiny", "--steps", "3", "--out", out, "--set", "seed=7", "--print-config"]
    printed = CliRunner().invoke(command, argv, catch_exceptions=False).output
    cfg = train_config("base", profile="tiny", steps=3, output_dir=out, overrides={"seed": 7})
    assert cfg.to_yaml() == printed
    assert cfg.steps == 3 and cfg.profile == "tiny" and cfg.seed == 7


def test_train_runs_the_stage_off_the_running_loop(monkeypatch, tmp_path) -> None:
    """``train()`` calls run_stage with the resolved config (the stage itself is tested by the
    training tests); inside a running loop it runs in a thread of its own."""
    import conductor_core.train.grpo as grpo
    from conductor_core.api import train

    seen = {}

    def fake_run_stage(config, *, progress, log):
        seen.update(config=config, progress=progress, thread=threading.current_thread().name)
        return "result"

    monkeypatch.setattr(grpo, "run_stage", fake_run_stage)
    assert train("base", profile="tiny", steps=1, output_dir=tmp_path) == "result"
    assert seen["config"].steps == 1 and seen["progress"] is False
    assert seen["thread"] == threading.current_thread().name

    async def cell():
        return train("adaptive", profile="tiny", output_dir=tmp_path)

    assert asyncio.run(cell()) == "result"
    assert seen["config"].stage == "adaptive" and seen["thread"].startswith("conductor-api")
