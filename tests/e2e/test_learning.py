"""Learning, shown: a tiny Conductor trained for minutes on CPU learns to route each domain of the
simulated pool to its best worker (held-out questions, fixed seed), then to use only the workers
it is offered (adaptive stage).

The margins fail for a broken reward (no reward difference between workers) or a wrong
advantage sign (the policy would move away from the best worker).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

WARMUP_STEPS = 300
GRPO_STEPS = 130
ADAPTIVE_STEPS = 80


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from conductor_core.train.learning import learning_experiment, render_table

    out = tmp_path_factory.mktemp("learning") / "base"
    result = learning_experiment(out, steps=GRPO_STEPS, warmup_steps=WARMUP_STEPS, seed=0)
    print("\n" + render_table(result["table"]))
    return out, result


def test_grpo_raises_reward_and_best_worker_routing(base):
    _, result = base
    table = result["table"]
    initial, warm, trained = table["initial"], table["warm-up"], table["GRPO"]
    assert trained["best_worker_share"] >= 0.7
    assert trained["best_worker_share"] >= warm["best_worker_share"] + 0.3
    assert trained["reward_mean"] >= warm["reward_mean"] + 0.15
    assert trained["format_error_rate"] < initial["format_error_rate"] - 0.5
    assert trained["format_error_rate"] <= 0.1


def test_adaptive_stage_uses_only_offered_workers(base, tmp_path):
    from conductor_core.train.learning import stage_experiment

    out, _ = base
    result = stage_experiment(
        "adaptive", tmp_path / "adaptive", out / "model", steps=ADAPTIVE_STEPS, seed=0
    )
    print("\nadaptive before/after:", result["before"], result["after"], sep="\n")
    assert result["after_greedy"]["out_of_subset_rate"] == 0.0
    assert result["after"]["out_of_subset_rate"] <= 0.05
    assert result["after"]["out_of_subset_rate"] < result["before"]["out_of_subset_rate"]
    assert result["after"]["reward_mean"] >= result["before"]["reward_mean"]
