"""A batch-capable plan source plans a whole shard's first rounds in one call."""

from __future__ import annotations

import asyncio

from conductor_core.evaluate.methods import PlanSourceMethod
from conductor_core.evaluate.runner import RunConfig, run_eval
from conductor_core.policy.base import PlanRequest, PlanResult
from conductor_core.tasks.problem import Problem
from conductor_core.workflow.model import Step, Workflow
from tests.unit.test_executor import FakePool


class BatchSource:
    def __init__(self) -> None:
        self.batches: list[int] = []
        self.single = 0

    def _result(self, request: PlanRequest) -> PlanResult:
        wf = Workflow(steps=(Step(worker=request.sample_index % 2, subtask="do step 0"),))
        return PlanResult(raw=wf.render(), workflow=wf)

    async def plan_many(self, requests):
        self.batches.append(len(requests))
        return [self._result(r) for r in requests]

    async def plan(self, request):
        self.single += 1
        return self._result(request)

    async def aclose(self):
        return None


def test_shard_is_planned_in_one_batch_and_plans_are_used(tmp_path) -> None:
    problems = [
        Problem(id=f"q{i}", source="s", domain="freeform", question=f"Question {i}?", reference="x")
        for i in range(12)
    ]
    source = BatchSource()
    method = PlanSourceMethod("batched", source)
    records = asyncio.run(
        run_eval(
            problems,
            [method],
            FakePool(),
            tmp_path / "r.jsonl",
            RunConfig(repeats=2, progress=False),
        )
    )
    assert source.batches == [24] and source.single == 0
    assert len(records) == 24
    assert {(r.repeat, tuple(r.workers)) for r in records} == {(0, (0,)), (1, (1,))}


def test_batch_planning_can_be_turned_off(tmp_path) -> None:
    problems = [Problem(id="q", source="s", domain="freeform", question="Q?", reference="x")]
    source = BatchSource()
    asyncio.run(
        run_eval(
            problems,
            [PlanSourceMethod("b", source)],
            FakePool(),
            tmp_path / "r.jsonl",
            RunConfig(progress=False, batch_planning=False),
        )
    )
    assert source.batches == [] and source.single == 1
