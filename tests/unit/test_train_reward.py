"""The GRPO reward: execution on the simulated pool, grading, format errors, infra failures,
adaptive id mapping, recursion rounds, batch metrics, TRL's reward hooks and its event loop."""

from __future__ import annotations

import asyncio
import threading

import pytest

from conductor_core.errors import ConfigError
from conductor_core.outcome import Outcome
from conductor_core.policy.base import PreviousRound
from conductor_core.sample_streams import draw_index, training_index
from conductor_core.solve import SolveOptions
from conductor_core.tasks.problem import read_problems
from conductor_core.train.recursive import recursion_metrics
from conductor_core.train.reward import (
    ConductorReward,
    RoundState,
    ScoredBatch,
    Truncation,
    summarize,
)
from conductor_core.workers.bundled import bundled_train_pool_path, bundled_train_problems_path
from conductor_core.workers.config import PoolConfig, load_pool
from conductor_core.workers.pool import WorkerPool
from conductor_core.workers.providers import error_for_status
from conductor_core.workers.types import Completion, ProviderError
from conductor_core.workflow.errors import FormatErrorCode
from conductor_core.workflow.executor import Budget

PROBLEMS = read_problems(bundled_train_problems_path())
MATH = [p for p in PROBLEMS if str(p.domain) == "math"][:60]
POOL = load_pool(bundled_train_pool_path())


def plan(*workers: int, access: str = "[]") -> str:
    subtasks = ", ".join('"Solve it."' for _ in workers)
    acc = ", ".join(["[]"] + [access] * (len(workers) - 1))
    lists = f"model_id = {list(workers)}\nsubtasks = [{subtasks}]\naccess_list = [{acc}]"
    return "Reasoning first.\n" + lists


def make_reward(pool=POOL, **kwargs) -> ConductorReward:
    return ConductorReward({p.id: p for p in PROBLEMS}, pool, **kwargs)


def score(reward: ConductorReward, texts, ids, offered=None, **kw) -> ScoredBatch:
    """``texts`` scored as TRL's chat completions, the rows of training step 0."""
    n = len(texts)

    async def go():
        try:
            return await reward.score_batch(
                [[{"role": "assistant", "content": t}] for t in texts],
                ids,
                sample_indices=[training_index(0, n, i) for i in range(n)],
                offered=offered or [[0, 1, 2, 3]] * n,
                **kw,
            )
        finally:
            await reward.aclose()

    return asyncio.run(go())


def run(reward: ConductorReward, texts, ids, offered=None, **kw) -> list[float | None]:
    """The rewards the trainer gets for ``texts`` (:func:`score`)."""
    return list(score(reward, texts, ids, offered, **kw).rewards)


def test_best_worker_earns_more_than_a_weak_one():
    ids = [p.id for p in MATH]
    best = run(make_reward(), [plan(0)] * len(ids), ids)
    weak = run(make_reward(), [plan(1)] * len(ids), ids)
    assert set(best) <= {0.5, 1.0} and set(weak) <= {0.5, 1.0}
    assert sum(best) / len(best) > 0.85
    assert sum(weak) / len(weak) < 0.75


def test_format_errors_score_zero_with_a_reason():
    texts = ["no plan here", plan(7), plan(0, 1, access='["x"]')]
    scored = score(make_reward(), texts, [MATH[0].id] * 3)
    assert scored.rewards == (0.0, 0.0, 0.0) and scored.texts == tuple(texts)
    codes = [o.format_error_code for o in scored.outcomes]
    assert codes[0] == "missing_list" and codes[1] == "unknown_worker"
    assert scored.metrics["format_error_rate"] == 1.0


def test_infrastructure_failure_is_none_not_zero():
    data = POOL.model_dump()
    for w in data["workers"]:
        w["max_retries"] = 0
        w["simulation"]["failures"] = {"server_error": 1.0}
    from conductor_core.workers.config import PoolConfig

    scored = score(make_reward(pool=PoolConfig.model_validate(data)), [plan(0)], [MATH[0].id])
    assert scored.rewards == (None,)
    assert scored.outcomes[0].infra_error
    assert scored.metrics["infra_error_rate"] == 1.0


def test_an_offered_subset_runs_the_pool_worker_the_plan_names():
    r = make_reward()
    ids = [p.id for p in MATH[:20]]
    # Offered {0, 1} under their pool ids: "Model 0" is pool worker 0 (best at math), as written.
    scored = score(r, [plan(0)] * 20, ids, offered=[[1, 0]] * 20)
    assert all(o.workers == [0] for o in scored.outcomes)
    scored = score(r, [plan(2)] * 2, ids[:2], offered=[[1, 0]] * 2)  # 2 was not offered
    assert [o.format_error_code for o in scored.outcomes] == ["unknown_worker"] * 2
    scored = score(r, [plan(3)] * 2, ids[:2], offered=[[1, 3]] * 2)  # 2 of 4: 3 is offered
    assert all(o.workers == [3] and not o.format_error for o in scored.outcomes)


def test_several_executions_are_averaged():
    scored = score(make_reward(executions=4), [plan(3)] * 30, [p.id for p in MATH[:30]])
    out = scored.rewards
    assert any(v not in (0.5, 1.0) for v in out)  # averages of 4 executions
    assert all(0.5 <= v <= 1.0 for v in out)
    assert scored.outcomes[0].calls == 4
    # What a recursion round may keep is the one answer it is shown: that answer's own grade.
    from conductor_core.simulation.answers import is_right_text

    kept = [o.kept_reward for o in scored.outcomes]
    assert set(kept) == {0.5, 1.0}
    for problem, o in zip(MATH[:30], scored.outcomes, strict=True):
        assert o.kept_reward == (1.0 if is_right_text(problem, o.answer or "") else 0.5)


def test_recursion_round_keep_grades_the_previous_answer():
    p = MATH[0]
    right = PreviousRound(plan=plan(0), answer=f"\\boxed{{{p.reference}}}")
    wrong = PreviousRound(plan=plan(0), answer="\\boxed{-1}")
    keep = "model_id = []\nsubtasks = []\naccess_list = []"
    state = RoundState(previous={0: right, 1: wrong})
    scored = score(make_reward(), [keep, keep], [p.id, p.id], rounds=state)
    assert scored.rewards == (1.0, 0.5)
    assert all(o.kept for o in scored.outcomes)
    # Without a previous round, empty lists are a format error.
    assert run(make_reward(), [keep], [p.id]) == [0.0]


def test_an_unparsable_recursion_round_scores_zero_though_deployment_keeps_the_answer():
    """A round-2 plan that does not parse scores 0, as in round 1 (the paper's rule), whatever
    the previous answer was worth; solve() still keeps that answer, as deployment does."""
    p = MATH[0]
    right = PreviousRound(plan=plan(0), answer=f"\\boxed{{{p.reference}}}")
    wrong = PreviousRound(plan=plan(0), answer="\\boxed{-1}")
    state = RoundState(previous={0: right, 1: wrong})
    scored = score(make_reward(), ["garbage", "garbage"], [p.id, p.id], rounds=state)
    assert scored.rewards == (0.0, 0.0)
    assert all(o.format_error and not o.kept and not o.correct for o in scored.outcomes)
    assert [o.answer for o in scored.outcomes] == [right.answer, wrong.answer]
    assert all(o.verdict_reason.startswith("format error") for o in scored.outcomes)
    assert run(make_reward(), ["garbage"], [p.id]) == [0.0]


class Failing:
    """A provider whose every call fails with ``error``, or (``error`` None) takes ``delay_s``
    seconds to answer."""

    def __init__(self, error: ProviderError | None = None, delay_s: float = 0.0) -> None:
        self.error = error
        self.delay_s = delay_s

    async def complete(self, messages, *, sample_index: int = 0) -> Completion:
        if self.error is not None:
            raise self.error
        await asyncio.sleep(self.delay_s)
        return Completion(text="\\boxed{0}")

    async def aclose(self) -> None:
        return None


def failing_reward(provider: Failing, **worker: object) -> ConductorReward:
    """A reward whose pool's four workers all call ``provider`` (no retries, ``worker``
    settings on top)."""
    data = POOL.model_dump()
    for w in data["workers"]:
        w.update({"max_retries": 0, **worker})
    pool = PoolConfig.model_validate(data)
    return make_reward(pool=pool, pool_factory=lambda: WorkerPool(pool, providers=[provider] * 4))


@pytest.mark.parametrize(
    ("status", "message", "why"),
    [
        (400, "This model's maximum context length is 4096 tokens", "context_overflow"),
        (413, "Request Entity Too Large", "context_overflow"),
        (400, "'messages' must contain the word json", "client_error"),
        (422, "Unprocessable Entity", "client_error"),
    ],
)
def test_a_request_the_worker_rejects_scores_zero_as_the_plans_failure(status, message, why):
    """A 4xx (other than auth, 408, 429) is the plan's own failure: 0, not left out."""
    scored = score(
        failing_reward(Failing(error_for_status(status, message))), [plan(0)], [MATH[0].id]
    )
    assert scored.rewards == (0.0,)
    o = scored.outcomes[0]
    assert o.plan_failure == why and not o.infra_error and not o.correct
    assert o.verdict_reason == f"plan failure: {why}"
    assert scored.metrics["plan_failure_rate"] == 1.0 and scored.metrics["infra_error_rate"] == 0


@pytest.mark.parametrize("status", [429, 500, 503, 401])
def test_an_infrastructure_status_is_left_out_of_the_group(status):
    r = failing_reward(Failing(error_for_status(status, "maximum context length")))
    (o,) = score(r, [plan(0)], [MATH[0].id]).outcomes
    assert o.reward is None and o.infra_error and o.plan_failure is None


def test_the_plans_deadline_scores_zero_a_workers_timeout_is_left_out():
    """A plan still running at its own deadline failed (0); a worker that does not answer
    within its timeout_s is the infrastructure's (None)."""
    slow = Failing(delay_s=5.0)
    r = failing_reward(slow)
    r.options = SolveOptions(budget=Budget(deadline_s=0.05))
    scored = score(r, [plan(0)], [MATH[0].id])
    assert scored.rewards == (0.0,) and scored.outcomes[0].plan_failure == "deadline_exceeded"
    scored = score(failing_reward(slow, timeout_s=0.05), [plan(0)], [MATH[0].id])
    assert scored.rewards == (None,) and scored.outcomes[0].infra_error


def test_a_recursion_round_that_fails_by_its_own_fault_scores_zero():
    p = MATH[0]
    right = PreviousRound(plan=plan(0), answer=f"\\boxed{{{p.reference}}}")
    r = failing_reward(Failing(error_for_status(400, "prompt is too long")))
    scored = score(r, [plan(0)], [p.id], rounds=RoundState(previous={0: right}))
    assert scored.rewards == (0.0,)
    o = scored.outcomes[0]
    assert o.plan_failure == "context_overflow" and o.answer == right.answer


def test_keeping_after_a_round_without_an_answer_is_worth_a_wrong_answer():
    """What a round-2 keep scores after a round 1 that left no answer (0.5: a parsed plan, no
    answer), so the keep plan's advantage against keeping is 0 there as everywhere."""
    p = MATH[0]
    keep = "model_id = []\nsubtasks = []\naccess_list = []"
    failed = Outcome(reward=0.0, domain="math", plan_failure="context_overflow")
    broken = Outcome(reward=0.0, domain="math", format_error=True)
    state = RoundState(previous={0: PreviousRound(plan=plan(0), answer=None)})
    out = run(make_reward(), [keep], [p.id], rounds=state)
    assert out == [failed.kept_reward] == [broken.kept_reward] == [0.5]


def test_round_state_cached_and_excluded_rows():
    cached = Outcome(reward=1.0, domain="math", workers=[0], plan_len=1)
    state = RoundState(cached={0: cached}, excluded={1})
    out = run(make_reward(), ["garbage", plan(0)], [MATH[0].id, MATH[1].id], rounds=state)
    assert out == [1.0, None]


def test_summarize_metrics():
    outcomes = [
        Outcome(
            reward=1.0,
            domain="math",
            workers=[3, 0],
            plan_len=2,
            all_access_steps=1,
            calls=2,
            input_tokens=10,
            output_tokens=5,
            cost=0.5,
        ),
        Outcome(reward=0.5, domain="mcq", workers=[1], plan_len=1, calls=1),
        Outcome(reward=0.0, domain="mcq", format_error=True, format_error_code="missing_list"),
        Outcome(reward=None, domain="math", infra_error=True, workers=[2], plan_len=1),
    ]
    m = summarize(outcomes, pool_size=4, best={"math": 0, "mcq": 1})
    assert m["reward_mean"] == pytest.approx(0.5)
    assert m["format_error_rate"] == 0.25 and m["infra_error_rate"] == 0.25
    assert m["mean_steps"] == pytest.approx(4 / 3)
    assert m["all_access_share"] == pytest.approx(0.25)
    assert m["worker_share/0"] == 0.25 and m["worker_share/mcq/1"] == 1.0
    assert m["best_worker_share"] == pytest.approx(2 / 3)
    assert m["calls_per_plan"] == 0.75 and m["cost_per_plan"] == pytest.approx(0.125)


def test_summarize_reads_what_the_steps_were_asked():
    outcomes = [
        Outcome(
            reward=1.0,
            workers=[0, 1, 3],
            plan_len=3,
            subtasks=["Solve part 1.", "Solve part 2.", "Check the answer."],
        ),
        Outcome(reward=0.5, workers=[3], plan_len=1, subtasks=["Answer the question."]),
        Outcome(reward=0.0, format_error=True, subtasks=["Check part 1."]),  # did not parse
    ]
    m = summarize(outcomes, pool_size=4)
    assert m["check_step_share"] == pytest.approx(1 / 4)
    assert m["part_step_share"] == pytest.approx(2 / 4)


def test_a_batch_scored_on_trls_loop_thread_reports_to_trls_hooks():
    """TRL awaits async rewards on a daemon loop thread; the pool is created in that loop. The
    scored batch sends its metrics (not the reward's mean and spread: TRL logs its own) and its
    columns to TRL's ``log_metric`` and ``log_extra``."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        r = make_reward()
        logged: dict[str, float] = {}
        extra: dict[str, list] = {}
        coro = r.score_batch(
            [[{"role": "assistant", "content": plan(0)}]] * 2,
            [MATH[0].id, MATH[1].id],
            sample_indices=[0, 1],
            offered=[[0, 1, 2, 3]] * 2,
        )
        scored = asyncio.run_coroutine_threadsafe(coro, loop).result(timeout=60)
        assert len(scored.rewards) == 2 and all(v in (0.5, 1.0) for v in scored.rewards)
        assert scored.problem_ids == (MATH[0].id, MATH[1].id)
        assert r._pool_loop is loop
        scored.report(lambda k, v: logged.__setitem__(k, v), lambda k, v: extra.__setitem__(k, v))
        assert logged["conductor/best_worker_share"] == 1.0
        assert logged["conductor/format_error_rate"] == scored.metrics["format_error_rate"]
        assert "conductor/reward_mean" not in logged and "conductor/reward_std" not in logged
        assert extra == {"format_error": ["", ""], "final_worker": [0, 0]}
        asyncio.run_coroutine_threadsafe(r.aclose(), loop).result(timeout=10)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=5)
        loop.run_until_complete(loop.shutdown_default_executor())  # its worker thread
        loop.close()


def test_recursion_metrics_measure_keeping_right_answers_above_chance():
    def first(correct: bool) -> Outcome:
        return Outcome(reward=1.0 if correct else 0.5, domain="math", correct=correct)

    def second(keep: bool) -> Outcome:
        return Outcome(reward=1.0, domain="math", kept=keep)

    # Keeps at random (half the time, whatever round 1 got): no discrimination.
    firsts = [first(c) for c in (True, True, False, False)]
    chance = recursion_metrics(firsts, [second(k) for k in (True, False, True, False)])
    assert chance["keep_when_right"] == chance["keep_when_wrong"] == 0.5
    assert chance["keep_discrimination"] == 0.0
    # Keeps exactly the right answers.
    ideal = recursion_metrics(firsts, [second(k) for k in (True, True, False, False)])
    assert ideal["keep_discrimination"] == 1.0 and ideal["revise_when_wrong"] == 1.0
    # An unparsable round-2 plan is neither a keep nor a revision.
    broken = Outcome(reward=0.0, domain="math", format_error=True)
    got = recursion_metrics(firsts[2:], [broken, second(False)])
    assert got["keep_when_wrong"] == 0.0 and got["revise_when_wrong"] == 0.5
    assert got["round2_format_error_rate"] == 0.5


def test_recursion_metrics_decide_as_deployment_does():
    """A round-2 plan that does not parse keeps the answer in deployment: it counts as kept in
    ``answer_kept_when_right`` and as no new plan in ``new_plan_discrimination``."""
    right = Outcome(reward=1.0, domain="math", correct=True)
    wrong = Outcome(reward=0.5, domain="math", correct=False)
    broken = Outcome(reward=1.0, domain="math", format_error=True)
    new_plan = Outcome(reward=1.0, domain="math", correct=True)
    kept = Outcome(reward=0.5, domain="math", kept=True)
    got = recursion_metrics([right, right, wrong, wrong], [broken, new_plan, new_plan, kept])
    assert got["answer_kept_when_right"] == pytest.approx(0.5)
    assert got["revise_when_wrong"] == pytest.approx(0.5)
    assert got["new_plan_discrimination"] == pytest.approx(0.0)
    ideal = recursion_metrics([right, wrong], [broken, new_plan])
    assert ideal["answer_kept_when_right"] == 1.0 and ideal["new_plan_discrimination"] == 1.0


def test_the_reward_runs_each_completion_through_solve(monkeypatch):
    """solve() is the one place a plan is executed: the reward calls it once per execution, with
    the completion as the plan text, the recursion context as its previous round, and execution
    ``e`` of the plan at row ``i``'s sample index drawn at ``draw_index(index, executions, e)``."""
    import conductor_core.train.reward as reward_module

    calls = []
    real = reward_module.solve

    async def spy(question, source, pool, **kwargs):
        options, previous = kwargs["options"], kwargs["previous"]
        calls.append((question, source.text, previous, options.worker_ids, kwargs["sample_index"]))
        return await real(question, source, pool, **kwargs)

    monkeypatch.setattr(reward_module, "solve", spy)
    p = MATH[0]
    previous = PreviousRound(plan=plan(1), answer="\\boxed{-1}")
    scored = score(
        make_reward(executions=2),
        [plan(2), plan(2)],
        [p.id, p.id],
        offered=[[0, 1, 2, 3], [2, 3, 0, 1]],
        rounds=RoundState(previous={1: previous}),
    )
    assert [(c[0], c[1]) for c in calls] == [(p.question, plan(2))] * 4
    assert [c[2] for c in calls].count(previous) == 2 and [c[2] for c in calls].count(None) == 2
    assert {c[3] for c in calls} == {(0, 1, 2, 3), (2, 3, 0, 1)}
    assert scored.outcomes[1].workers == [2]  # "Model 2" is pool worker 2 in every offer
    rows = [training_index(0, 2, i) for i in range(2)]
    assert sorted(c[4] for c in calls) == [draw_index(i, 2, e) for i in rows for e in range(2)]


def test_a_sample_index_for_every_plan():
    with pytest.raises(ValueError, match="1 sample indices for 2 plans"):
        asyncio.run(
            make_reward().score([plan(0)] * 2, [MATH[0].id] * 2, [None] * 2, sample_indices=[0])
        )


# --------------------------------------------------------------------------------------------
# Cost-aware reward (reward.cost_weight)


def test_cost_weight_zero_leaves_rewards_unchanged():
    ids = [p.id for p in MATH[:20]]
    texts = [plan(0), plan(3), plan(0, 1), "no plan here"] * 5
    plain = run(make_reward(), texts, ids)
    zero = score(make_reward(cost_weight=0.0), texts, ids)
    assert list(zero.rewards) == plain
    assert "cost_penalty" not in zero.metrics


def test_only_the_right_part_of_a_reward_pays_its_cost_relative_to_the_reference():
    ids = [p.id for p in MATH[:20]]
    texts = [plan(0), plan(3), plan(0, 1, 2)] * 6 + ["no plan here", plan(7)]
    w = 0.5
    r = make_reward(cost_weight=w)
    assert r.cost_reference == POOL.cost_reference  # the bundled pool's unit
    scored = score(r, texts, ids)
    out = scored.rewards
    graded = [o.reward for o in scored.outcomes]
    assert run(make_reward(), texts, ids) == graded  # the outcome keeps the graded reward
    seen = set()
    for value, o in zip(out, scored.outcomes, strict=True):
        if not o.plan_ok:  # format errors keep their 0
            assert value == 0.0 and o.cost == 0
            seen.add("format")
        elif o.correct:
            share = min(1.0, w * o.cost / POOL.cost_reference)
            assert value == pytest.approx(1.0 - 0.5 * share, abs=1e-12)
            assert 0.5 <= value < 1.0  # never below a wrong answer
            seen.add("right")
        else:  # a wrong answer is not charged: being cheap does not pay for failing
            assert o.cost > 0 and value == 0.5
            seen.add("wrong")
    assert seen == {"format", "right", "wrong"}
    penalties = [g - v for g, v in zip(graded, out, strict=True) if v is not None]
    assert scored.metrics["cost_penalty"] == pytest.approx(sum(penalties) / len(out))


def test_the_cost_term_is_unitless_the_same_weight_means_the_same_on_dearer_pools():
    """Prices and the pool's reference scaled together leave every adjusted reward as it was."""
    ids = [p.id for p in MATH[:12]]
    texts = [plan(0), plan(3), plan(0, 1, 2)] * 4
    data = POOL.model_dump()
    for worker in data["workers"]:
        worker["price"] = {k: v * 10 for k, v in worker["price"].items()}
    data["cost_reference"] = POOL.cost_reference * 10
    from conductor_core.workers.config import PoolConfig

    dearer = PoolConfig.model_validate(data)
    cheap = run(make_reward(cost_weight=0.7), texts, ids)
    dear = run(make_reward(pool=dearer, cost_weight=0.7), texts, ids)
    assert dear == pytest.approx(cheap)
    assert min(cheap) < 1.0  # and the term did something


def test_a_plan_at_or_beyond_the_weighted_reference_is_worth_a_wrong_answer_not_less():
    p = MATH[0]
    ref = POOL.cost_reference
    at = Outcome(reward=1.0, correct=True, domain="math", workers=[0], plan_len=1, cost=ref)
    beyond = at.model_copy(update={"cost": 50 * ref})
    half = at.model_copy(update={"cost": ref / 2})
    state = RoundState(cached={0: at, 1: beyond, 2: half})
    out = run(make_reward(cost_weight=1.0), ["x"] * 3, [p.id] * 3, rounds=state)
    assert out == [pytest.approx(0.5), pytest.approx(0.5), pytest.approx(0.75)]


def test_cost_weight_divides_cost_by_executions_and_charges_the_right_share():
    ids = [p.id for p in MATH[:6]]
    scored = score(make_reward(cost_weight=0.3, executions=3), [plan(0)] * 6, ids)
    for value, o in zip(scored.rewards, scored.outcomes, strict=True):
        assert o.calls == 3
        share = min(1.0, 0.3 * o.cost / 3 / POOL.cost_reference)
        assert value == pytest.approx(o.reward - (o.reward - 0.5) * share)


def test_correct_cheap_plan_beats_correct_expensive_plan():
    p = MATH[0]
    ref = POOL.cost_reference
    cheap = Outcome(reward=1.0, correct=True, domain="math", workers=[3], plan_len=1, cost=ref / 10)
    dear = Outcome(reward=1.0, correct=True, domain="math", workers=[0], plan_len=1, cost=ref)
    state = RoundState(cached={0: cheap, 1: dear})
    out = run(make_reward(cost_weight=0.5), ["x", "y"], [p.id, p.id], rounds=state)
    assert out == [pytest.approx(1.0 - 0.5 * 0.05), pytest.approx(1.0 - 0.5 * 0.5)]
    # Without the term they tie.
    assert run(make_reward(), ["x", "y"], [p.id, p.id], rounds=state) == [1.0, 1.0]


def test_cost_weight_keeps_infrastructure_failures_none():
    data = POOL.model_dump()
    for w in data["workers"]:
        w["max_retries"] = 0
        w["simulation"]["failures"] = {"server_error": 1.0}
    from conductor_core.workers.config import PoolConfig

    r = make_reward(pool=PoolConfig.model_validate(data), cost_weight=5.0)
    assert run(r, [plan(0), "no plan here"], [MATH[0].id] * 2) == [None, 0.0]
    excluded = RoundState(excluded={0})
    assert run(make_reward(cost_weight=5.0), [plan(0)], [MATH[0].id], rounds=excluded) == [None]


def test_cost_weight_and_reference_config_fields():
    from pydantic import ValidationError

    from conductor_core.train.config import RewardSpec, build_config

    assert RewardSpec().cost_weight == 0.0 and RewardSpec().cost_reference is None
    assert "reference cost" in RewardSpec.model_fields["cost_weight"].description
    config = build_config(
        {},
        stage="base",
        profile="tiny",
        overrides={"reward": {"cost_weight": 0.5, "cost_reference": 0.002}},
    )
    assert (config.reward.cost_weight, config.reward.cost_reference) == (0.5, 0.002)
    with pytest.raises(ValidationError):
        RewardSpec(cost_weight=-1)
    with pytest.raises(ValidationError):
        RewardSpec(cost_reference=0)
    with pytest.raises(ValidationError, match="unitless"):  # an old λ in points per dollar
        RewardSpec(cost_weight=300)
    # the given reference wins over the pool's
    assert make_reward(cost_weight=0.5, cost_reference=0.002).cost_reference == 0.002


def test_a_cost_weight_without_any_reference_is_refused_before_training():
    data = POOL.model_dump()
    data["cost_reference"] = None
    from conductor_core.workers.config import PoolConfig

    bare = PoolConfig.model_validate(data)
    with pytest.raises(ConfigError, match=r"reward\.cost_reference"):
        make_reward(pool=bare, cost_weight=0.5)
    assert make_reward(pool=bare).cost_weight == 0.0  # no weight, no reference needed


def test_cut_off_plans_are_format_errors_and_do_not_run():
    """A plan at the completion limit without its end token scores 0 (code ``truncated``) even
    though its lists parse; one that ended, or any plan without the rule, is run and graded."""
    ids = [p.id for p in MATH[:4]]
    end = 2
    cut = [[5] * 8, [5] * 7 + [end], [5] * 3 + [end], [5] * 8]
    reward = make_reward(truncation=Truncation(max_tokens=8, end_ids=frozenset({end})))
    scored = score(reward, [plan(0)] * 4, ids, completion_ids=cut)
    scores = scored.rewards
    assert scores[0] == scores[3] == 0.0 and scores[1] in (0.5, 1.0) and scores[2] in (0.5, 1.0)
    codes = [o.format_error_code for o in scored.outcomes]
    assert codes == [FormatErrorCode.TRUNCATED, None, None, FormatErrorCode.TRUNCATED]
    assert scored.outcomes[0].calls == 0  # not executed
    assert set(run(make_reward(), [plan(0)] * 4, ids, completion_ids=cut)) <= {0.5, 1.0}


def test_truncation_rule_follows_the_config():
    from conductor_core.train.config import build_config
    from conductor_core.train.grpo import truncation_rule

    class Tok:
        eos_token_id, pad_token_id = 2, None

    on = build_config(
        {"experimental": {"truncated_is_format_error": True}}, stage="base", profile="tiny"
    )
    rule = truncation_rule(on, Tok())
    assert rule == Truncation(on.generation.max_completion_length, frozenset({2}))
    assert truncation_rule(build_config({}, stage="base"), Tok()) is None


def test_renumbered_ids_run_the_pool_workers_they_stand_for():
    """Descriptor mode's renumbering (``workers`` column): a plan naming shown id 7 runs pool
    worker 0, and the outcome reports pool ids (the routing metrics are in pool ids)."""
    ids = [p.id for p in MATH[:40]]
    n = len(ids)
    placed = score(make_reward(), [plan(7)] * n, ids, offered=[[2, 7]] * n, workers=[[1, 0]] * n)
    assert {o.final_worker for o in placed.outcomes} == {0}
    assert placed.metrics["worker_share/0"] == 1.0
    direct = run(make_reward(), [plan(0)] * n, ids)
    assert list(placed.rewards) == direct  # the same worker, the same simulated answers
    unshown = score(make_reward(), [plan(0)], ids[:1], offered=[[2, 7]], workers=[[1, 0]])
    assert unshown.rewards == (0.0,) and unshown.outcomes[0].format_error_code == "unknown_worker"
