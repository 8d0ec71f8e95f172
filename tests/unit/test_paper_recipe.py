"""The paper's recipe: curation configs, pool, profile refusal, evaluation sets, presets, report."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor_core.data.config import load_config
from conductor_core.data.curation import curate
from conductor_core.data.mixture import split
from conductor_core.errors import ConductorError, ConfigError
from conductor_core.tasks.problem import Domain, Problem
from conductor_core.tasks.sources import load_benchmark
from conductor_core.tasks.sources import local as local_mod
from conductor_core.workers.config import load_pool

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "paper"
BENCH = Path(__file__).resolve().parent.parent / "fixtures" / "benchmarks"
PAPER_POOL = Path(local_mod.__file__).parents[2] / "resources/pools/paper.yaml"


@pytest.fixture
def data_dir(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_DATA_DIR", str(FIX))
    monkeypatch.setattr(local_mod, "hub_reachable", lambda: False)


@pytest.mark.parametrize("name", ["paper-train", "paper-recursion"])
def test_paper_configs_curate_on_fixtures(data_dir, tmp_path, name):
    config = load_config(name).model_copy(update={"difficulty": None})
    result = curate(config, out_dir=tmp_path / "out", progress=False)
    by_source = result.stats["final"]["by_source"]
    if name == "paper-train":
        assert set(by_source) == {"math", "mmlu", "rlpr", "livecodebench"}
        removed = result.stats["filters"]["decontaminate"]["examples"]
        assert any("math500" in r["reason"] for r in removed)
        # MATH from the paper's re-split: the 400 side only, the evaluated 100 never.
        from conductor_core.tasks.problem import read_problems
        from conductor_core.tasks.sources.math_sources import math500_subset_ids

        kept = [*read_problems(result.train_path), *read_problems(result.validation_path)]
        math = [p for p in kept if p.source == "math500"]
        held = {f"math500/{i}" for i in math500_subset_ids("paper100")}
        assert math and not {p.id for p in math} & held
        assert "math500/test/number_theory/9999.json" not in {p.id for p in math}
    else:
        assert set(by_source) == {"livecodebench", "rlpr"}


def test_paper_train_sizes():
    config = load_config("paper-train")
    assert [s.quota for s in config.sources] == [260] * 4
    problems = [
        Problem(id=f"{d.value}/{i}", source=d.value, domain=d, question=f"q {d.value} {i}")
        for d in (Domain.MATH, Domain.MCQ, Domain.FREEFORM, Domain.CODE)
        for i in range(260)
    ]
    train, validation = split(problems, config.split)
    assert (len(train), len(validation)) == (960, 80)
    assert load_config("paper-recursion").mixture.target_size == 350


def test_missing_local_copies_one_line(monkeypatch, tmp_path):
    monkeypatch.setenv("CONDUCTOR_DATA_DIR", str(tmp_path / "none"))
    monkeypatch.setattr(local_mod, "hub_reachable", lambda: False)
    with pytest.raises(ConductorError) as info:
        curate(load_config("paper-train"), out_dir=tmp_path / "o", progress=False)
    msg = str(info.value)
    assert len(msg.splitlines()) == 1
    assert "CONDUCTOR_DATA_MATH" in msg and "livecodebench" in msg


def test_env_var_overrides_one_source(monkeypatch):
    monkeypatch.setenv("CONDUCTOR_DATA_MATH500", "/x/y")
    assert load_config("paper-train").sources[0].path == "/x/y"


def test_paper_pool_loads():

    pool = load_pool(PAPER_POOL)
    assert len(pool) == 7  # eight calls for mixture-of-agents, as in the paper
    assert pool.workers[0].api_key_env == "OPENAI_API_KEY"
    for setting in ("constrained", "unconstrained"):
        plain, thinking = pool.with_profile(setting).workers[5:7]
        # One model on one server, in its two modes.
        assert (plain.model, plain.endpoint) == (thinking.model, thinking.endpoint)
        assert plain.params.extra["chat_template_kwargs"] == {"enable_thinking": False}
        assert thinking.params.extra["chat_template_kwargs"] == {"enable_thinking": True}
    c = pool.with_profile("constrained").workers[5].params
    assert (c.max_tokens, c.temperature, c.reasoning_effort) == (4096, 0.2, "minimal")


def test_mixture_of_agents_aggregates_with_the_pool_named_worker():
    import asyncio

    from conductor_core.evaluate.specs import build_baselines
    from conductor_core.policy.base import PlanRequest
    from conductor_core.workers.config import parse_pool

    def aggregator(pool, spec="moa"):
        (method,) = build_baselines([spec], pool)
        plan = asyncio.run(method.source.plan(PlanRequest(question="q", workers=())))
        return plan.workflow.steps[-1].worker

    paper = load_pool(PAPER_POOL)
    assert paper.aggregator == "GPT-5" and aggregator(paper) == 0
    assert aggregator(paper, "moa:1:4") == 4  # the spec still picks another
    plain = paper.model_copy(update={"aggregator": None})
    assert aggregator(plain) == 6  # no name: the last worker
    data = {"workers": [w.model_dump() for w in paper.workers], "aggregator": "GPT-6"}
    with pytest.raises(ConfigError, match="aggregator 'GPT-6' is not a worker"):
        parse_pool(data)


def test_paper_profile_defaults_and_refusal():
    from conductor_core.train.config import build_config

    cfg = build_config(profile="paper")
    assert cfg.data.pool.endswith("pools/paper.yaml")
    assert cfg.data.problems == "curated-paper-train/train.parquet"
    with pytest.raises(ConfigError, match="allow_simulated_pool"):
        build_config(profile="paper", overrides={"data": {"pool": "bundled"}})
    ok = build_config(
        profile="paper", overrides={"data": {"pool": "bundled", "allow_simulated_pool": True}}
    )
    assert ok.data.pool == "bundled"


def test_math500_paper100_and_parts():
    from conductor_core.tasks.sources.math_sources import math500_subset_ids

    ids = math500_subset_ids("paper100")
    assert len(ids) == len(set(ids)) == 100
    for option in ("subset", "exclude"):
        with pytest.raises(ConductorError, match=f"of {option} 'paper100' are not in the data"):
            load_benchmark("math500", path=str(BENCH / "math500.jsonl"), **{option: "paper100"})
    path = str(FIX / "math500")
    held = load_benchmark("math500", path=path, subset="paper100")
    rest = load_benchmark("math500", path=path, exclude="paper100")
    assert [p.id for p in held] == [f"math500/{i}" for i in ids]
    assert len(rest) == 9 and not {p.id for p in held} & {p.id for p in rest}
    train = load_benchmark("rlpr", path=str(FIX / "rlpr"), part="train")
    held = load_benchmark("rlpr", path=str(FIX / "rlpr"), part="heldout")
    assert held and not {p.id for p in train} & {p.id for p in held}
    assert len(train) + len(held) == 30


def test_livecodebench_windows():
    v6 = load_benchmark(
        "livecodebench", path=str(FIX / "livecodebench"), version="v6", only_new=True
    )
    v1 = load_benchmark("livecodebench", path=str(FIX / "livecodebench"), version="v1")
    assert {p.id for p in v6} == {f"livecodebench/v6q{k}" for k in range(3)}
    assert len(v1) == 6


def test_preset_and_paper_column(monkeypatch, tmp_path):
    from conductor_core.evaluate.aggregate import Stats, Summary
    from conductor_core.evaluate.presets import preset_configs
    from conductor_core.evaluate.report import paper_table

    monkeypatch.setenv("CONDUCTOR_DATA_DIR", str(FIX))
    dicts = preset_configs("paper-main", {"shard": {"index": 0, "count": 2}})
    assert len(dicts) == 7 and all(d["setting"] == "unconstrained" for d in dicts)
    repeats = {d["output_dir"].rsplit("/", 1)[1]: d["repeats"] for d in dicts}
    assert repeats["aime2025"] == 16 and repeats["math500"] == 5 and repeats["mmlu"] == 1
    assert {d["repeats"] for d in preset_configs("paper-main", {"repeats": 2})} == {2}
    assert {d["benchmark"] for d in dicts} >= {"math500", "bigcodebench", "gpqa_diamond"}
    del Stats, Summary
    assert callable(paper_table)
