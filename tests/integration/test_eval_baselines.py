"""On a simulated pool with known skill profiles, each baseline's measured accuracy matches what
the profiles imply (this checks the runner, the grading and the statistics, not a Conductor)."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter

import pytest

from conductor_core.evaluate.aggregate import aggregate
from conductor_core.evaluate.methods import PlanSourceMethod, RandomPlanSource
from conductor_core.evaluate.runner import RunConfig, run_eval
from conductor_core.evaluate.specs import build_baselines
from conductor_core.tasks.problem import Problem, write_jsonl
from conductor_core.workers.config import PoolConfig, SimulationProfile, WorkerConfig
from conductor_core.workers.pool import WorkerPool

# One evaluation of 150 problems x 4 repeats x 8 methods, shared by the module (~15 s).
pytestmark = pytest.mark.slow

SKILLS = [0.8, 0.5, 0.3]
VERIFY = 0.9
N_PROBLEMS = 150
REPEATS = 4


def pool_config() -> PoolConfig:
    return PoolConfig(
        workers=[
            WorkerConfig(
                name=f"w{i}",
                provider="simulated",
                model=f"w{i}",
                price={"input_per_mtok": 1.0, "output_per_mtok": 2.0},
                simulation=SimulationProfile(skills={"math": s}, verify_skill=VERIFY, seed=i),
            )
            for i, s in enumerate(SKILLS)
        ]
    )


def problems() -> list[Problem]:
    # References >= 100 so that a wrong value (ref +- 1, 2, 10 or 2 x ref) never equals another.
    return [
        Problem(
            id=f"m{i:03d}",
            source="arith",
            domain="math",
            question=f"Problem {i}: what is {100 + 7 * i} + {3 * i}?",
            reference=str(100 + 10 * i),
        )
        for i in range(N_PROBLEMS)
    ]


def moa_expected(proposers: list[float], aggregator: float) -> float:
    p_none = 1.0
    for s in proposers:
        p_none *= 1 - s
    return (1 - p_none) * max(aggregator, VERIFY) + p_none * aggregator


def reflect_expected(s: float, rounds: int) -> float:
    """All steps see all earlier ones: once a right answer shows, each later step is right w.p.
    max(s, VERIFY)."""
    seen_right = s  # P(a right answer is among the steps so far) after step 0
    last_right = s
    for _ in range(rounds):
        p_v = max(s, VERIFY)
        last_right = seen_right * p_v + (1 - seen_right) * s
        seen_right = seen_right + (1 - seen_right) * s
    return last_right


def sc_expected(s: float, n: int) -> float:
    """Exact majority vote over n samples; wrong math values follow the simulator's perturbation
    law (2 x ref w.p. 0.3, else ref + one of +-1, +-2, +-10); ties go to the first seen."""
    outcomes = [("right", s), ("x2", (1 - s) * 0.3)] + [
        (f"d{d}", (1 - s) * 0.7 / 6) for d in (1, -1, 2, -2, 10, -10)
    ]
    total = 0.0
    for seq in itertools.product(outcomes, repeat=n):
        prob = 1.0
        for _, p in seq:
            prob *= p
        winner = Counter(o for o, _ in seq).most_common(1)[0][0]
        total += prob * (winner == "right")
    return total


@pytest.fixture(scope="module")
def summary(tmp_path_factory):
    config = pool_config()
    probs = problems()
    methods = build_baselines(["single", "moa:1:2", "reflect:1:2", "sc:1:5"], config)
    methods.append(PlanSourceMethod("random", RandomPlanSource({1: 1.0}, seed=3)))
    out = tmp_path_factory.mktemp("eval") / "records.jsonl"

    known = tmp_path_factory.mktemp("problems") / "problems.jsonl"
    write_jsonl(probs, known)  # the problems the simulated workers know

    async def go():
        async with WorkerPool(config.with_simulation_problems([known], replace=True)) as pool:
            return await run_eval(
                probs,
                methods,
                pool,
                out,
                RunConfig(repeats=REPEATS, progress=False, keep_traces=False),
            )

    return aggregate(asyncio.run(go()))


def check(summary, method: str, expected: float) -> None:
    row = summary.get(method)
    # 3 standard errors, plus a little for the finite number of problems per repeat.
    tol = 3 * row.stderr + 0.01
    assert abs(row.accuracy - expected) <= tol, (method, row.accuracy, expected, row.stderr)


def test_single_workers_match_their_skill(summary) -> None:
    for i, s in enumerate(SKILLS):
        check(summary, f"single:w{i}", s)


def test_mixture_of_agents_matches_profiles(summary) -> None:
    check(summary, "moa:1", moa_expected(SKILLS, SKILLS[2]))
    assert summary.get("moa:1").calls_per_question == pytest.approx(len(SKILLS) + 1)


def test_self_reflection_matches_profiles(summary) -> None:
    check(summary, "reflect:w1x2", reflect_expected(SKILLS[1], 2))


def test_self_consistency_matches_profiles(summary) -> None:
    check(summary, "sc:w1x5", sc_expected(SKILLS[1], 5))
    assert summary.get("sc:w1x5").calls_per_question == pytest.approx(5)


def test_random_single_step_plans_average_the_workers(summary) -> None:
    check(summary, "random", sum(SKILLS) / len(SKILLS))


def test_cost_is_accounted(summary) -> None:
    single = summary.get("single:w0")
    moa = summary.get("moa:1")
    assert 0 < single.cost_per_question < moa.cost_per_question
    assert single.tokens_per_question > 0 and single.repeats == REPEATS


def test_every_method_executes_its_plans_through_solve(monkeypatch, tmp_path) -> None:
    """solve() is the one place a plan is executed: each attempt calls it (self-consistency once
    per sample)."""
    import conductor_core.evaluate.methods as methods_module

    real = methods_module.solve
    seen: list[str] = []

    async def spy(question, source, pool, **kwargs):
        seen.append(type(source).__name__)
        return await real(question, source, pool, **kwargs)

    monkeypatch.setattr(methods_module, "solve", spy)
    config = pool_config()
    probs = problems()[:3]
    known = tmp_path / "problems.jsonl"
    write_jsonl(probs, known)
    methods = build_baselines(["single:0", "sc:1:3"], config)

    async def go():
        async with WorkerPool(config.with_simulation_problems([known], replace=True)) as pool:
            return await run_eval(
                probs, methods, pool, tmp_path / "r.jsonl", RunConfig(progress=False)
            )

    records = asyncio.run(go())
    assert len(records) == 6 and len(seen) == 3 * 1 + 3 * 3
    assert all(r.calls >= 1 for r in records)
