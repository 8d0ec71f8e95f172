"""Solve traces -> span tree (with a recording stand-in for mlflow's span API), and the sampler."""

from __future__ import annotations

import pytest

from conductor_core.track import traces
from conductor_core.track.traces import log_solve_trace, sample
from conductor_core.workflow.trace import RoundTrace, SolveTrace, StepTrace, WorkflowTrace

KEY = "sk-" + "abcdefghijklmnopqrstuvwx"


class _Span:
    def __init__(self, name, span_type, parent, inputs, attributes, start):
        self.name, self.span_type, self.parent = name, span_type, parent
        self.inputs, self.attributes, self.start = inputs, attributes, start
        self.outputs = self.status = self.end_ns = None
        self.trace_id = "tr-1" if parent is None else parent.trace_id

    def end(self, outputs=None, status=None, end_time_ns=None):
        self.outputs, self.status, self.end_ns = outputs, status, end_time_ns


class _FakeMlflow:
    def __init__(self):
        self.spans: list[_Span] = []

    def start_span_no_context(
        self, name, span_type, parent_span=None, inputs=None, attributes=None, start_time_ns=None
    ):
        span = _Span(name, span_type, parent_span, inputs, attributes, start_time_ns)
        self.spans.append(span)
        return span


@pytest.fixture
def fake(monkeypatch):
    mod = _FakeMlflow()
    monkeypatch.setattr(traces, "mlflow_module", lambda: mod)
    return mod


def _trace() -> SolveTrace:
    steps = [
        StepTrace(index=0, worker=2, model="a", subtask="s0", response="r0", latency_s=1.0),
        StepTrace(index=1, worker=0, model="b", subtask=f"use {KEY}", error="boom", latency_s=2.0),
    ]
    parallel = [
        StepTrace(index=0, worker=0, model="a", subtask="p0", started_s=0.0, finished_s=1.0),
        StepTrace(index=1, worker=1, model="b", subtask="p1", started_s=0.0, finished_s=2.0),
    ]
    return SolveTrace(
        question="q?",
        rounds=[
            RoundTrace(
                round=1, conductor_latency_s=0.5, workflow=WorkflowTrace(steps=steps, wall_s=3.0)
            ),
            RoundTrace(round=2, plan_error={"reason": "unequal lengths"}),
            RoundTrace(round=3, workflow=WorkflowTrace(steps=parallel, wall_s=2.0)),
        ],
        answer="42",
        calls=4,
        wall_s=5.5,
    )


def test_span_tree_and_fields(fake):
    trace_id = log_solve_trace(_trace().model_dump(), name="m p1", attributes={"correct": False})
    assert trace_id == "tr-1"
    names = [s.name for s in fake.spans]
    assert names == [
        "m p1",
        "round 1",
        "step 0 (worker 2)",
        "step 1 (worker 0)",
        "round 2",
        "round 3",
        "step 0 (worker 0)",
        "step 1 (worker 1)",
    ]
    root, r1, s0, s1, r2, r3, _p0, p1 = fake.spans
    assert root.span_type == "CHAIN" and root.parent is None
    assert root.attributes["correct"] is False and root.attributes["calls"] == 4
    assert root.outputs == {"answer": "42"}
    assert r1.parent is root and s0.parent is r1 and p1.parent is r3
    assert s0.span_type == "LLM" and s0.inputs["worker"] == 2 and s0.outputs["response"] == "r0"
    assert s1.status == "ERROR" and s0.status == "OK"
    assert r2.status == "ERROR" and r2.outputs["plan_error"] == {"reason": "unequal lengths"}
    assert KEY not in repr([(s.inputs, s.outputs, s.attributes) for s in fake.spans])


def test_timeline_is_sequential_or_parallel_as_recorded(fake):
    log_solve_trace(_trace(), name="t")
    root, r1, s0, s1, _r2, r3, p0, p1 = fake.spans
    sec = 1_000_000_000
    # Steps without times are laid out one after another after the Conductor's latency.
    assert s0.start - r1.start == pytest.approx(0.5 * sec, abs=1000)
    assert s1.start == s0.end_ns
    assert s1.end_ns - s1.start == pytest.approx(2.0 * sec, abs=1000)
    # Recorded start times are kept: the two parallel steps start together.
    assert p0.start == p1.start == r3.start
    assert r3.end_ns == root.end_ns
    assert r1.end_ns - r1.start == pytest.approx(3.5 * sec, abs=1000)
    assert all(s.end_ns >= s.start for s in fake.spans)


def test_sample_is_seeded_ordered_and_bounded():
    items = list(range(100))
    a = sample(items, 10, seed=3)
    assert a == sample(items, 10, seed=3)
    assert a != sample(items, 10, seed=4)
    assert a == sorted(a) and len(set(a)) == 10
    assert sample(items[:3], 10) == [0, 1, 2]
    assert sample(items, 0) == []
    with pytest.raises(ValueError, match="k must be"):
        sample(items, -1)
