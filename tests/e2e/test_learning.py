"""Learning, shown: a tiny Conductor trained for minutes on CPU learns to route each domain of the
simulated pool to its best worker (held-out questions), then to use only the workers it is
offered (adaptive stage), and to revise wrong answers rather than right ones in a second round
(recursive stage, from the adaptive model). The base stage on pools drawn at random:
bench/bench_learning_pools.py.

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
    0.987-1.000, reward up 0.23-0.24, format errors 2.1-2.5%; with the importance-corrected
    coverage (two runs, one machine): 0.237 -> 0.987, reward 0.708 -> 0.912, format errors
    2.9%. Random pools: bench/bench_learning_pools.py (docs/notes/training.md)."""
    _, result = base
    table = result["table"]
    initial, warm, trained = table["initial"], table["warm-up"], table["GRPO"]
    assert trained["best_worker_share"] >= 0.7
    assert trained["best_worker_share"] >= warm["best_worker_share"] + 0.3
    assert trained["reward_mean"] >= warm["reward_mean"] + 0.15
    assert trained["format_error_rate"] < initial["format_error_rate"] - 0.5
    assert trained["format_error_rate"] <= 0.1


@pytest.fixture(scope="module")
def adaptive(base, tmp_path_factory):
    """The adaptive stage from the base model (what the pipeline and the paper do next)."""
    from bench.learning import stage_experiment

    out, _ = base
    folder = tmp_path_factory.mktemp("learning") / "adaptive"
    result = stage_experiment("adaptive", folder, out / "model", steps=ADAPTIVE_STEPS, seed=0)
    print("\nadaptive before/after:", result["before"], result["after"], sep="\n")
    return folder, result


@pytest.mark.xfail(
    strict=True,
    reason="issue 25 §1-2: with offered workers under their pool ids and the corrected floor the "
    "tiny recipe does not yet learn to name only offered workers (docs/notes/training.md, 'The "
    "honest gradient, measured')",
)
def test_adaptive_stage_uses_only_offered_workers(adaptive):
    """The claim the adaptive stage must meet, kept as a strict expected failure until it does.

    Measured with the importance-corrected routing floor (seed 0, one run): sampled
    out-of-subset plans 23.3% -> 16.7%, reward 0.692 -> 0.733. Before the correction, with pool
    ids (seed 0, three runs of this file): sampled out-of-subset plans
    20.0% -> 23.3%, 25.0% -> 21.7% (warm-up offering random subsets) and 23.3% -> 21.7% (base
    stage on subsets too, since dropped), greedy 16.7% after; every run far from the bounds.
    With the old renumbering (ids 0..k-1, a different worker from question to question) it passed
    with 0-0.8%: "stay below k" was all it could learn."""
    _, result = adaptive
    assert result["after_greedy"]["out_of_subset_rate"] == 0.0
    assert result["after"]["out_of_subset_rate"] <= 0.05
    assert result["after"]["out_of_subset_rate"] < result["before"]["out_of_subset_rate"]
    assert result["after"]["reward_mean"] >= result["before"]["reward_mean"] - 0.15


@pytest.mark.xfail(
    strict=True,
    reason="issue 25 §3: with round-2 advantages measured against keeping and round-2 format "
    "errors scored as deployment keeps them, the tiny model learns to revise rarely, not which "
    "answers to revise (docs/notes/training.md, 'The honest gradient, measured')",
)
def test_recursive_stage_revises_wrong_answers_and_keeps_right_ones(adaptive, tmp_path):
    """The recursive stage's claim (issue 25 §3), from the adaptive model, decided as deployment
    decides (a round-2 plan that does not parse keeps the answer): after a right round-1 answer
    the answer is kept at least 85% of the time, after a wrong one a new plan is written at least
    half the time, and revising more after wrong answers than after right ones.

    Measured (seed 0, one run of this file): the adaptive model revises nearly everything
    (answer kept after a right one 1%, new plan after a wrong one 86%, final reward 0.831 below
    the first round's 0.926); after the stage it keeps 76% after a right answer and revises 21%
    after a wrong one, mostly by writing an unparsable round-2 plan (77%), final reward 0.934
    against 0.928: it learned that revising rarely pays, not which answers to revise
    (discrimination -0.13 -> -0.03). From the base model instead: unparsable round-2 plans 82% ->
    100%, no new plan at all."""
    from bench.learning import stage_experiment

    folder, _ = adaptive
    result = stage_experiment(
        "recursive",
        tmp_path / "recursive",
        folder / "model",
        steps=RECURSIVE_STEPS,
        seed=0,
        held_out=None,  # all 120 held-out questions, 2 plans each
    )
    before, after = result["before"], result["after"]
    print("\nrecursive before/after:", before, after, sep="\n")
    assert after["wrong_first"] >= 10  # enough wrong first answers to measure on
    assert after["answer_kept_when_right"] >= 0.85
    assert after["revise_when_wrong"] >= 0.5
    assert after["new_plan_discrimination"] >= before["new_plan_discrimination"] + 0.1
