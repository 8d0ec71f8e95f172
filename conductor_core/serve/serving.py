"""The serving object of the gateway: one worker pool and one plan source per app, answering chat
completions with :func:`conductor_core.solve.solve`, whole or streamed.

A request's last user message is the question; earlier messages are put before it as context.
The workflow's answer is the assistant message; ``usage`` sums the Conductor's tokens (every
round) and every worker call's. The ``conductor`` extension of the request maps onto
:class:`~conductor_core.solve.SolveOptions`; it may only lower the server's limits.

A JSON ``response_format`` is asked of the last step's worker (the executor's
:data:`~conductor_core.workflow.executor.ANSWER_FORMAT`, set in the workflow's context) and the
answer is checked against it (:mod:`.structured`): an answer that fails is a 502
``response_format_unmet``. Streamed, such an answer is sent whole once it has passed the check.

No error message sent to a client names an internal address: an upstream's URL (the Conductor's,
a worker's) is replaced by ``<url>`` (:mod:`.redaction`); the full error goes to the log.

:class:`ConductorServing` puts together the modules that each do one part:

* :mod:`.request_mapping`: a request validated against the server and mapped onto a solve job;
* :mod:`.workflow_run`: a job run on the pool, within the timeout, cancelled when its client goes;
* :mod:`.outcomes`: what a finished workflow means for its client (error, answer, usage);
* :mod:`.chat_completion` and :mod:`.chat_stream`: the answer whole, or as server-sent events
  (:mod:`.sse`, :mod:`.workflow_events`, :mod:`.answer`);
* :mod:`.readiness`, :mod:`.worker_health` and :mod:`.probe`: readiness and the workers' health;
* :mod:`.drain` and :mod:`.trace_logging`: the tasks in flight, and sampled traces to MLflow.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from conductor_core.policy.base import PlanSource
from conductor_core.serve.answer import AnswerStream, cut_to_tokens, final_answer
from conductor_core.serve.auth import SpendQuota
from conductor_core.serve.chat_completion import chat_completion
from conductor_core.serve.chat_stream import stream_chat_completion
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.drain import InFlight
from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.serve.outcomes import failure_of, outcome_of, ran_out_of_budget, usage_of
from conductor_core.serve.probe import Probe
from conductor_core.serve.protocol import (
    ChatCompletionRequest,
    ChatCompletionResponse,
    ConductorOptions,
)
from conductor_core.serve.readiness import Readiness
from conductor_core.serve.redaction import internal_hosts, redact_urls
from conductor_core.serve.request_mapping import RequestMapper, SolveJob, compose_question
from conductor_core.serve.trace_logging import TraceLog
from conductor_core.serve.worker_health import WorkerHealth
from conductor_core.serve.workflow_run import WorkflowRunner
from conductor_core.solve import SolveOptions
from conductor_core.workers.config import PoolConfig
from conductor_core.workers.pool import WorkerPool
from conductor_core.workflow.trace import SolveTrace

__all__ = [
    "AnswerStream",
    "ConductorServing",
    "SolveJob",
    "compose_question",
    "cut_to_tokens",
    "final_answer",
    "outcome_of",
    "ran_out_of_budget",
    "redact_urls",
    "usage_of",
]


class ConductorServing:
    """Answers chat completions by solving them on one pool with one plan source.

    Built once per app lifespan; :meth:`aclose` drains the workflows in flight, then closes the
    pool and the plan source.

    Args:
        config: the gateway settings (defaults of the solve options, timeouts, sampling).
        pool_config: the worker pool.
        plan_source: where plans come from (closed by :meth:`aclose`).
        metrics: where workflows are counted.
        rng: decides which requests are traced to MLflow (``config.trace_sample_rate``).
        trace_logger: logs a trace (default: :func:`conductor_core.track.traces.log_solve_trace`).
        probe_transport: the ``httpx`` transport of the readiness and health checks (tests
            pass a mock; default: the network).
        quota: charged with the cost of each workflow that ends, to its job's caller (None:
            no spend quota).
        tracer: the OpenTelemetry tracer of the workflows' spans (None: no spans); each
            workflow's calls carry its request id either way (:mod:`conductor_core.telemetry`).
    """

    _failure = staticmethod(failure_of)

    def __init__(
        self,
        config: GatewayConfig,
        pool_config: PoolConfig,
        plan_source: PlanSource,
        *,
        metrics: GatewayMetrics,
        rng: random.Random | None = None,
        trace_logger: Callable[..., Any] | None = None,
        probe_transport: Any = None,
        quota: SpendQuota | None = None,
        tracer: Any = None,
    ) -> None:
        self.config = config
        self.pool_config = pool_config
        self.plan_source = plan_source
        self.metrics = metrics
        self.worker_names = [w.display_name for w in pool_config.workers]
        self.requests = RequestMapper(config, pool_config)
        self.tasks = InFlight()
        # host[:port] of every upstream, scrubbed from what clients are told (see .redaction)
        upstreams = [w.endpoint for w in pool_config.workers]
        upstreams.append(getattr(plan_source, "base_url", None))
        self.runner = WorkflowRunner(
            config,
            WorkerPool(pool_config),
            plan_source,
            metrics=metrics,
            tasks=self.tasks,
            trace_log=TraceLog(config.trace_sample_rate, self.tasks, rng, trace_logger),
            worker_names=self.worker_names,
            internal_hosts=internal_hosts(upstreams),
            quota=quota,
            tracer=tracer,
        )
        self.probe = Probe(config.readiness_timeout_s, probe_transport)
        self.readiness_checks = Readiness(config, plan_source, self.probe, metrics, self.tasks)
        self.worker_health = WorkerHealth(pool_config, self.worker_names, self.probe, metrics)

    # -- requests ---------------------------------------------------------------------------------

    @property
    def pool(self) -> WorkerPool:
        """The worker pool the workflows run on (replaceable, as tests do)."""
        return self.runner.pool

    @pool.setter
    def pool(self, pool: WorkerPool) -> None:
        self.runner.pool = pool

    @property
    def default_options(self) -> SolveOptions:
        """The server's solve options, before a request lowers them."""
        return self.requests.default_options

    def prepare(
        self, request: ChatCompletionRequest, request_id: str, caller: str | None = None
    ) -> SolveJob:
        """Validate ``request`` against this server and map it onto a solve job
        (:meth:`.request_mapping.RequestMapper.prepare`)."""
        return self.requests.prepare(request, request_id, caller)

    def solve_options_for(self, extra: ConductorOptions | None) -> tuple[SolveOptions, bool]:
        """The server's solve options lowered by a request's ``conductor`` options, and whether
        the trace is to be returned (:meth:`.request_mapping.RequestMapper.solve_options_for`)."""
        return self.requests.solve_options_for(extra)

    def redact(self, text: str) -> str:
        """``text`` fit for a client: no URL, no upstream host."""
        return self.runner.redact(text)

    async def run(
        self,
        job: SolveJob,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        client_gone: Awaitable[Any] | None = None,
        on_answer_delta: Callable[[str], None] | None = None,
    ) -> SolveTrace:
        """Solve ``job`` (:meth:`.workflow_run.WorkflowRunner.run`)."""
        return await self.runner.run(job, on_event, client_gone, on_answer_delta)

    async def chat_completion(
        self, job: SolveJob, client_gone: Awaitable[Any] | None = None
    ) -> ChatCompletionResponse:
        """Solve ``job`` and answer as one ``chat.completion``
        (:func:`.chat_completion.chat_completion`)."""
        return await chat_completion(self.runner, job, client_gone)

    def stream_chat_completion(
        self, job: SolveJob, received_at: float | None = None
    ) -> AsyncIterator[str]:
        """Solve ``job`` as server-sent ``chat.completion.chunk`` events
        (:func:`.chat_stream.stream_chat_completion`)."""
        return stream_chat_completion(self.runner, job, received_at)

    # -- readiness, health, shutdown --------------------------------------------------------------

    def start(self) -> None:
        """Start the background work of a running gateway (in its event loop): the worker
        health checks every ``config.worker_health_interval_s`` (:mod:`.worker_health`)."""
        self.worker_health.start(self.config.worker_health_interval_s)

    async def check_workers(self) -> dict[str, str]:
        """One health check of the pool's worker endpoints (:meth:`.WorkerHealth.check`)."""
        return await self.worker_health.check()

    async def readiness(self) -> tuple[bool, dict[str, str]]:
        """Whether this replica can serve, and why (:meth:`.readiness.Readiness.check`)."""
        return await self.readiness_checks.check()

    @property
    def draining(self) -> bool:
        """Whether shutdown has begun (readiness then answers ``draining``)."""
        return self.tasks.draining

    @draining.setter
    def draining(self, value: bool) -> None:
        self.tasks.draining = value

    @property
    def in_flight(self) -> int:
        """Workflows running now."""
        return self.tasks.running

    async def drain(self, timeout_s: float) -> int:
        """Let the workflows in flight finish for up to ``timeout_s``; cancel the rest. Returns
        how many were cancelled (:meth:`.drain.InFlight.drain`)."""
        return await self.tasks.drain(timeout_s)

    async def aclose(self, drain_timeout_s: float | None = None) -> None:
        """Drain (``config.drain_timeout_s`` by default), then close the pool and the plan
        source."""
        timeout = self.config.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        await self.worker_health.stop()
        try:
            await self.drain(timeout)
        finally:
            try:
                await self.pool.aclose()
                await self.plan_source.aclose()
            finally:
                await self.probe.aclose()
