"""Which process of a torchrun launch this is, and each rank's share of a step's batch (the
launch itself, two processes on CPU: tests/integration/test_train_ranks.py)."""

from __future__ import annotations

import pytest

from conductor_core.errors import ConfigError
from conductor_core.train import ranks
from conductor_core.train.grpo import rank_batch
from tests.support.train_configs import small

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


@pytest.fixture
def no_launch(monkeypatch):
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_without_torchrun_this_is_the_only_process(no_launch):
    here = ranks.current()
    assert (here.rank, here.world_size, here.local_rank) == (0, 1, 0)
    assert here.is_main and here.is_local_main and not here.distributed
    assert ranks.is_main_process()
    with ranks.local_main_first() as inside:  # no process group, no barrier
        assert inside == here
    ranks.wait_for_everyone()
    ranks.init_distributed("cpu")  # nothing to join


@pytest.mark.parametrize(
    ("env", "rank", "main", "local_main"),
    [
        ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"}, 0, True, True),
        ({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"}, 1, False, False),
        # second node of two, two processes each: its local main is not the main process
        (
            {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "2"},
            2,
            False,
            True,
        ),
    ],
)
def test_ranks_come_from_torchrun_variables(no_launch, env, rank, main, local_main):
    for name, value in env.items():
        no_launch.setenv(name, value)
    here = ranks.current()
    assert here.rank == rank and here.distributed
    assert here.is_main is main and ranks.is_main_process() is main
    assert here.is_local_main is local_main
    assert here.label() == f"rank {rank}/{env['WORLD_SIZE']}"


@pytest.mark.parametrize(("name", "value"), [("RANK", "x"), ("RANK", "2")])
def test_bad_rank_variables_are_named(no_launch, name, value):
    no_launch.setenv("WORLD_SIZE", "2")
    no_launch.setenv(name, value)
    with pytest.raises(ConfigError, match="RANK"):
        ranks.current()


def test_each_rank_takes_its_share_of_the_step(tmp_path):
    # 4 questions x 2 plans = 8 completions per optimiser step, whatever the number of ranks.
    config = small(tmp_path)
    assert rank_batch(config, 1) == (8, 1)
    assert rank_batch(config, 2) == (4, 1)
    assert rank_batch(config, 4) == (2, 1)
    # micro_batch_size bounds a forward pass on every rank
    config = small(tmp_path, questions_per_step=8, plans_per_question=4, micro_batch_size=8)
    for world in (1, 2, 4, 8):
        micro, accumulation = rank_batch(config, world)
        assert micro <= 8 and micro * accumulation * world == 32
    config = small(tmp_path, questions_per_step=8, plans_per_question=4, micro_batch_size=2)
    assert rank_batch(config, 2) == (2, 8)


@pytest.mark.parametrize("stage", ["base", "adaptive", "recursive"])
@pytest.mark.parametrize("world", [2, 8, 16])
def test_the_paper_profile_splits_a_step_over_ranks(stage, world):
    """4 x 64 plans over 2, 8 or 16 GPUs (a group of 64 then spans ranks: TRL normalises
    rewards after gathering them); the recursive stage's 32 x 64 in whole pairs of groups."""
    from conductor_core.train.config import build_config

    config = build_config(stage=stage, profile="paper")
    micro, accumulation = rank_batch(config, world)
    assert micro * accumulation * world == config.completions_per_step
    assert micro <= config.micro_batch
    if stage == "recursive":
        assert (config.questions_per_step // world) % 2 == 0


def test_only_whole_group_mechanisms_need_whole_groups(tmp_path):
    # 3 questions x 2 plans over 2 ranks: a group spans both ranks, which plain GRPO allows
    plain = small(tmp_path, questions_per_step=3, experimental={"routing_coverage": 0})
    assert rank_batch(plain, 2) == (3, 1)
    with pytest.raises(ConfigError, match=r"\(6\) must be a multiple .* processes \(4\)"):
        rank_batch(plain, 4)
    coverage = small(tmp_path, questions_per_step=3, experimental={"routing_coverage": 2})
    with pytest.raises(ConfigError, match=r"questions_per_step \(3\).*routing_coverage"):
        rank_batch(coverage, 2)
    recursive = small(tmp_path, stage="recursive", questions_per_step=4)
    assert rank_batch(recursive, 2) == (4, 1)
    with pytest.raises(ConfigError, match=r"questions_per_step \(4\).*twice.*\(8\)"):
        rank_batch(recursive, 4)


def test_under_fsdp_every_rank_gathers_the_state_rank_0_saves():
    from types import SimpleNamespace

    from conductor_core.train.grpo import sharded_state_dict

    gathered = []

    class Accelerator:
        def get_state_dict(self, model):
            gathered.append(model)
            return {"w": 1}

    sharded = SimpleNamespace(is_fsdp_enabled=True, accelerator=Accelerator(), model="policy")
    assert sharded_state_dict(sharded) == {"w": 1} and gathered == ["policy"]
    assert sharded_state_dict(SimpleNamespace(is_fsdp_enabled=False)) is None
