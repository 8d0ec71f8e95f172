"""The three GRPO stages on a tiny CPU model: each runs, saves, tracks; a killed run resumes at
the right step with the same data order; the recursive trainer forces second rounds."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conductor_core.train.config import build_config
from conductor_core.train.recursive import (
    answered_rows,
    balanced_sources,
    decision_floor,
    discount_rows,
    forced_pairs,
    is_keep_text,
    pair_rows,
)

pytestmark = pytest.mark.slow


def small(out: Path, stage: str = "base", **extra):
    data = {
        "output_dir": str(out),
        "steps": 2,
        "questions_per_step": 4,
        "plans_per_question": 2,
        "model": {"tiny": {"hidden": 64, "heads": 2, "kv_heads": 1, "layers": 1, "vocab": 400}},
        "generation": {"max_completion_length": 24},
        "warmup": {"steps": 2, "batch_size": 4},
        "data": {"max_problems": 40},
        "checkpoint": {"save_steps": 1},
        "tracking": {"backend": "none"},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return build_config(data, stage=stage, profile="tiny")


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


def test_forced_pairs():
    assert forced_pairs(4, 0.5) == 1
    assert forced_pairs(8, 0.5) == 2
    assert forced_pairs(4, 1.0) == 2
    assert forced_pairs(4, 0.0) == 0
    assert forced_pairs(1, 1.0) == 0


@pytest.mark.parametrize(
    ("keeps", "minimum", "n_keep", "n_new"),
    [
        ([False] * 4, 2, 2, 0),
        ([True] * 4, 2, 0, 2),
        ([True, False, False, False], 2, 1, 0),
        ([True, False, True, False], 2, 0, 0),
        ([True] * 8, 1, 0, 1),
        ([False] * 3, 2, 1, 0),  # at most half of the group is turned
        ([True, False], 0, 0, 0),
    ],
)
def test_decision_floor_turns_just_enough_rows_of_the_other_decision(keeps, minimum, n_keep, n_new):
    from random import Random

    to_keep, to_new = decision_floor(keeps, minimum, Random(0))
    assert len(to_keep) == n_keep and len(to_new) == n_new
    assert all(not keeps[i] for i in to_keep) and all(keeps[i] for i in to_new)
    after = [(k or i in to_keep) and i not in to_new for i, k in enumerate(keeps)]
    half = min(minimum, len(keeps) // 2)
    assert sum(after) >= half and len(after) - sum(after) >= half


def test_balanced_sources_continues_right_and_wrong_answers_equally_often():
    from random import Random

    # 8 groups of 4 rows; one right answer in each group (25% right overall).
    correct = [[i == j % 4 for i in range(4)] for j in range(8)]
    for seed in range(5):
        picks = balanced_sources(correct, Random(seed))
        chosen = [correct[j][i] for j, i in enumerate(picks)]
        assert sum(chosen) == 4  # random picks would continue 2 right answers on average
    # Groups with one class only give what they have.
    picks = balanced_sources([[True, True], [False, False, False]], Random(0))
    assert picks[0] in (0, 1) and picks[1] in (0, 1, 2)


def test_is_keep_text():
    from conductor_core.train.warmup import KEEP_PLAN

    assert is_keep_text(KEEP_PLAN, 5, "binary")
    assert not is_keep_text('model_id = [0]\nsubtasks = ["solve"]\naccess_list = [[]]', 5, "binary")
    assert not is_keep_text("gibberish", 5, "binary")


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
    mlflow.set_tracking_uri(config.tracking.tracking_uri)
    run = mlflow.get_run(result.run_id)
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


@pytest.mark.parametrize(("contexts", "expected"), [("shared", 1.0), ("per_plan", 2.0)])
def test_recursive_stage_forces_second_rounds(base_run, tmp_path, contexts, expected):
    from conductor_core.train.grpo import run_stage
    from conductor_core.workflow.prompts import load_prompt_spec

    _, base = base_run
    config = small(
        tmp_path / "recursive",
        stage="recursive",
        steps=1,
        init_from=str(base.model_dir),
        recursive={
            "forced_fraction": 0.5,
            "round2_contexts": contexts,
            "balance_sources": contexts == "shared",
            "discount_format_errors": contexts == "per_plan",
        },
    )
    result = run_stage(config, progress=False)
    assert result.steps == 1
    logged = [h for h in result.history if "recursion/second_round_rows" in h]
    # 4 groups of 2 plans, half forced: one round-1 group paired with one round-2 group, whose
    # two rows continue one shared round-1 plan, or each its own (per_plan, the paper's).
    assert logged and logged[0]["recursion/second_round_rows"] == 2.0
    assert logged[0]["recursion/contexts"] == expected
    assert 0.0 <= logged[0]["recursion/first_format_error_rate"] <= 1.0
    # The trained model is saved with the prompt style it learned.
    assert load_prompt_spec(result.model_dir).style == "compact"


def test_paper_profile_recursive_batch_composition_and_discount():
    """The paper: 4 questions x 64 plans, half of each batch forced into a second round, every
    forced round-2 plan continuing its own round-1 plan, round-1 advantages discounted by 0.25."""
    from random import Random

    import torch

    config = build_config(stage="recursive", profile="paper")
    spec = config.recursive
    groups, g = config.questions_per_step, config.plans_per_question
    pairs = forced_pairs(groups, spec.forced_fraction)
    first, second, sources = pair_rows(pairs, g, spec.round2_contexts, Random(0))
    assert (groups, g) == (4, 64)
    assert len(first) + len(second) == groups * g // 2  # half of the batch's plans
    assert second == list(range(g, 2 * g)) and first == list(range(g))
    assert len(set(sources)) == g  # 64 distinct recursion contexts per step
    advantages = torch.ones(groups * g)
    discount_rows(advantages, first, spec.first_round_discount)
    assert advantages[:g].tolist() == [0.25] * g and advantages[g:].tolist() == [1.0] * 3 * g
    # The shared layout: one context per round-2 group.
    _, _, shared = pair_rows(2, 4, "shared", Random(0))
    assert len(set(shared[:4])) == 1 and len(set(shared[4:])) == 1 and shared[0] < 4


def test_round_one_format_errors_can_escape_the_discount():
    """With ``discount_format_errors`` off, a round-1 keep plan (a format error: there is no answer
    to keep yet) keeps its full advantage while the other round-1 plans are discounted."""
    import torch

    from conductor_core.outcome import Outcome

    outcomes = [Outcome(format_error=True), Outcome(reward=1.0), Outcome(reward=0.5)]
    rows = answered_rows([0, 1, 2, 7], outcomes)  # row 7: no outcome here (another process)
    assert rows == [1, 2, 7]
    advantages = torch.tensor([-1.0, 1.0, -0.5, 0.4])
    discount_rows(advantages, rows, 0.25)
    assert advantages.tolist() == pytest.approx([-1.0, 0.25, -0.125, 0.4])


def test_init_from_must_be_a_model_dir(tmp_path):
    from conductor_core.errors import ConfigError
    from conductor_core.train.grpo import initial_model_dir

    config = small(tmp_path / "x", stage="adaptive", init_from=str(tmp_path))
    with pytest.raises(ConfigError, match="init_from"):
        initial_model_dir(config, [], 4)


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


def test_recursive_decision_floor_puts_both_decisions_in_every_group(base_run, tmp_path):
    from conductor_core.train.grpo import run_stage

    _, base = base_run
    config = small(
        tmp_path / "floor",
        stage="recursive",
        steps=1,
        init_from=str(base.model_dir),
        recursive={"min_decision_share": 0.5},
    )
    result = run_stage(config, progress=False)
    logged = [h for h in result.history if "recursion/filled_share" in h]
    # The 2-warm-up-step model never writes the keep plan by itself: the floor fills one row of
    # the group with it, and it parses as a keep.
    assert logged and logged[0]["recursion/filled_share"] >= 0.5
    assert logged[0]["recursion/keep_rate"] > 0.0
