"""Baselines that solve one question several times and pick one answer (self-consistency's vote,
Smoothie's choice) record why none was left to pick by the samples' own causes
(:func:`~conductor_core.evaluate.methods.failure_of_samples`): samples that failed by the
request's fault (a worker's 4xx, a context overflow) make a plan failure, graded as a failure and
not retried; only samples all spoiled by infrastructure make an infrastructure failure (left out,
retried)."""

from __future__ import annotations

import asyncio
from importlib import resources
from typing import Any

import pytest

from conductor_core.evaluate.methods import SelfConsistencyMethod, failure_of_samples
from conductor_core.evaluate.routers import smoothie
from conductor_core.evaluate.runner import RunConfig, evaluate_one
from conductor_core.tasks.problem import Problem
from conductor_core.workers.config import WorkerConfig, load_pool
from conductor_core.workers.types import CallResult, ErrorKind, Usage
from conductor_core.workflow.trace import TraceSummary

PROBLEM = Problem(id="q", source="t", domain="math", question="What is 6 * 7?", reference="42")


class Failing:
    """A pool whose worker ``w`` fails every call with ``kinds[w]`` (None: answers 42)."""

    def __init__(self, *kinds: str | None) -> None:
        self.kinds = kinds
        self.calls = 0
        path = resources.files("conductor_core.resources") / "train" / "pool.yaml"
        self.config = load_pool(str(path))

    def __len__(self) -> int:
        return len(self.kinds)

    def worker(self, worker_id: int) -> WorkerConfig:
        return self.config.workers[worker_id]

    async def call(
        self, worker_id: int, messages: Any, *, sample_index=0, deadline=None, priority=0.0
    ) -> CallResult:
        self.calls += 1
        kind = self.kinds[worker_id]
        if kind is None:
            return CallResult(worker=worker_id, model="m", text="42", usage=Usage(output_tokens=1))
        return CallResult(worker=worker_id, model="m", error=f"HTTP 4xx ({kind})", error_kind=kind)


class _Encoder:
    """Smoothie's encoder, never asked to encode here (no answer to choose from)."""

    name = "stand-in"


@pytest.fixture
def smoothie_method(monkeypatch: pytest.MonkeyPatch) -> smoothie.SmoothieMethod:
    monkeypatch.setattr(smoothie, "get_encoder", lambda spec: _Encoder())
    return smoothie.SmoothieMethod([0, 1], name="smoothie")


def summary(**fields: Any) -> TraceSummary:
    return TraceSummary(**fields)


def test_the_samples_failure_is_the_plans_unless_infrastructure_spoiled_them_all() -> None:
    overflow = summary(plan_failure=ErrorKind.CONTEXT_OVERFLOW)
    infra = summary(infra_error=True)
    assert failure_of_samples([overflow, overflow]) == (ErrorKind.CONTEXT_OVERFLOW, False)
    assert failure_of_samples([infra, overflow]) == (ErrorKind.CONTEXT_OVERFLOW, False)
    assert failure_of_samples([infra, infra]) == (None, True)


@pytest.mark.parametrize("kind", [ErrorKind.CONTEXT_OVERFLOW, ErrorKind.CLIENT])
def test_self_consistency_whose_samples_the_worker_rejected_is_a_plan_failure(kind: str) -> None:
    """It was recorded as infrastructure (``infra_error=not answers``): left out of the
    accuracy and retried, although every retry fails the same way."""
    pool = Failing(kind)
    record = asyncio.run(
        evaluate_one(SelfConsistencyMethod(0, n=3), PROBLEM, 0, pool, RunConfig(progress=False))
    )
    assert record.plan_failure == kind and not record.infra_error
    assert record.reward == 0.0 and not record.correct
    assert record.infra_attempts == 1 and pool.calls == 3  # not retried


def test_self_consistency_spoiled_by_infrastructure_stays_an_infrastructure_failure() -> None:
    pool = Failing(ErrorKind.SERVER)
    attempt = asyncio.run(SelfConsistencyMethod(0, n=3).attempt(PROBLEM, pool, 0))
    assert attempt.summary.infra_error and attempt.summary.plan_failure is None


def test_self_consistency_with_an_answer_has_no_failure() -> None:
    attempt = asyncio.run(SelfConsistencyMethod(0, n=2).attempt(PROBLEM, Failing(None), 0))
    assert attempt.summary.answer == "42"
    assert not attempt.summary.infra_error and attempt.summary.plan_failure is None


@pytest.mark.parametrize(
    ("kinds", "plan_failure", "infra_error"),
    [
        (
            (ErrorKind.CONTEXT_OVERFLOW, ErrorKind.CONTEXT_OVERFLOW),
            ErrorKind.CONTEXT_OVERFLOW,
            False,
        ),
        ((ErrorKind.SERVER, ErrorKind.CLIENT), ErrorKind.CLIENT, False),
        ((ErrorKind.SERVER, ErrorKind.RATE_LIMIT), None, True),
    ],
    ids=["all-rejected", "one-rejected-one-infra", "all-infra"],
)
def test_smoothie_records_the_failure_its_candidates_had(
    smoothie_method: smoothie.SmoothieMethod,
    kinds: tuple[str, str],
    plan_failure: str | None,
    infra_error: bool,
) -> None:
    attempt = asyncio.run(smoothie_method.attempt(PROBLEM, Failing(*kinds), 0))
    assert attempt.summary.answer is None
    assert attempt.summary.plan_failure == plan_failure
    assert attempt.summary.infra_error is infra_error
