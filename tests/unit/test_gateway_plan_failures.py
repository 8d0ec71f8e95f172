"""How the gateway answers a workflow left without an answer, by whose fault
(:meth:`~conductor_core.serve.serving.ConductorServing._failure`, ``outcome_of``): a budget that
ran out (the deadline included) is a 200 with empty content and ``finish_reason="length"``; a
worker that rejected a request the plan made (``trace.plan_failure``: a 4xx, a context overflow)
is a 502 ``plan_failure``, plain and streamed; an infrastructure failure is a 502
``worker_error`` that lists the failed calls, not those the deadline cut short."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from conductor_core.policy.fixed import one_step
from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.serving import ConductorServing, outcome_of, ran_out_of_budget
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import PoolConfig, load_pool, parse_pool
from conductor_core.workers.pool import WorkerPool
from conductor_core.workers.types import Completion, ErrorKind, ProviderError, is_plan_fault
from conductor_core.workflow.trace import RoundTrace, SolveTrace, StepTrace, WorkflowTrace

pytest.importorskip("prometheus_client")

QUESTION = "Calculate: (56 + 26) * 25 = ?"


# -- the mapping, on traces ---------------------------------------------------------------------


def step(index: int, kind: str | None = None, skipped: str | None = None) -> StepTrace:
    """A step that replied (no ``kind``), failed with ``kind``, or was ``skipped``."""
    failed = kind is not None
    return StepTrace(
        index=index,
        worker=index,
        model=f"m{index}",
        subtask="s",
        response=None if failed or skipped else "42",
        error=f"boom ({kind})" if failed else None,
        error_kind=kind,
        plan_fault=failed and is_plan_fault(kind),
        skipped=skipped,
    )


def trace_of(
    *steps: StepTrace,
    stopped: str | None = None,
    plan_failure: str | None = None,
    infra_error: bool = False,
) -> SolveTrace:
    """A one-round trace without an answer, as the executor and solve() record it."""
    workflow = WorkflowTrace(
        steps=list(steps), stopped=stopped, plan_failure=plan_failure, infra_error=infra_error
    )
    return SolveTrace(
        question=QUESTION,
        rounds=[RoundTrace(round=0, workflow=workflow)],
        plan_failure=plan_failure,
        infra_error=infra_error,
    )


@pytest.mark.parametrize(
    "trace",
    [
        trace_of(step(0, ErrorKind.DEADLINE), stopped="deadline", plan_failure="deadline_exceeded"),
        trace_of(
            step(0, skipped="budget:deadline"), stopped="deadline", plan_failure="budget:deadline"
        ),
        trace_of(step(0, skipped="budget:max_tokens"), plan_failure="budget:max_tokens"),
    ],
    ids=["call-cut-by-the-deadline", "skipped-at-the-deadline", "token-budget"],
)
def test_a_budget_that_ran_out_is_an_empty_200_not_an_error(trace: SolveTrace) -> None:
    assert ran_out_of_budget(trace)
    assert ConductorServing._failure(trace) is None
    assert outcome_of(trace) == "no_answer"


@pytest.mark.parametrize("kind", [ErrorKind.CLIENT, ErrorKind.CONTEXT_OVERFLOW])
def test_a_request_the_worker_rejected_is_a_502_plan_failure(kind: str) -> None:
    trace = trace_of(step(0, kind), plan_failure=kind)
    assert not ran_out_of_budget(trace)
    failure = ConductorServing._failure(trace)
    assert failure is not None and failure.status == 502
    assert failure.code == "plan_failure" and failure.type == "server_error"
    assert kind in failure.message and "step 0 on worker 0" in failure.message
    assert outcome_of(trace) == "plan_failure"


def test_a_worker_error_lists_the_failed_calls_but_not_those_the_deadline_cut_short() -> None:
    """``_worker_failures`` compared the kind with ``"deadline"``, which no step has (the kind is
    ``deadline_exceeded``): a call cut short by the request's deadline was listed as a failed
    worker. It is the request's budget, not the infrastructure: only the real failure is named."""
    trace = trace_of(
        step(0, ErrorKind.SERVER),
        step(1, ErrorKind.DEADLINE),
        stopped="deadline",
        infra_error=True,
    )
    failure = ConductorServing._failure(trace)
    assert failure is not None and failure.status == 502 and failure.code == "worker_error"
    assert failure.message == "a worker failed: step 0 on worker 0 (server_error)"
    assert outcome_of(trace) == "infra_error"


# -- through the gateway ------------------------------------------------------------------------


class Rejecting:
    """A provider whose every call fails with ``error`` (a worker's 4xx, not retried)."""

    def __init__(self, error: ProviderError) -> None:
        self.error = error
        self.calls = 0

    async def complete(self, messages: Any, *, sample_index: int = 0) -> Completion:
        self.calls += 1
        raise self.error

    async def aclose(self) -> None:
        return None


@pytest.fixture(scope="module")
def one_worker() -> PoolConfig:
    bundled = load_pool(bundled_pool_path())
    return parse_pool({"workers": [bundled.workers[0].model_dump(mode="json")]})


@contextlib.asynccontextmanager
async def gateway(pool: PoolConfig, provider: Rejecting) -> AsyncIterator[Any]:
    """A started gateway whose one-step plans go to ``provider``."""
    app = create_app(GatewayConfig(), pool=pool, plan_source=one_step(0, "answer the question"))
    async with app.router.lifespan_context(app):
        app.state.serving.pool = WorkerPool(pool, providers=[provider], rng=random.Random(0))
        yield app


async def post(app: Any, **fields: Any) -> httpx.Response:
    body = {"model": "conductor", "messages": [{"role": "user", "content": QUESTION}], **fields}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return await client.post("/v1/chat/completions", json=body)


@pytest.mark.parametrize(
    ("status", "message", "kind"),
    [
        (400, "This model's maximum context length is 4096 tokens.", ErrorKind.CONTEXT_OVERFLOW),
        (400, "Invalid value for 'temperature'.", ErrorKind.CLIENT),
    ],
)
def test_a_worker_4xx_is_a_502_naming_the_plan_failure_plain_and_streamed(
    one_worker: PoolConfig, status: int, message: str, kind: str
) -> None:
    """It was a 200 with empty content and ``finish_reason="length"``, as if a budget ran out."""
    from conductor_core.workers.providers.errors import error_for_status

    error = error_for_status(status, message)
    assert error.kind == kind and not error.retryable

    async def go() -> tuple[httpx.Response, httpx.Response, float | None]:
        provider = Rejecting(error)
        async with gateway(one_worker, provider) as app:
            plain = await post(app)
            streamed = await post(app, stream=True)
            counted = app.state.metrics.value(
                "conductor_gateway_workflows_total", {"outcome": "plan_failure"}
            )
            assert provider.calls == 2  # not retried
            return plain, streamed, counted

    plain, streamed, counted = asyncio.run(go())
    assert plain.status_code == 502, plain.text
    error_body = plain.json()["error"]
    assert error_body["code"] == "plan_failure" and error_body["type"] == "server_error"
    assert kind in error_body["message"] and "step 0 on worker 0" in error_body["message"]
    assert "x-should-retry" not in plain.headers  # another plan may fit
    # streamed: the error object, then [DONE], and no finish_reason
    assert streamed.status_code == 200
    data = [line.removeprefix("data: ") for line in streamed.text.splitlines() if line]
    assert data[-1] == "[DONE]"
    assert json.loads(data[-2])["error"]["code"] == "plan_failure"
    assert '"finish_reason": "length"' not in streamed.text
    assert counted == 2
