"""Learning, shown: a tiny Conductor trained for minutes on CPU learns to route each domain of the
simulated pool to its best worker (held-out questions), then to use only the workers it is
offered (adaptive stage), and to keep right answers more often than wrong ones in a second round
(recursive stage). The base stage on pools drawn at random: bench/bench_learning_pools.py.

One seed each. Floating-point results differ between CPUs, so a trajectory is not reproducible
across machines: every bound below sits well inside the spread measured over seeds, bases and
machines (each test's docstring gives it; docs/notes/testing.md has the runs). The bounds still
fail for a broken reward (no reward difference between workers, or between keeping and
revising) or a wrong advantage sign (the policy would move away from the best worker, or keep
wrong answers rather than right ones).
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.minutes]

WARMUP_STEPS = 300
GRPO_STEPS = 130
ADAPTIVE_STEPS = 80
RECURSIVE_STEPS = 40


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    from bench.learning import learning_experiment, render_table

    out = tmp_path_factory.mktemp("learning") / "base"
    result = learning_experiment(out, steps=GRPO_STEPS, warmup_steps=WARMUP_STEPS, seed=0)
    print("\n" + render_table(result["table"]))
    return out, result


def test_grpo_raises_reward_and_best_worker_routing(base):
    """Measured (seed 0, held-out, four runs on three machines): best-worker share 0.214 ->
    0.987-1.000, reward up 0.23-0.24, format errors 2.1-2.5%; on five random pools the same
    recipe reached shares of 0.996-1.000."""
    _, result = base
    table = result["table"]
    initial, warm, trained = table["initial"], table["warm-up"], table["GRPO"]
    assert trained["best_worker_share"] >= 0.7
    assert trained["best_worker_share"] >= warm["best_worker_share"] + 0.3
    assert trained["reward_mean"] >= warm["reward_mean"] + 0.15
    assert trained["format_error_rate"] < initial["format_error_rate"] - 0.5
    assert trained["format_error_rate"] <= 0.1


@pytest.mark.xfail(
    strict=True,
    reason="issue 25 §1-2: with offered workers under their pool ids the tiny recipe does not yet "
    "learn to name only offered workers (docs/training.md, 'Offered workers keep their pool ids')",
)
def test_adaptive_stage_uses_only_offered_workers(base, tmp_path):
    """The claim the adaptive stage must meet, kept as a strict expected failure until it does.

    Measured with pool ids (seed 0, three runs of this file): sampled out-of-subset plans
    20.0% -> 23.3%, 25.0% -> 21.7% (warm-up offering random subsets) and 23.3% -> 21.7% (base
    stage on subsets too, since dropped), greedy 16.7% after; every run far from the bounds.
    With the old renumbering (ids 0..k-1, a different worker from question to question) it passed
    with 0-0.8%: "stay below k" was all it could learn."""
    from bench.learning import stage_experiment

    out, _ = base
    result = stage_experiment(
        "adaptive", tmp_path / "adaptive", out / "model", steps=ADAPTIVE_STEPS, seed=0
    )
    print("\nadaptive before/after:", result["before"], result["after"], sep="\n")
    assert result["after_greedy"]["out_of_subset_rate"] == 0.0
    assert result["after"]["out_of_subset_rate"] <= 0.05
    assert result["after"]["out_of_subset_rate"] < result["before"]["out_of_subset_rate"]
    assert result["after"]["reward_mean"] >= result["before"]["reward_mean"] - 0.15


def test_recursive_stage_keeps_right_answers_more_often_than_wrong_ones(base, tmp_path):
    """Measured, teacher-forced keep discrimination after the stage (chance 0; before it
    0.0000035): 0.079-0.399 over four seeds and three bases, but 0.019 and 0.021 from a base
    trained on another machine, where the stage learned to keep nearly every answer (issue 25
    rebuilds the stage's objective). Round-2 format errors 55-91% -> 0-1.7%. The bound asserts the
    sign of the effect with room below every measured run, not its size."""
    from bench.learning import stage_experiment

    out, _ = base
    result = stage_experiment(
        "recursive",
        tmp_path / "recursive",
        out / "model",
        steps=RECURSIVE_STEPS,
        seed=0,
        held_out=None,  # all 120 held-out questions, 2 plans each
    )
    before, after = result["before"], result["after"]
    print("\nrecursive before/after:", before, after, sep="\n")
    # Base GRPO trained round 1 only; the recursive stage restores the round-2 format.
    assert after["round2_format_error_rate"] <= 0.15
    assert after["round2_format_error_rate"] < before["round2_format_error_rate"]
    # Chance is 0 (keeping at random, whatever the rate). Probabilities are teacher-forced, so
    # the held-out contexts decide them, not sampling noise.
    assert after["keep_prob_discrimination"] >= before["keep_prob_discrimination"] + 0.01
    assert after["wrong_first"] >= 10  # enough wrong first answers to measure on
