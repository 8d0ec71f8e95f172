"""The random simulated pools the learning test and bench/bench_learning_pools.py train on."""

from __future__ import annotations

import pytest

from bench.experiment import random_pool, with_random_pool
from conductor_core.train.reward import best_workers
from conductor_core.workers.config import load_pool


def test_random_pools_are_seeded_and_put_the_best_workers_at_random_ids(tmp_path):
    pools = [load_pool(random_pool(seed, tmp_path / f"p{seed}.yaml")) for seed in range(8)]
    again = load_pool(random_pool(3, tmp_path / "again.yaml"))
    assert again.model_dump() == pools[3].model_dump()
    layouts = {tuple(sorted(best_workers(p).items())) for p in pools}
    assert len(layouts) > 4  # the best workers move between pools
    for pool in pools:
        best = best_workers(pool)
        assert set(best) == {"math", "mcq", "freeform"}
        for domain, worker in best.items():
            skills = [w.simulation.skills[domain] for w in pool.workers]
            assert 0.8 <= skills[worker] <= 0.95
            assert all(0.15 <= s <= 0.45 for i, s in enumerate(skills) if i != worker)
        assert all(w.simulation.hedge_when_wrong == 0.8 for w in pool.workers)


def test_with_random_pool_points_the_data_at_the_written_pool(tmp_path):
    assert with_random_pool({"steps": 3}, None, tmp_path / "pool.yaml") == {"steps": 3}
    extra = with_random_pool({"data": {"split": None}}, 1, tmp_path / "pool.yaml")
    assert extra == {"data": {"split": None, "pool": str(tmp_path / "pool.yaml")}}
    assert (tmp_path / "pool.yaml").is_file()


def test_checked_overrides_parse_good_items_and_refuse_bad_ones(tmp_path):
    from bench.experiment import checked_overrides
    from conductor_core.errors import ConfigError

    extra = checked_overrides(["beta=0.04", "generation.temperature=0.7"], tmp_path)
    assert extra == {"beta": 0.04, "generation": {"temperature": 0.7}}
    with pytest.raises(ConfigError, match="nosuch"):
        checked_overrides(["nosuch=1"], tmp_path)
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        checked_overrides(["steps"], tmp_path, stage="recursive")


def test_a_first_round_keep_plan_is_counted_whatever_the_parser_called_it():
    from bench.experiment import is_first_round_keep
    from conductor_core.workflow.trace import RoundTrace, SolveTrace

    keep = "model_id = []\nsubtasks = []\naccess_list = []"
    plan = 'model_id = [0]\nsubtasks = ["Answer."]\naccess_list = [[]]'
    for raw, error, expected in ((keep, {"code": "empty_plan"}, True), (plan, None, False)):
        trace = SolveTrace(
            question="q", rounds=[RoundTrace(round=0, raw_plan=raw, plan_error=error)]
        )
        assert is_first_round_keep(trace, 5, "index") is expected
    assert not is_first_round_keep(SolveTrace(question="q"), 5, "index")


def test_the_experiments_train_each_stage_as_its_profile_does(tmp_path):
    """A bench's stage runs the profile's warm-up and steps for that stage (the recursive stage:
    no warm-up, its expert start instead), unless it asks for other lengths."""
    from bench.experiment import learning_config
    from conductor_core.train.config import build_config

    for stage in ("base", "recursive"):
        profile = build_config({}, stage=stage, profile="tiny")
        got = learning_config(tmp_path, stage=stage, steps=None)
        assert got.warmup == profile.warmup and got.expert_start == profile.expert_start
        assert got.steps == profile.steps
    assert learning_config(tmp_path, stage="base", warmup_steps=7).warmup.steps == 7
    recursive = learning_config(tmp_path, stage="recursive", steps=None)
    assert not recursive.warmup.enabled and recursive.expert_start.enabled
