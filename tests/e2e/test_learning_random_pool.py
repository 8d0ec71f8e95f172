"""Learning on a pool drawn at random (the best workers at other ids, other skills and seeds):
the tiny profile's routing coverage (each question's plans go to different workers) keeps the
base stage from sending every question to the worker best on average. Its own file so that
`make test` trains it on one core while test_learning.py trains the bundled pool on the other."""

from __future__ import annotations

import pytest

from tests.e2e.test_learning import GRPO_STEPS, WARMUP_STEPS

pytestmark = pytest.mark.slow

RANDOM_POOL = 1  # bench.learning.random_pool(1): worker 1 best on math and mcq, 3 on free-form


def test_grpo_learns_a_random_pool(tmp_path):
    """One worker is best on two domains here: with the routing floor instead of coverage every
    question went to it and the held-out best-worker share stayed at 2/3 (docs/training.md, "On
    other pools"). Measured with coverage: share 1.000 on this pool, 0.996-1.000 on five random
    pools (seed 0), against the bound 0.85."""
    from bench.learning import learning_experiment, render_table

    result = learning_experiment(
        tmp_path / "base",
        steps=GRPO_STEPS,
        warmup_steps=WARMUP_STEPS,
        seed=0,
        pool_seed=RANDOM_POOL,
    )
    print("\n" + render_table(result["table"]))
    warm, trained = result["table"]["warm-up"], result["table"]["GRPO"]
    assert trained["best_worker_share"] >= 0.85
    assert trained["reward_mean"] >= warm["reward_mean"] + 0.15
    assert trained["format_error_rate"] <= 0.1
