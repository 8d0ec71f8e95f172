"""Executor semantics (what each worker sees), overlap (event order), failures and budgets."""

from __future__ import annotations

import asyncio
import hashlib
import re
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from conductor_core.workers.types import CallResult, ErrorKind, Usage
from conductor_core.workflow.executor import Budget, execute
from conductor_core.workflow.model import ALL, AccessMode, Step, Workflow
from conductor_core.workflow.prompts import worker_message

RESPONSE_RE = re.compile(r"<response>\s*(.*?)\s*</response>", re.S)


class FakePool:
    """Deterministic in-process pool: the reply is a digest of everything the worker was shown."""

    def __init__(
        self,
        n: int = 4,
        *,
        fail: set[int] = frozenset(),
        kinds: dict[int, str] | None = None,
        yields: int = 1,
        tokens: int = 10,
        cost: float = 0.01,
    ) -> None:
        self.n = n
        self.fail = fail
        self.kinds = kinds or {}  # worker id -> the error kind its failures have (else SERVER)
        self.yields = yields
        self.tokens = tokens
        self.cost_per_call = cost
        self.seen: list[tuple[int, str]] = []
        self.events: list[tuple[str, int]] = []

    def __len__(self) -> int:
        return self.n

    def worker(self, i: int) -> SimpleNamespace:
        return SimpleNamespace(model=f"model-{i}")

    async def call(
        self, worker_id, messages, *, sample_index=0, deadline=None, priority=0.0
    ) -> CallResult:
        content = messages[-1]["content"]
        self.seen.append((worker_id, content))
        subtask = content.rsplit("Your assigned subtask:", 1)[-1].strip()
        self.events.append(("call", int(subtask.split()[-1])))
        for _ in range(self.yields):
            await asyncio.sleep(0)
        if worker_id in self.fail or worker_id in self.kinds:
            return CallResult(
                worker=worker_id,
                model=f"model-{worker_id}",
                error="boom",
                error_kind=self.kinds.get(worker_id, ErrorKind.SERVER),
            )
        reply = f"R[{hashlib.sha256(content.encode()).hexdigest()[:8]}]"
        return CallResult(
            worker=worker_id,
            model=f"model-{worker_id}",
            text=reply,
            usage=Usage(input_tokens=self.tokens, output_tokens=self.tokens),
            cost=self.cost_per_call,
        )


def wf(*steps: tuple[int, object], mode: AccessMode = AccessMode.BINARY) -> Workflow:
    return Workflow(
        steps=tuple(
            Step(worker=w, subtask=f"do step {i}", access=ALL if a == "all" else tuple(a))
            for i, (w, a) in enumerate(steps)
        ),
        access_mode=mode,
    )


def run(workflow: Workflow, pool: FakePool, **kw):
    events: list[dict] = []
    trace = asyncio.run(execute(workflow, "What is 6*7?", pool, on_event=events.append, **kw))
    return trace, events


async def sequential_reference(workflow: Workflow, question: str, pool: FakePool) -> list[str]:
    """Steps strictly in order, as the paper's code runs them."""
    responses: list[str] = []
    for i, step in enumerate(workflow.steps):
        shown = [(j, workflow.steps[j].subtask, responses[j]) for j in step.visible(i)]
        msg = worker_message(question, shown, step.subtask)
        res = await pool.call(step.worker, [{"role": "user", "content": msg}])
        responses.append(res.text)
    return responses


def test_each_worker_sees_exactly_its_access() -> None:
    pool = FakePool()
    plan = wf((0, []), (1, []), (2, "all"), (3, []))
    trace, _ = run(plan, pool)
    by_step = {int(c.rsplit("Your assigned subtask:", 1)[-1].split()[-1]): c for _, c in pool.seen}
    assert RESPONSE_RE.findall(by_step[0]) == []
    assert RESPONSE_RE.findall(by_step[1]) == []
    assert RESPONSE_RE.findall(by_step[2]) == [trace.steps[0].response, trace.steps[1].response]
    assert RESPONSE_RE.findall(by_step[3]) == []
    assert all("What is 6*7?" in c for _, c in pool.seen)
    assert trace.answer == trace.steps[3].response and trace.answer_step == 3
    assert [s.visible for s in trace.steps] == [[], [], [0, 1], []]


def test_index_mode_sees_listed_steps_only() -> None:
    pool = FakePool()
    plan = wf((0, []), (1, [0]), (2, [1]), (3, [0, 2]), mode=AccessMode.INDEX)
    trace, _ = run(plan, pool)
    shown = {i: RESPONSE_RE.findall(c) for i, (_, c) in enumerate(pool.seen)}
    resp = [s.response for s in trace.steps]
    assert shown == {0: [], 1: [resp[0]], 2: [resp[1]], 3: [resp[0], resp[2]]}


def test_independent_steps_overlap_and_dependent_steps_wait() -> None:
    pool = FakePool()
    plan = wf((0, []), (1, []), (2, []), (3, "all"))
    _, events = run(plan, pool)
    order = [(e["type"], e.get("index")) for e in events if e["type"].startswith("step")]
    starts = [i for t, i in order if t == "step_start"]
    first_end = next(k for k, (t, _) in enumerate(order) if t == "step_end")
    # All three independent steps started before any of them finished ...
    assert sorted(starts[:3]) == [0, 1, 2]
    assert order.index(("step_start", 2)) < first_end
    # ... and the "all" step started only after every earlier step ended.
    assert order.index(("step_start", 3)) > max(order.index(("step_end", i)) for i in range(3))


def test_chain_runs_in_order() -> None:
    pool = FakePool()
    plan = wf((0, []), (1, "all"), (2, "all"))
    _, events = run(plan, pool)
    kinds = [(e["type"], e.get("index")) for e in events if e["type"] in ("step_start", "step_end")]
    assert kinds == [
        ("step_start", 0),
        ("step_end", 0),
        ("step_start", 1),
        ("step_end", 1),
        ("step_start", 2),
        ("step_end", 2),
    ]


@st.composite
def plans(draw) -> Workflow:
    mode = draw(st.sampled_from(list(AccessMode)))
    n = draw(st.integers(1, 6))
    steps = []
    for i in range(n):
        if mode is AccessMode.BINARY:
            access = draw(st.sampled_from(["all", []]))
        else:
            access = draw(
                st.one_of(
                    st.just("all"), st.lists(st.integers(0, max(0, i - 1)), max_size=i, unique=True)
                )
            )
            if i == 0 and access != "all":
                access = []
        steps.append((draw(st.integers(0, 3)), access))
    return wf(*steps, mode=mode)


@settings(max_examples=60, deadline=None)
@given(plans(), st.integers(0, 3))
def test_same_results_as_sequential_execution(plan: Workflow, yields: int) -> None:
    concurrent = asyncio.run(execute(plan, "Q?", FakePool(yields=yields)))
    sequential = asyncio.run(sequential_reference(plan, "Q?", FakePool(yields=yields)))
    assert [s.response for s in concurrent.steps] == sequential


def test_failed_step_skips_dependents_and_marks_infra_error() -> None:
    pool = FakePool(fail={1})
    trace, _ = run(wf((0, []), (1, []), (2, "all")), pool)
    assert trace.steps[1].error_kind == ErrorKind.SERVER
    assert trace.steps[2].skipped == "dependency:1"
    assert trace.answer is None and trace.infra_error
    assert trace.calls == 2


def test_a_failure_the_plan_caused_is_a_plan_failure_not_infrastructure() -> None:
    """A worker rejecting the request (a context overflow, another 4xx, the plan's deadline) is
    the plan's fault: the step says so, and the answer it spoils is the plan's failure."""
    for kind in (ErrorKind.CONTEXT_OVERFLOW, ErrorKind.CLIENT, ErrorKind.DEADLINE):
        trace, _ = run(wf((0, []), (1, []), (2, "all")), FakePool(kinds={1: kind}))
        assert trace.steps[1].plan_fault and not trace.steps[0].plan_fault
        assert trace.steps[2].skipped == "dependency:1"
        assert trace.answer is None and trace.plan_failure == kind and not trace.infra_error
    # the last step's own failure
    trace, _ = run(wf((0, []), (1, "all")), FakePool(kinds={1: ErrorKind.CONTEXT_OVERFLOW}))
    assert trace.plan_failure == "context_overflow" and not trace.infra_error
    # infrastructure kinds stay infrastructure
    for kind in (ErrorKind.RATE_LIMIT, ErrorKind.SERVER, ErrorKind.TIMEOUT, ErrorKind.CONNECTION):
        trace, _ = run(wf((0, []), (1, "all")), FakePool(kinds={1: kind}))
        assert trace.infra_error and trace.plan_failure is None
        assert not trace.steps[1].plan_fault


def test_a_plan_failure_behind_the_answer_decides_over_an_infrastructure_one() -> None:
    """The answering step reads a step that infrastructure failed and one the plan failed: the
    plan's failure alone left it without its input, so the plan failed (through a chain of
    skipped steps too)."""
    pool = FakePool(kinds={0: ErrorKind.SERVER, 1: ErrorKind.CONTEXT_OVERFLOW})
    trace, _ = run(wf((0, []), (1, []), (2, "all")), pool)
    assert trace.answer is None and trace.plan_failure == "context_overflow"
    assert not trace.infra_error
    plan = wf((0, []), (1, [0]), (2, [1]), mode=AccessMode.INDEX)
    trace, _ = run(plan, FakePool(kinds={0: ErrorKind.SERVER}))
    assert [s.skipped for s in trace.steps] == [None, "dependency:0", "dependency:1"]
    assert trace.infra_error and trace.plan_failure is None


def test_a_budget_stop_without_an_answer_is_a_plan_failure() -> None:
    trace, _ = run(wf((0, []), (1, "all")), FakePool(tokens=50), budget=Budget(max_tokens=100))
    assert trace.answer is None and trace.plan_failure == "budget:max_tokens"
    assert not trace.infra_error
    trace, _ = run(wf((0, []), (1, "all")), FakePool(), budget=Budget(deadline_s=0.0))
    assert trace.plan_failure == "budget:deadline" and not trace.infra_error
    # a budget that leaves the answer is no failure
    trace, _ = run(wf((0, []), (1, [])), FakePool(), budget=Budget(max_steps=5))
    assert trace.answer is not None and trace.plan_failure is None


def test_failure_of_an_unread_step_does_not_spoil_the_answer() -> None:
    trace, _ = run(wf((1, []), (0, [])), FakePool(fail={1}))
    assert trace.answer == trace.steps[1].response and not trace.infra_error


def test_answer_fallback_takes_last_non_empty_output() -> None:
    trace, _ = run(wf((0, []), (1, [])), FakePool(fail={1}), answer_fallback=True)
    assert trace.answer == trace.steps[0].response and trace.answer_step == 0
    assert not trace.infra_error


def test_token_budget_stops_later_steps_with_reason() -> None:
    pool = FakePool(tokens=50)
    trace, _ = run(wf((0, []), (1, "all"), (2, "all")), pool, budget=Budget(max_tokens=100))
    assert [s.skipped for s in trace.steps] == [None, "budget:max_tokens", "budget:max_tokens"]
    assert trace.stopped == "max_tokens" and trace.answer is None and not trace.infra_error


def test_cost_and_step_budgets() -> None:
    trace, _ = run(wf((0, []), (1, "all")), FakePool(cost=1.0), budget=Budget(max_cost=0.5))
    assert trace.stopped == "max_cost" and trace.steps[1].skipped == "budget:max_cost"
    trace, _ = run(wf((0, []), (1, []), (2, [])), FakePool(), budget=Budget(max_steps=2))
    assert trace.stopped == "max_steps" and trace.calls == 2


def test_totals_and_trace_are_json_serialisable() -> None:
    trace, _ = run(wf((0, []), (1, "all")), FakePool(tokens=7, cost=0.25))
    assert (trace.calls, trace.input_tokens, trace.output_tokens) == (2, 14, 14)
    assert abs(trace.cost - 0.5) < 1e-12
    again = type(trace).model_validate_json(trace.model_dump_json())
    assert again == trace
    assert all(len(s.prompt_digest) == 16 for s in trace.steps)


def test_previous_answer_visible_only_to_all_steps() -> None:
    pool = FakePool()
    asyncio.run(execute(wf((0, []), (1, "all")), "Q?", pool, previous_answer="PREV-ANSWER-42"))
    assert "PREV-ANSWER-42" not in pool.seen[0][1]
    assert "PREV-ANSWER-42" in pool.seen[1][1]


def test_empty_workflow_has_no_answer() -> None:
    trace = asyncio.run(execute(Workflow(), "Q?", FakePool()))
    assert trace.answer is None and trace.calls == 0 and not trace.infra_error


class IndexRecordingPool(FakePool):
    """FakePool that also records each call's sample index."""

    def __init__(self) -> None:
        super().__init__()
        self.indices: list[tuple[int, str, int]] = []

    async def call(self, worker_id, messages, *, sample_index=0, deadline=None, priority=0.0):
        self.indices.append((worker_id, messages[-1]["content"], sample_index))
        return await super().call(worker_id, messages, sample_index=sample_index)


def test_a_request_repeated_within_a_plan_is_a_new_sample() -> None:
    """Steps making one request (worker, subtask, visible steps) draw samples 0, 1, 2 of it, as
    a sampled API answers twice; a request made once keeps the plan's sample index."""
    from conductor_core.workflow.executor import REPEAT_STRIDE

    same = Step(worker=0, subtask="do step 0", access=())
    plan = Workflow(
        steps=(
            same,
            same,
            Step(worker=1, subtask="do step 0", access=()),
            same,
            Step(worker=0, subtask="do step 0", access=(0,)),  # another visible set: its own
            Step(worker=2, subtask="do step 5", access=ALL),
        )
    )
    pool = IndexRecordingPool()
    asyncio.run(execute(plan, "Q?", pool, sample_index=7))
    by_prompt: dict[tuple[int, str], list[int]] = {}
    for worker, prompt, index in pool.indices:
        by_prompt.setdefault((worker, prompt), []).append(index)
    repeated = [sorted(v) for v in by_prompt.values() if len(v) > 1]
    assert repeated == [[7, 7 + REPEAT_STRIDE, 7 + 2 * REPEAT_STRIDE]]
    assert sorted(i for v in by_prompt.values() if len(v) == 1 for i in v) == [7, 7, 7]


def test_repeated_requests_to_a_simulated_worker_draw_different_replies() -> None:
    """On the bundled simulated pool, a plan asking a middling worker the same subtask twice
    gets two replies that mostly differ (before, one reply twice), and the first of them is
    the reply the request alone gets."""
    from conductor_core.tasks.problem import read_problems
    from conductor_core.workers.bundled import bundled_train_pool_path, bundled_train_problems_path
    from conductor_core.workers.config import load_pool
    from conductor_core.workers.pool import WorkerPool

    problems = read_problems(bundled_train_problems_path())[:40]
    once = Step(worker=3, subtask="Solve it.", access=())  # the generalist
    alone, twice = Workflow(steps=(once,)), Workflow(steps=(once, once))

    async def replies(question: str) -> tuple[str | None, str | None, str | None]:
        async with WorkerPool(load_pool(bundled_train_pool_path())) as pool:
            both = await execute(twice, question, pool)
            single = await execute(alone, question, pool)
        return both.steps[0].response, both.steps[1].response, single.steps[0].response

    got = [asyncio.run(replies(p.question)) for p in problems]
    assert all(first == single for first, _, single in got)
    assert sum(first != second for first, second, _ in got) > len(got) // 2
