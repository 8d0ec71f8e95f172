"""The GRPO reward: execution on the simulated pool, grading, format errors, infra failures,
adaptive id mapping, recursion rounds, batch metrics and the TRL calling convention."""

from __future__ import annotations

import asyncio
import threading

import pytest

from conductor_core.tasks.problem import read_problems
from conductor_core.train.problems import bundled_train_pool_path, bundled_train_problems_path
from conductor_core.train.reward import (
    ConductorReward,
    PlanOutcome,
    PreviousRound,
    RoundState,
    summarize,
)
from conductor_core.workers.config import load_pool
from conductor_core.workers.simulated import ProblemBank

PROBLEMS = read_problems(bundled_train_problems_path())
MATH = [p for p in PROBLEMS if str(p.domain) == "math"][:60]
POOL = load_pool(bundled_train_pool_path())


def plan(*workers: int, access: str = "[]") -> str:
    subtasks = ", ".join('"Solve it."' for _ in workers)
    acc = ", ".join(["[]"] + [access] * (len(workers) - 1))
    lists = f"model_id = {list(workers)}\nsubtasks = [{subtasks}]\naccess_list = [{acc}]"
    return "Reasoning first.\n" + lists


def make_reward(pool=POOL, **kwargs) -> ConductorReward:
    return ConductorReward({p.id: p for p in PROBLEMS}, pool, bank=ProblemBank(PROBLEMS), **kwargs)


def run(reward: ConductorReward, texts, ids, offered=None, **kw):
    async def go():
        try:
            return await reward(
                completions=[[{"role": "assistant", "content": t}] for t in texts],
                problem_id=ids,
                offered=offered or [[0, 1, 2, 3]] * len(texts),
                **kw,
            )
        finally:
            await reward.aclose()

    return asyncio.run(go())


def test_best_worker_earns_more_than_a_weak_one():
    ids = [p.id for p in MATH]
    best = run(make_reward(), [plan(0)] * len(ids), ids)
    weak = run(make_reward(), [plan(1)] * len(ids), ids)
    assert set(best) <= {0.5, 1.0} and set(weak) <= {0.5, 1.0}
    assert sum(best) / len(best) > 0.85
    assert sum(weak) / len(weak) < 0.75


def test_format_errors_score_zero_with_a_reason():
    r = make_reward()
    out = run(r, ["no plan here", plan(7), plan(0, 1, access='["x"]')], [MATH[0].id] * 3)
    assert out == [0.0, 0.0, 0.0]
    codes = [o.format_code for o in r.last_outcomes]
    assert codes[0] == "missing_list" and codes[1] == "unknown_worker"
    assert r.last_metrics["format_error_rate"] == 1.0


def test_infrastructure_failure_is_none_not_zero():
    data = POOL.model_dump()
    for w in data["workers"]:
        w["max_retries"] = 0
        w["simulation"]["failures"] = {"server_error": 1.0}
    from conductor_core.workers.config import PoolConfig

    r = make_reward(pool=PoolConfig.model_validate(data))
    out = run(r, [plan(0)], [MATH[0].id])
    assert out == [None]
    assert r.last_outcomes[0].infra_error
    assert r.last_metrics["infra_error_rate"] == 1.0


def test_adaptive_mapping_runs_the_offered_pool_worker():
    r = make_reward()
    ids = [p.id for p in MATH[:20]]
    # "Model 0" is pool worker 1 (weak at math), "Model 1" is pool worker 0 (best at math).
    run(r, [plan(1)] * 20, ids, offered=[[1, 0]] * 20)
    assert all(o.workers == [0] for o in r.last_outcomes)
    run(r, [plan(2)] * 2, ids[:2], offered=[[1, 0]] * 2)
    assert [o.format_code for o in r.last_outcomes] == ["unknown_worker"] * 2


def test_several_executions_are_averaged():
    r = make_reward(executions=4)
    out = run(r, [plan(3)] * 30, [p.id for p in MATH[:30]])
    assert any(v not in (0.5, 1.0) for v in out)  # averages of 4 executions
    assert all(0.5 <= v <= 1.0 for v in out)
    assert r.last_outcomes[0].calls == 4


def test_recursion_round_keep_grades_the_previous_answer():
    p = MATH[0]
    right = PreviousRound(plan=plan(0), answer=f"\\boxed{{{p.reference}}}")
    wrong = PreviousRound(plan=plan(0), answer="\\boxed{-1}")
    keep = "model_id = []\nsubtasks = []\naccess_list = []"
    state = RoundState(previous={0: right, 1: wrong})
    r = make_reward(rounds=state)
    out = run(r, [keep, keep], [p.id, p.id])
    assert out == [1.0, 0.5]
    assert all(o.keep for o in r.last_outcomes)
    # Without a previous round, empty lists are a format error.
    assert run(make_reward(), [keep], [p.id]) == [0.0]


def test_round_state_cached_and_excluded_rows():
    cached = PlanOutcome(reward=1.0, domain="math", plan_ok=True, workers=[0], steps=1)
    state = RoundState(cached={0: cached}, excluded={1})
    r = make_reward(rounds=state)
    out = run(r, ["garbage", plan(0)], [MATH[0].id, MATH[1].id])
    assert out == [1.0, None]


def test_summarize_metrics():
    outcomes = [
        PlanOutcome(
            reward=1.0,
            domain="math",
            plan_ok=True,
            workers=[3, 0],
            steps=2,
            all_access_steps=1,
            calls=2,
            input_tokens=10,
            output_tokens=5,
            cost=0.5,
        ),
        PlanOutcome(reward=0.5, domain="mcq", plan_ok=True, workers=[1], steps=1, calls=1),
        PlanOutcome(reward=0.0, domain="mcq", format_code="missing_list"),
        PlanOutcome(
            reward=None, domain="math", plan_ok=True, infra_error=True, workers=[2], steps=1
        ),
    ]
    m = summarize(outcomes, pool_size=4, best={"math": 0, "mcq": 1})
    assert m["reward_mean"] == pytest.approx(0.5)
    assert m["format_error_rate"] == 0.25 and m["infra_error_rate"] == 0.25
    assert m["mean_steps"] == pytest.approx(4 / 3)
    assert m["all_access_share"] == pytest.approx(0.25)
    assert m["worker_share/0"] == 0.25 and m["worker_share/mcq/1"] == 1.0
    assert m["best_worker_share"] == pytest.approx(2 / 3)
    assert m["calls_per_plan"] == 0.75 and m["cost_per_plan"] == pytest.approx(0.125)


def test_trl_convention_metrics_and_background_loop():
    """TRL awaits async rewards on a daemon loop thread; the pool is created in that loop."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        r = make_reward()
        logged: dict[str, float] = {}
        extra: dict[str, list] = {}
        coro = r(
            prompts=[[{"role": "user", "content": "q"}]] * 2,
            completions=[[{"role": "assistant", "content": plan(0)}]] * 2,
            problem_id=[MATH[0].id, MATH[1].id],
            offered=[[0, 1, 2, 3]] * 2,
            domain=["math", "math"],
            trainer_state=None,
            log_metric=lambda k, v: logged.__setitem__(k, v),
            log_extra=lambda k, v: extra.__setitem__(k, v),
        )
        out = asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)
        assert len(out) == 2 and all(v in (0.5, 1.0) for v in out)
        assert r._pool_loop is loop
        assert logged["conductor/best_worker_share"] == 1.0
        assert extra["final_worker"] == [0, 0]
        asyncio.run_coroutine_threadsafe(r.aclose(), loop).result(timeout=10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)


def test_recursion_metrics_measure_keeping_right_answers_above_chance():
    from conductor_core.train.evaluate import recursion_metrics

    def first(correct: bool) -> PlanOutcome:
        return PlanOutcome(
            reward=1.0 if correct else 0.5, domain="math", plan_ok=True, correct=correct
        )

    def second(keep: bool) -> PlanOutcome:
        return PlanOutcome(reward=1.0, domain="math", plan_ok=True, keep=keep)

    # Keeps at random (half the time, whatever round 1 got): no discrimination.
    firsts = [first(c) for c in (True, True, False, False)]
    chance = recursion_metrics(firsts, [second(k) for k in (True, False, True, False)])
    assert chance["keep_when_right"] == chance["keep_when_wrong"] == 0.5
    assert chance["keep_discrimination"] == 0.0
    # Keeps exactly the right answers.
    ideal = recursion_metrics(firsts, [second(k) for k in (True, True, False, False)])
    assert ideal["keep_discrimination"] == 1.0 and ideal["revise_when_wrong"] == 1.0
    # An unparsable round-2 plan is neither a keep nor a revision.
    broken = PlanOutcome(reward=0.0, domain="math", plan_ok=False)
    got = recursion_metrics(firsts[2:], [broken, second(False)])
    assert got["keep_when_wrong"] == 0.0 and got["revise_when_wrong"] == 0.5
    assert got["round2_format_error_rate"] == 0.5
