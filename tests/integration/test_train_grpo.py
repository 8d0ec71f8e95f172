"""The three GRPO stages on a tiny CPU model: each runs, saves, tracks; a killed run resumes at
the right step with the same data order; the recursive trainer forces second rounds (the
recursive stage's batch arithmetic without training: tests/unit/test_train_grpo.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.train_configs import small

pytestmark = pytest.mark.slow

EXPERT_START = {"enabled": True, "executions": 4, "steps": 3, "batch_size": 4}
"""A small expert start on 12 questions (the stage tests that run one)."""


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    from conductor_core.train.grpo import run_stage

    out = tmp_path_factory.mktemp("train") / "base"
    db = out.parent / "mlflow.db"
    config = small(
        out,
        tracking={
            "backend": "mlflow",
            "tracking_uri": f"sqlite:///{db}",
            "log_model": False,
            "experiment": "unit",
        },
    )
    return config, run_stage(config, progress=False)


def test_base_stage_trains_saves_and_tracks(base_run):
    import mlflow

    config, result = base_run
    assert result.steps == 2
    assert (result.model_dir / "config.json").is_file()
    assert (config.output_path() / "warmup-model" / "config.json").is_file()
    summary = json.loads((config.output_path() / "summary.json").read_text())
    assert summary["steps"] == 2 and "reward_first" in summary
    assert len(result.history) >= 2 and "conductor/format_error_rate" in result.history[0]
    assert (config.output_path() / "checkpoints" / "checkpoint-2").is_dir()
    run = mlflow.MlflowClient(config.tracking.tracking_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["stage"] == "base"
    assert run.data.params["pool.workers.0.model"] == "sim-math"
    assert "reward" in run.data.metrics and "conductor/format_error_rate" in run.data.metrics


def test_adaptive_stage_starts_from_base(base_run, tmp_path):
    from conductor_core.train.grpo import run_stage

    _, base = base_run
    config = small(tmp_path / "adaptive", stage="adaptive", steps=1, init_from=str(base.model_dir))
    result = run_stage(config, progress=False)
    assert result.steps == 1 and (result.model_dir / "config.json").is_file()


def test_adaptive_stage_runs_the_expert_start_once(base_run, tmp_path):
    """In descriptor mode the expert start fine-tunes the base model on the best-executed workers,
    saves it (with its prompt spec) as the model GRPO starts from, and a rerun reuses it."""
    from conductor_core.train.grpo import run_stage
    from conductor_core.workflow.prompts import load_prompt_spec

    _, base = base_run
    config = small(
        tmp_path / "adaptive",
        stage="adaptive",
        steps=1,
        init_from=str(base.model_dir),
        data={"descriptors": True, "max_problems": 12},
        adaptive={"renumber": True},
        expert_start=EXPERT_START,
    )
    lines: list[str] = []
    result = run_stage(config, progress=False, log=lines.append)
    expert = config.output_path() / "expert-model"
    assert result.steps == 1 and (expert / "config.json").is_file()
    assert (config.output_path() / "expert-rates.json").is_file()  # what a rerun would reuse
    assert load_prompt_spec(expert).descriptors
    running = next(x for x in lines if x.startswith("expert start: running"))
    assert "12 questions x 4 workers x 4 executions (192 plan runs)" in running
    assert any(x.startswith("expert start: ran 192 plan runs") for x in lines)
    assert any(x.startswith("expert start: done") for x in lines)

    again: list[str] = []
    run_stage(config.model_copy(update={"steps": 2}), progress=False, log=again.append)
    assert f"expert start: reusing {expert}" in again
    assert not any(x.startswith("expert start: running") for x in again)


def test_recursive_stage_starts_from_executed_round2_contexts(base_run, tmp_path):
    """The recursive stage's expert start executes the model's round-1 plans (synthetic ones
    where the base model's do not parse), runs a new plan after each answer, fine-tunes and
    saves the model GRPO starts from (train/recursion_start.py)."""
    from conductor_core.train.grpo import run_stage

    _, base = base_run
    config = small(
        tmp_path / "recursive",
        stage="recursive",
        steps=1,
        init_from=str(base.model_dir),
        data={"max_problems": 12},
        expert_start=EXPERT_START,
    )
    lines: list[str] = []
    result = run_stage(config, progress=False, log=lines.append)
    assert result.steps == 1
    assert (config.output_path() / "expert-model" / "config.json").is_file()
    assert any(x.startswith("expert start: the model's round-1 plan parses for") for x in lines)
    assert "expert start: round-2 contexts of 12/12 questions" in lines
    contexts = next(x for x in lines if "round-2 contexts: keeping worth more" in x)
    assert contexts.startswith("expert start: 48 round-2 contexts")  # 12 questions x 4 runs
    assert any(x.startswith("expert start: done") for x in lines)


@pytest.fixture
def grammar_rows(monkeypatch) -> list[list[bool]]:
    """Each time the loss or the reference scores a batch under the plan grammar: which of its
    rows the grammar restricted."""
    import conductor_core.train.trainers as trainers

    seen: list[list[bool]] = []
    original = trainers.grammar_log_probs  # what the trainers call

    def spy(log_probs, hidden, head, allowed, temperature=1.0):
        seen.append((~allowed.all(dim=-1)).any(dim=1).tolist())
        return original(log_probs, hidden, head, allowed, temperature)

    monkeypatch.setattr(trainers, "grammar_log_probs", spy)
    return seen


def test_recursive_stage_forces_second_rounds_under_the_grammar(base_run, tmp_path, grammar_rows):
    """Forced second rounds, each continuing its own round-1 plan; with
    ``recursive.round2_grammar`` round 2 is sampled under the plan grammar and the loss scores
    exactly the round-2 rows under it (train/grammar_sampling.py)."""
    from conductor_core.train.grpo import run_stage
    from conductor_core.workflow.prompts import load_prompt_spec

    _, base = base_run
    config = small(
        tmp_path / "recursive",
        stage="recursive",
        steps=1,
        init_from=str(base.model_dir),
        recursive={"forced_fraction": 0.5, "round2_grammar": True},
        beta=0.05,
    )
    result = run_stage(config, progress=False)
    assert result.steps == 1
    logged = [h for h in result.history if "recursion/second_round_rows" in h]
    # 4 groups of 2 plans, half forced: one round-1 group paired with one round-2 group, whose
    # two rows each continue their own round-1 plan (the paper's sampling).
    assert logged and logged[0]["recursion/second_round_rows"] == 2.0
    assert 0.0 <= logged[0]["recursion/first_format_error_rate"] <= 1.0
    # Rows 2 and 3 are round 2, scored under the grammar twice: by the KL reference at
    # generation, then by the loss (after TRL's shuffle).
    assert grammar_rows and all(any(rows) for rows in grammar_rows)
    assert sum(sum(rows) for rows in grammar_rows) == 4
    # The trained model is saved with the prompt style it learned.
    assert load_prompt_spec(result.model_dir).style == "compact"


def test_base_stage_samples_and_scores_its_plans_under_the_grammar(
    base_run, tmp_path, grammar_rows
):
    """With ``generation.plan_grammar`` every round-1 plan is sampled under the plan grammar (so
    each one that ends parses) and every row is scored under it (train/grammar_sampling.py)."""
    from conductor_core.train.grpo import run_stage

    _, base = base_run
    config = small(
        tmp_path / "grammar",
        steps=1,
        init_from=str(base.model_dir),
        warmup={"enabled": False},
        generation={"max_completion_length": 96, "plan_grammar": True},
        experimental={"routing_coverage": 0},
    )
    result = run_stage(config, progress=False)
    assert result.steps == 1
    # Every row restricted, scored at generation (old log-probs) and by the loss.
    assert grammar_rows and all(all(rows) for rows in grammar_rows)


def expected_ids(config, steps: int) -> list[list[str]]:
    """The problem ids of each step's groups, from TRL's seeded sampler."""
    from trl.trainer.utils import RepeatSampler

    from conductor_core.train.data import build_dataset
    from conductor_core.train.grpo import load_inputs

    train, _, pool = load_inputs(config)
    ds = build_dataset(train, len(pool.workers), config)
    g, q = config.plans_per_question, config.questions_per_step
    order = list(
        RepeatSampler(ds, mini_repeat_count=g, batch_size=q, shuffle=True, seed=config.seed)
    )
    ids = ds["problem_id"]
    return [[ids[i] for i in order[s * q * g : (s + 1) * q * g : g]] for s in range(steps)]


def test_killed_run_resumes_at_the_right_step_with_the_same_data(tmp_path):
    from conductor_core.train.grpo import run_stage

    out = tmp_path / "resume"
    config = small(out, steps=4, warmup={"enabled": False})
    config.to_yaml(tmp_path / "c.yaml")
    # The child kills itself (SIGKILL, as an evicted pod dies) right after checkpoint-2 is saved:
    # polling from outside raced the child, which could finish all 4 steps between two polls.
    script = (
        "import os, signal, sys\n"
        "from transformers import TrainerCallback\n"
        "import conductor_core.train.grpo as grpo\n"
        "from conductor_core.train.config import load_config\n"
        "class Die(TrainerCallback):\n"
        "    def on_save(self, args, state, control, **kw):\n"
        "        if state.global_step == 2:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "make = grpo.make_callbacks\n"
        "grpo.make_callbacks = lambda *a, **k: [*make(*a, **k), Die()]\n"
        "grpo.run_stage(load_config(sys.argv[1]), progress=False)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path / "c.yaml")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        timeout=300,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    assert (out / "checkpoints" / "checkpoint-2" / "trainer_state.json").is_file()
    assert not (out / "checkpoints" / "checkpoint-3").exists()
    assert not (out / "model").exists()
    result = run_stage(config, progress=False)
    assert result.resumed_from is not None
    resumed_at = int(Path(result.resumed_from).name.split("-")[1])
    assert resumed_at >= 2
    assert result.steps == 4
    steps_logged = [int(h["step"]) for h in result.history if "reward" in h]
    assert steps_logged == list(range(resumed_at + 1, 5))
    expected = expected_ids(config, 4)
    for h in result.history:
        if "problem_ids" in h:
            assert h["problem_ids"] == expected[int(h["step"]) - 1]
