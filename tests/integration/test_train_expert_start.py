"""Expert start on the simulated pool: the executions rank the workers as their skills do, per
domain (the targets: tests/unit/test_train_expert_start.py; a stage run:
tests/integration/test_train_grpo.py)."""

from __future__ import annotations

import asyncio
from collections import defaultdict

import pytest

from conductor_core.train.config import build_config
from conductor_core.train.expert_start import answer_rates
from conductor_core.train.grpo import load_inputs
from conductor_core.train.reward import best_workers

pytestmark = pytest.mark.slow  # 160 questions x 4 workers x 4 simulated executions (5-15 s)


def stage_inputs(tmp_path):
    """An adaptive tiny-profile config with 4 executions, its training problems and its pool."""
    config = build_config(
        {
            "stage": "adaptive",
            "output_dir": str(tmp_path),
            "expert_start": {"executions": 4},
            "tracking": {"backend": "none"},
        },
        profile="tiny",
    )
    train, _, pool = load_inputs(config)
    return config, train, pool


def test_answer_rates_rank_each_domains_best_worker_first(tmp_path):
    config, train, pool = stage_inputs(tmp_path)
    train = train[::3]  # every domain (the file lists them in turn)
    rates = asyncio.run(answer_rates(train, pool, config))
    assert set(rates) == {p.id for p in train}
    sums: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(pool.workers))
    for p in train:
        assert all(r in (0.0, 0.25, 0.5, 0.75, 1.0) for r in rates[p.id])  # shares of 4 runs
        for w, r in enumerate(rates[p.id]):
            sums[str(p.domain)][w] += r
    best = best_workers(pool)
    assert len(sums) == 3
    for domain, totals in sums.items():
        assert max(range(len(totals)), key=totals.__getitem__) == best[domain], domain


def test_saved_rates_resume_where_a_run_stopped(tmp_path):
    config, train, pool = stage_inputs(tmp_path)
    saved = tmp_path / "expert-rates.json"
    first = asyncio.run(answer_rates(train[:5], pool, config, saved=saved))  # then "stopped"
    lines: list[str] = []
    resumed = asyncio.run(answer_rates(train[:9], pool, config, saved=saved, log=lines.append))
    assert f"expert start: 5 questions' rates reused from {saved}" in lines
    assert lines[-1] == "expert start: rates of 9/9 questions"
    assert all(resumed[p.id] == first[p.id] for p in train[:5])
    # the same draws as one uninterrupted run (sample indexes follow each question's place)
    assert resumed == asyncio.run(answer_rates(train[:9], pool, config))
    # rates measured with other executions or on other workers are not reused
    again = config.model_copy(
        update={"expert_start": config.expert_start.model_copy(update={"executions": 2})}
    )
    lines.clear()
    asyncio.run(answer_rates(train[:2], pool, again, saved=saved, log=lines.append))
    assert not any("reused" in x for x in lines)
