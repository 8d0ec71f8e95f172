"""Training inputs: the pool's simulated workers know the training problems (or ``data.bank``)."""

from __future__ import annotations

import pytest

from conductor_core.errors import ConfigError
from conductor_core.simulation.problem_bank import known_problem
from conductor_core.tasks.problem import read_problems, write_jsonl
from conductor_core.train.config import build_config
from conductor_core.train.grpo import load_inputs
from conductor_core.workers.bundled import bundled_train_pool_path, bundled_train_problems_path
from conductor_core.workers.config import load_pool


def test_bundled_training_pool_knows_the_bundled_training_problems():
    pool = load_pool(bundled_train_pool_path())
    assert all(w.simulation.problems == ["bundled-train"] for w in pool.workers)
    first = read_problems(bundled_train_problems_path())[0]
    assert known_problem(pool, first.question) == first


def test_load_inputs_pool_knows_the_training_problems():
    config = build_config({}, stage="base", profile="tiny")
    train, _, pool = load_inputs(config)  # the pool carries the problems its workers know
    path = str(bundled_train_problems_path())
    assert all(w.simulation.problems == [path] for w in pool.workers)
    assert known_problem(pool, train[0].question) == train[0]


def test_load_inputs_pool_knows_only_the_bank_when_set(tmp_path):
    bank = read_problems(bundled_train_problems_path())[:5]
    write_jsonl(bank, tmp_path / "bank.jsonl")
    config = build_config({"data": {"bank": str(tmp_path / "bank.jsonl")}}, stage="base")
    _, by_id, pool = load_inputs(config)
    assert all(w.simulation.problems == [str(tmp_path / "bank.jsonl")] for w in pool.workers)
    assert [known_problem(pool, p.question) for p in bank] == bank
    outside = next(p for p in by_id.values() if p not in bank)
    assert known_problem(pool, outside.question) is None


def test_load_inputs_refuses_an_s3_problems_key_that_leaves_the_data_folder(tmp_path, monkeypatch):
    # The download target is named after the key's last part: `..` would be the output folder.
    from conductor_core.track.storage import Storage

    downloads: list[tuple[str, ...]] = []

    class _Client:
        def download_file(self, *args: str) -> None:
            downloads.append(args)

    monkeypatch.setattr(Storage, "client", property(lambda self: _Client()))
    config = build_config(
        {"data": {"problems": "s3://bucket/train/.."}, "output_dir": str(tmp_path / "out")},
        stage="base",
    )
    with pytest.raises(ConfigError, match=r"refusing the remote name '\.\.'"):
        load_inputs(config)
    assert downloads == []
