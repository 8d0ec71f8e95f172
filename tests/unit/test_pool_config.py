"""Pool config validation as seen through the pool: errors name the field; subsets keep ids."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conductor_core.errors import ConfigError
from conductor_core.workers.config import load_pool, parse_pool
from conductor_core.workers.pool import WorkerPool
from conductor_core.workers.types import Completion, Usage

SIM = {"provider": "simulated", "model": "sim"}


def test_bad_concurrency_names_the_field() -> None:
    with pytest.raises(ConfigError, match=r"workers\.1\.concurrency"):
        parse_pool({"workers": [SIM, {**SIM, "concurrency": 0}]})


def test_missing_endpoint_for_openai_is_explained() -> None:
    with pytest.raises(
        ConfigError, match=r"workers\.0.*endpoint is required for provider 'openai'"
    ):
        parse_pool([{"provider": "openai", "model": "gpt"}])


def test_api_key_env_holding_a_secret_is_rejected_without_echoing_it() -> None:
    secret = "sk-proj-abc123-def456"
    with pytest.raises(ConfigError, match="NAME of an environment variable") as info:
        parse_pool(
            [
                {
                    "provider": "openai",
                    "model": "gpt",
                    "endpoint": "https://api.openai.com/v1",
                    "api_key_env": secret,
                }
            ]
        )
    assert "workers.0" in str(info.value)


def test_unknown_field_and_provider_are_named() -> None:
    with pytest.raises(ConfigError, match=r"workers\.0\.temprature"):
        parse_pool([{**SIM, "temprature": 0.1}])
    with pytest.raises(ConfigError, match=r"workers\.0\.provider"):
        parse_pool([{"provider": "bard", "model": "x"}])
    with pytest.raises(ConfigError, match=r"retry\.backoff_base_s"):
        parse_pool({"workers": [SIM], "retry": {"backoff_base_s": -1}})


def test_from_yaml_reports_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text("workers:\n  - provider: simulated\n    model: s\n    timeout_s: 0\n")
    with pytest.raises(ConfigError, match=r"pool\.yaml: workers\.0\.timeout_s"):
        WorkerPool.from_yaml(path)
    with pytest.raises(ConfigError, match="not found"):
        WorkerPool.from_yaml(tmp_path / "missing.yaml")


def test_from_yaml_missing_key_names_worker_and_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("POOL_TEST_KEY", raising=False)
    path = tmp_path / "pool.yaml"
    path.write_text(
        "workers:\n"
        "  - provider: simulated\n    model: s\n"
        "  - provider: openai\n    name: gpt-x\n    model: gpt\n"
        "    endpoint: https://api.openai.com/v1\n    api_key_env: POOL_TEST_KEY\n"
    )
    with pytest.raises(
        ConfigError, match=r"worker 1 \(gpt-x\): environment variable POOL_TEST_KEY"
    ):
        WorkerPool.from_yaml(path)


class Echo:
    """Replies with its own label so tests can see which provider answered."""

    def __init__(self, label: str) -> None:
        self.label = label

    async def complete(self, messages, *, sample_index: int = 0) -> Completion:
        return Completion(text=self.label, usage=Usage(input_tokens=1, output_tokens=1))

    async def aclose(self) -> None:
        return None


def test_pool_calls_a_worker_by_its_pool_id() -> None:
    full = parse_pool([{**SIM, "model": f"m{i}", "concurrency": i + 1} for i in range(2)])
    pool = WorkerPool(full, providers=[Echo("zero"), Echo("one")])
    res = asyncio.run(pool.call(1, [{"role": "user", "content": "q"}]))
    assert res.worker == 1 and res.model == "m1" and res.text == "one"
    assert pool.worker(1).concurrency == 2
    with pytest.raises(ValueError, match="unknown worker id 2"):
        pool.worker(2)


def test_with_profile_changes_generation_params(tmp_path: Path) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(
        "workers:\n"
        "  - provider: simulated\n    model: s\n    params: {temperature: 0.2}\n"
        "    profiles:\n      unconstrained: {temperature: 1.0, max_tokens: 64}\n"
        "cache: {enabled: false}\n"
    )
    cfg = load_pool(path).with_profile("unconstrained")
    assert cfg.workers[0].params.temperature == 1.0
    assert cfg.workers[0].params.max_tokens == 64


# -- the problems simulated workers know ----------------------------------------------------------

OPENAI = {"provider": "openai", "model": "gpt", "endpoint": "http://127.0.0.1:9/v1"}


def test_simulated_workers_know_the_bundled_problems_by_default() -> None:
    pool = parse_pool([SIM, {**SIM, "simulation": {"seed": 3}}])
    assert pool.workers[0].simulation is None  # the default profile applies
    assert pool.workers[1].simulation.problems == ["bundled"]


def test_with_simulation_problems_adds_or_replaces(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    pool = parse_pool(
        [
            {**SIM, "simulation": {"problems": ["bundled-train"], "seed": 7}},
            OPENAI,
            {**SIM, "model": "sim-default"},
        ]
    )
    added = pool.with_simulation_problems(["extra.jsonl", tmp_path / "extra.jsonl"])
    extra = str(tmp_path / "extra.jsonl")
    assert added.workers[0].simulation.problems == ["bundled-train", extra]  # no duplicate
    assert added.workers[0].simulation.seed == 7  # the rest of the profile is kept
    assert added.workers[2].simulation.problems == ["bundled", extra]
    assert added.workers[1] == pool.workers[1] and added.workers[1].simulation is None

    replaced = pool.with_simulation_problems([Path("extra.jsonl"), "bundled"], replace=True)
    assert [w.simulation.problems for w in (replaced.workers[0], replaced.workers[2])] == [
        [extra, "bundled"],
        [extra, "bundled"],
    ]
    assert replaced.workers[1].simulation is None
    assert pool.workers[0].simulation.problems == ["bundled-train"]  # the original is unchanged
    assert pool.with_simulation_problems([], replace=True).workers[0].simulation.problems == []


def test_relative_problem_paths_resolve_against_the_pool_file(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "pools"
    folder.mkdir()
    path = folder / "pool.yaml"
    path.write_text(
        "workers:\n"
        "  - provider: simulated\n    model: s\n"
        "    simulation: {problems: [bundled, data/p.jsonl, ../q.jsonl, /abs/r.jsonl]}\n"
    )
    monkeypatch.chdir(tmp_path)
    assert load_pool(path).workers[0].simulation.problems == [
        "bundled",
        str(folder / "data" / "p.jsonl"),
        str(tmp_path / "q.jsonl"),
        str(Path("/abs/r.jsonl").resolve()),
    ]
    # A pool given as data (no file) keeps them relative: they resolve against the working
    # directory when the bank is read.
    data = {"workers": [{**SIM, "simulation": {"problems": ["data/p.jsonl"]}}]}
    assert parse_pool(data).workers[0].simulation.problems == ["data/p.jsonl"]
