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


def test_answer_rates_rank_each_domains_best_worker_first(tmp_path):
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
