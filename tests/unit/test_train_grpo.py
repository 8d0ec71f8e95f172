"""The recursive GRPO stage's arithmetic without training: forced pairs, round-2 advantages
measured against keeping, keep plans, the paper profile's batch composition
and discount, the round-2 prompt ids, and the ``init_from`` check (the stages trained on a tiny
CPU model: tests/integration/test_train_grpo.py)."""

from __future__ import annotations

import pytest

from conductor_core.train.config import build_config
from conductor_core.train.recursive import (
    discount_rows,
    forced_pairs,
    is_keep_text,
    pair_rows,
    prompt_token_ids,
    rank_pairs,
)
from tests.support.train_configs import small


def test_forced_pairs():
    assert forced_pairs(4, 0.5) == 1
    assert forced_pairs(8, 0.5) == 2
    assert forced_pairs(4, 1.0) == 2
    assert forced_pairs(4, 0.0) == 0
    assert forced_pairs(1, 1.0) == 0


def test_round_2_advantages_are_measured_against_keeping_the_answer():
    """A round-2 row's advantage is its final reward minus the reward of the round-1 answer it
    continues (known exactly); round-1 rows and rows another process holds are left alone, and
    a spoiled reward gives 0."""
    import torch

    from conductor_core.outcome import Outcome
    from conductor_core.train.recursive import measure_against_keeping

    def scored(reward):
        return Outcome(reward=reward, domain="math", correct=reward == 1.0, answer="42")

    # Rows 0-3: round 1 (right, right, wrong, wrong); rows 4-7: round 2, row 4 + k continuing
    # row k: kept the right answer, broke it, fixed the wrong one, spoiled.
    firsts = dict(enumerate([scored(1.0), scored(1.0), scored(0.5), scored(0.5)]))
    rewards = [1.0, 1.0, 0.5, 0.5, 1.0, 0.5, 1.0, None]
    rows = ([0, 1, 2, 3], [4, 5, 6, 7])
    advantages = torch.full((8, 3), 9.0)  # per-token advantages, as the correction leaves them
    measure_against_keeping(advantages, *rows, rewards, firsts)
    assert advantages[:4].eq(9.0).all()  # round 1: GRPO's own
    assert advantages[4:, 0].tolist() == [0.0, -0.5, 0.5, 0.0]
    assert advantages[4:].eq(advantages[4:, :1]).all()  # one value for every token of a row
    short = torch.full((5,), 9.0)  # another process holds rows 5-7
    measure_against_keeping(short, *rows, rewards, firsts)
    assert short.tolist() == [9.0, 9.0, 9.0, 9.0, 0.0]


@pytest.mark.parametrize("world", [1, 2, 4])
def test_each_row_of_a_step_draws_its_own_sample_index_over_ranks(world):
    """The trainer's rows are counted over all ranks (one question's group may span two): the
    ranks' rows together draw the indices one process holding the whole step draws, each once;
    on one process, the reward's indices of old (``step * rows * 4 + row``)."""
    from types import SimpleNamespace

    from conductor_core.train.trainers import OfferedGRPOTrainer

    rows, step = 8, 5
    drawn = []
    for rank in range(world):
        trainer = SimpleNamespace(
            accelerator=SimpleNamespace(process_index=rank, num_processes=world),
            state=SimpleNamespace(global_step=step),
        )
        drawn += OfferedGRPOTrainer._row_sample_indices(trainer, rows // world)
    assert drawn == [step * rows * 4 + row for row in range(rows)]


def test_is_keep_text():
    from conductor_core.train.warmup import KEEP_PLAN

    assert is_keep_text(KEEP_PLAN, 5, "binary")
    assert not is_keep_text('model_id = [0]\nsubtasks = ["solve"]\naccess_list = [[]]', 5, "binary")
    assert not is_keep_text("gibberish", 5, "binary")


def test_paper_profile_recursive_batch_composition_and_discount():
    """The paper: 64 plans a question, half of each batch forced into a second round, every
    forced round-2 plan continuing its own round-1 plan, round-1 advantages discounted by 0.25."""
    import torch

    config = build_config(stage="recursive", profile="paper")
    spec = config.recursive
    groups, g = config.questions_per_step, config.plans_per_question
    pairs = forced_pairs(groups, spec.forced_fraction)
    first, second = pair_rows(pairs, g)
    assert (groups, g) == (32, 64)
    assert len(first) + len(second) == groups * g // 2  # half of the batch's plans
    assert first[:g] == list(range(g)) and second[:g] == list(range(g, 2 * g))
    advantages = torch.ones(groups * g)
    discount_rows(advantages, first, spec.first_round_discount)
    assert advantages[:g].tolist() == [0.25] * g and advantages[g : 2 * g].tolist() == [1.0] * g
    assert pair_rows(2, 3) == ([0, 1, 2, 6, 7, 8], [3, 4, 5, 9, 10, 11])


@pytest.mark.parametrize("world", [1, 2, 8, 16])
def test_forced_pairs_are_a_share_of_the_whole_step_over_ranks(world):
    """Over any number of ranks the step forces the same pairs as on one process: the paper
    profile's half of 32 groups, even where a rank holds two groups (16 GPUs), where a
    per-rank count would round to none."""
    groups = 32 // world
    per_rank = [rank_pairs(groups, 0.5, rank, world) for rank in range(world)]
    assert sum(per_rank) == forced_pairs(32, 0.5) == 8
    assert all(2 * pairs <= groups for pairs in per_rank)
    assert forced_pairs(2, 0.5) == 0  # what each of 16 ranks would force on its own
    assert [rank_pairs(4, 1.0, r, 2) for r in (0, 1)] == [2, 2]
    assert [rank_pairs(4, 0.25, r, 2) for r in (0, 1)] == [1, 0]


def test_init_from_must_be_a_model_dir(tmp_path):
    from conductor_core.errors import ConfigError
    from conductor_core.train.grpo import initial_model_dir

    config = small(tmp_path / "x", stage="adaptive", init_from=str(tmp_path))
    with pytest.raises(ConfigError, match="init_from"):
        initial_model_dir(config, [], 4)


def test_round_2_prompt_ids_hold_the_round_1_prompt_the_plan_and_the_recursion_turn(tmp_path):
    """What the recursive trainer generates round 2 from: the round-1 prompt's ids unchanged,
    the round-1 plan as the model's own turn (its tokens and end-of-turn token, as it wrote
    them), the recursion turn, then the generation prompt."""
    from transformers import AutoTokenizer

    from conductor_core.policy.base import PreviousRound
    from conductor_core.policy.tiny import build_tiny_conductor
    from conductor_core.solve import SolveOptions, plan_request
    from conductor_core.train.warmup import completion_token_ids
    from conductor_core.workflow.prompts import plan_messages

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_conductor(tmp_path / "tiny"))
    options = SolveOptions(max_steps=2, prompt_style="compact", worker_ids=(1, 3))
    plan = 'model_id = [3]\nsubtasks = ["Solve it."]\naccess_list = [[]]'
    previous = PreviousRound(plan=plan, answer="\\boxed{4}")
    first = plan_request("What is 2+2?", 4, options)
    second = plan_request("What is 2+2?", 4, options, previous=previous)

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    ids = prompt_token_ids(tokenizer, second)
    round_1 = prompt_token_ids(tokenizer, first)  # ends with the generation prompt
    written = completion_token_ids(tokenizer, plan)  # as the model wrote it in round 1
    assert ids[: len(round_1) + len(written)] == round_1 + written
    turn = plan_messages(second)[-1]["content"]
    assert "\\boxed{4}" in turn
    assert ids[len(round_1) + len(written) :] == encode(
        f"\n<|im_start|>user\n{turn}<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_run_whose_last_step_the_training_stream_cannot_hold_is_refused_before_it_starts(
    tmp_path,
):
    """The last step's rows (and their executions) must have sample indices of their own
    (conductor_core/sample_streams.py): a run too long for them is refused when its trainer is
    built, not when it gets there."""
    from types import SimpleNamespace

    from conductor_core.sample_streams import SampleIndexError
    from conductor_core.train.grpo import build_trainer

    config = small(tmp_path, steps=10**7, questions_per_step=4, plans_per_question=1024)
    reward = SimpleNamespace(executions=8)
    with pytest.raises(SampleIndexError, match="does not fit the training stream"):
        build_trainer(config, None, None, None, reward, None, [])
