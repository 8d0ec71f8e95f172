"""The solve round loop: format errors, keep-answer rounds, recursion, subsets and budgets."""

from __future__ import annotations

import asyncio

from conductor_core.policy.base import PlanRequest, PlanResult
from conductor_core.solve import SolveOptions, solve
from conductor_core.workflow.errors import FormatErrorCode, PlanFormatError
from conductor_core.workflow.executor import Budget
from conductor_core.workflow.model import Step, Workflow
from tests.unit.test_executor import FakePool


class ScriptedSource:
    """Returns the given results in order and records the requests it saw."""

    def __init__(self, *results: PlanResult) -> None:
        self.results = list(results)
        self.requests: list[PlanRequest] = []

    async def plan(self, request: PlanRequest) -> PlanResult:
        self.requests.append(request)
        return self.results.pop(0)

    async def aclose(self) -> None:
        return None


def ok(*workers: int) -> PlanResult:
    wf = Workflow(
        steps=tuple(
            Step(worker=w, subtask=f"do step {i}", access="all" if i else ())
            for i, w in enumerate(workers)
        )
    )
    return PlanResult(raw=wf.render(), workflow=wf, input_tokens=5, output_tokens=7)


KEEP = PlanResult(raw="model_id = []\nsubtasks = []\naccess_list = []", workflow=Workflow())


def bad() -> PlanResult:
    err = PlanFormatError(FormatErrorCode.MISSING_LIST, "no access_list")
    return PlanResult(raw="nonsense", error=err)


def go(source, pool=None, **opts):
    return asyncio.run(solve("Q?", source, pool or FakePool(), options=SolveOptions(**opts)))


def test_single_round_answer_is_last_step() -> None:
    trace = go(ScriptedSource(ok(0, 1)))
    assert trace.answer == trace.rounds[0].workflow.steps[-1].response
    assert trace.calls == 2 and not trace.format_error and len(trace.rounds) == 1
    assert trace.rounds[0].conductor_output_tokens == 7


def test_unparsable_first_plan_is_a_format_error_without_calls() -> None:
    trace = go(ScriptedSource(bad()))
    assert trace.format_error and trace.answer is None and trace.calls == 0
    assert trace.rounds[0].plan_error["code"] == "missing_list"


def test_recursion_shows_previous_plan_and_answer_then_keeps() -> None:
    source = ScriptedSource(ok(0), KEEP)
    trace = go(source, max_rounds=3)
    first = trace.rounds[0].workflow.answer
    assert trace.answer == first and trace.rounds[1].kept_previous and len(trace.rounds) == 2
    prev = source.requests[1].previous
    assert prev is not None and prev.answer == first and "model_id = [0]" in prev.plan


def test_recursion_shows_the_raw_completion_with_what_surrounds_the_lists() -> None:
    """The previous plan is the Conductor's own completion, as the authors' code shows it, not
    the plan as parsed and rendered again."""
    planned = ok(0)
    raw = "The question is arithmetic: one step.\n" + planned.raw + "\n"
    source = ScriptedSource(PlanResult(raw=raw, workflow=planned.workflow), KEEP)
    go(source, max_rounds=2)
    assert source.requests[1].previous.plan == raw


def test_recursion_new_plan_replaces_answer_and_sees_previous() -> None:
    pool = FakePool()
    trace = go(ScriptedSource(ok(0), ok(1, 2)), pool, max_rounds=2)
    assert trace.answer == trace.rounds[1].workflow.answer != trace.rounds[0].workflow.answer
    first_answer = trace.rounds[0].workflow.answer
    assert first_answer in pool.seen[-1][1]  # the "all" step of round 2 saw the previous answer
    assert trace.calls == 3


def test_bad_plan_in_later_round_keeps_previous_answer() -> None:
    trace = go(ScriptedSource(ok(0), bad()), max_rounds=2)
    assert trace.answer == trace.rounds[0].workflow.answer and not trace.format_error


def plan_text(*workers: int) -> str:
    return ok(*workers).raw


def test_a_subset_is_offered_under_its_pool_ids_and_runs_as_written() -> None:
    """2 of 4 workers offered ({1, 3}): the Conductor is shown Model 1 and Model 3 (no
    renumbering), and a plan naming Model 3 runs on pool worker 3 as written."""
    from conductor_core.policy.text import TextPlanSource
    from conductor_core.solve import plan_request
    from conductor_core.workflow.prompts import plan_messages

    options = SolveOptions(worker_ids=(1, 3))
    request = plan_request("Q?", 4, options)
    assert [w.id for w in request.workers] == [1, 3]
    full = plan_messages(request)[0]["content"]
    assert (
        "Available models:\nModel 1\nModel 3" in full
        and "Model 0" not in full.split("Available models:")[-1]
    )
    compact = SolveOptions(worker_ids=(1, 3), prompt_style="compact")
    assert "Models: 1, 3" in plan_messages(plan_request("Q?", 4, compact))[0]["content"]
    pool = FakePool(n=4)
    trace = go(TextPlanSource(plan_text(3, 1)), pool, worker_ids=(1, 3))
    assert not trace.format_error and [w for w, _ in pool.seen] == [3, 1]
    assert [s.worker for s in trace.rounds[0].workflow.steps] == [3, 1]
    assert trace.rounds[0].raw_plan.startswith("model_id = [3, 1]")


def test_a_plan_naming_a_worker_not_offered_is_rejected_naming_the_offer() -> None:
    pool = FakePool(n=4)
    from conductor_core.policy.text import TextPlanSource

    trace = go(TextPlanSource(plan_text(0)), pool, worker_ids=(1, 3))
    assert trace.format_error and trace.calls == 0 and not pool.seen
    error = trace.rounds[0].plan_error
    assert error == {
        "code": "unknown_worker",
        "message": "step 0 uses model 0, which is not offered; the offered models are 1, 3",
    }
    # A plan source that skips the parser cannot run a worker that was not offered either.
    trace = go(ScriptedSource(ok(1, 2)), pool, worker_ids=(1, 3))
    assert trace.format_error and not pool.seen
    assert trace.rounds[0].plan_error["message"].startswith("step 1 uses model 2")


def test_descriptions_are_stored_by_pool_id_and_reach_the_right_worker() -> None:
    from conductor_core.solve import plan_request
    from conductor_core.workflow.prompts import plan_messages

    described = tuple(f"worker {i} description" for i in range(4))
    options = SolveOptions(worker_ids=(3, 1), descriptors=True, descriptions=described)
    request = plan_request("Q?", 4, options)
    assert [(w.id, w.description) for w in request.workers] == [
        (3, "worker 3 description"),
        (1, "worker 1 description"),
    ]
    text = plan_messages(request)[0]["content"]
    assert "Model 3: worker 3 description\nModel 1: worker 1 description" in text
    assert "worker 0 description" not in text and "worker 2 description" not in text
    # a pool worker past the end of descriptions has none
    short = plan_request(
        "Q?", 4, SolveOptions(worker_ids=(0, 3), descriptors=True, descriptions=("only zero",))
    )
    assert [w.description for w in short.workers] == ["only zero", ""]


def test_infra_failure_is_not_a_wrong_answer() -> None:
    trace = go(ScriptedSource(ok(0, 1)), FakePool(fail={1}))
    assert trace.infra_error and trace.answer is None and not trace.format_error


def test_budget_is_shared_across_rounds() -> None:
    source = ScriptedSource(ok(0, 1), ok(2))
    trace = go(source, FakePool(tokens=50), max_rounds=2, budget=Budget(max_tokens=200))
    assert len(trace.rounds) == 1  # round 1 spent 200 tokens: no budget for round 2


def continue_from(source, previous, pool=None, **opts):
    return asyncio.run(
        solve("Q?", source, pool or FakePool(), options=SolveOptions(**opts), previous=previous)
    )


def test_continuing_from_a_previous_round_runs_only_the_next_round() -> None:
    from conductor_core.policy.base import PreviousRound

    previous = PreviousRound(
        plan="model_id = [0]\nsubtasks = ['x']\naccess_list = [[]]", answer="7"
    )
    source = ScriptedSource(KEEP)
    trace = continue_from(source, previous, max_rounds=2)
    assert source.requests[0].previous == previous and len(trace.rounds) == 1
    assert trace.answer == "7" and trace.rounds[0].kept_previous and trace.calls == 0
    pool = FakePool()
    trace = continue_from(ScriptedSource(ok(1)), previous, pool, max_rounds=2)
    assert "7" in pool.seen[-1][1] or trace.rounds[0].workflow.steps[0].access == []
    assert trace.answer == trace.rounds[0].workflow.answer and trace.rounds[0].round == 1
    # The first round this call runs decides its format error and infrastructure failure.
    trace = continue_from(ScriptedSource(bad()), previous, max_rounds=2)
    assert trace.format_error and trace.answer == "7"
    trace = continue_from(ScriptedSource(ok(0, 1)), previous, FakePool(fail={1}), max_rounds=2)
    assert trace.infra_error


def test_a_plan_failure_is_the_traces_and_a_later_round_keeps_the_answer() -> None:
    """A plan that fails by its own fault (here a worker rejects its prompt as too long) is the
    trace's plan failure, not an infrastructure failure; in a later round deployment keeps the
    previous answer, the trace still recording the failure of the first round it ran."""
    from conductor_core.policy.base import PreviousRound
    from conductor_core.workers.types import ErrorKind

    overflow = FakePool(kinds={1: ErrorKind.CONTEXT_OVERFLOW})
    trace = go(ScriptedSource(ok(0, 1), ok(2)), overflow, max_rounds=2)
    assert trace.plan_failure == "context_overflow" and not trace.infra_error
    assert trace.answer is None and len(trace.rounds) == 1  # as a first-round format error
    previous = PreviousRound(
        plan="model_id = [0]\nsubtasks = ['x']\naccess_list = [[]]", answer="7"
    )
    overflow = FakePool(kinds={1: ErrorKind.CONTEXT_OVERFLOW})
    trace = continue_from(ScriptedSource(ok(0, 1)), previous, overflow, max_rounds=2)
    assert trace.plan_failure == "context_overflow" and trace.answer == "7"
    assert not trace.infra_error and not trace.format_error
    # a round after the first run that fails keeps the answer and is no failure of the trace
    overflow = FakePool(kinds={1: ErrorKind.CONTEXT_OVERFLOW})
    trace = go(ScriptedSource(ok(0), ok(0, 1)), overflow, max_rounds=2)
    assert trace.answer == trace.rounds[0].workflow.answer and trace.plan_failure is None
    assert trace.rounds[1].workflow.plan_failure == "context_overflow"


def test_prompt_style_travels_on_the_request() -> None:
    source = ScriptedSource(ok(0))
    go(source, prompt_style="compact")
    assert source.requests[0].prompt_style == "compact"


def test_solve_options_from_settings_carry_the_prompt_style() -> None:
    from conductor_core.solve import solve_options
    from conductor_core.workers.bundled import bundled_pool_path
    from conductor_core.workers.config import load_pool

    pool = load_pool(bundled_pool_path())
    opts = solve_options(pool, max_steps=3, descriptors=True, prompt_style="compact", rounds=2)
    assert opts.prompt_style == "compact" and opts.max_rounds == 2 and opts.budget.max_steps == 3
    assert opts.descriptions == tuple(w.description for w in pool.workers)


def test_a_later_round_asking_the_same_subtask_again_gets_a_fresh_sample() -> None:
    """Round 2 asking round 1's worker the same subtask is a new sample: a seeded simulated worker
    draws its reply anew (as a real model sampled again does) instead of handing round 1's back,
    so a new plan can mend a wrong answer. Before, every round used one sample index and a
    repeated plan always reproduced round 1's answer."""
    from conductor_core.tasks.problem import read_problems
    from conductor_core.workers.bundled import (
        bundled_train_pool_path,
        bundled_train_problems_path,
    )
    from conductor_core.workers.config import load_pool
    from conductor_core.workers.pool import WorkerPool
    from conductor_core.workflow.executor import execute

    problems = read_problems(bundled_train_problems_path())[:40]
    plan = Workflow(steps=(Step(worker=3, subtask="Solve it.", access=()),))  # the generalist

    async def answers(question: str) -> tuple[str | None, str | None, str | None]:
        async with WorkerPool(load_pool(bundled_train_pool_path())) as pool:
            source = ScriptedSource(PlanResult(raw=plan.render(), workflow=plan), KEEP)
            source.results.insert(1, PlanResult(raw=plan.render(), workflow=plan))
            trace = await solve(question, source, pool, options=SolveOptions(max_rounds=2))
            again = await execute(plan, question, pool)  # round 1 run on its own
        return trace.rounds[0].workflow.answer, trace.rounds[1].workflow.answer, again.answer

    pairs = [asyncio.run(answers(p.question)) for p in problems]
    assert all(first == again for first, _, again in pairs)  # round 1 is as before
    changed = sum(first != second for first, second, _ in pairs)
    assert changed > len(pairs) // 2  # a middling worker's second sample differs mostly
