"""Running one solve job: :func:`conductor_core.solve.solve` on the gateway's pool and plan source
within ``config.request_timeout_s``, cancelled when its client goes, counted in the metrics,
charged to the caller's spend quota and sampled for trace logging."""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from conductor_core import telemetry
from conductor_core.errors import ConductorError
from conductor_core.policy.base import PlanSource
from conductor_core.serve.auth import SpendQuota
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.drain import InFlight
from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.serve.outcomes import outcome_of
from conductor_core.serve.protocol import RequestError
from conductor_core.serve.redaction import redact_urls
from conductor_core.serve.request_mapping import SolveJob
from conductor_core.serve.trace_logging import TraceLog
from conductor_core.serve.upstream_errors import plan_source_error
from conductor_core.solve import solve
from conductor_core.workers.pool import WorkerPool
from conductor_core.workflow.executor import ANSWER_FORMAT
from conductor_core.workflow.trace import SolveTrace

__all__ = ["WorkflowRunner"]

logger = logging.getLogger("conductor.gateway")


class _ClientGone(Exception):
    """The client disconnected before its workflow finished."""


async def _cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has stopped, so nothing of it runs afterwards."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


class WorkflowRunner:
    """Runs the solve jobs of one gateway.

    Args:
        config: ``request_timeout_s``.
        pool: the worker pool (replaceable: tests swap in one with fake providers).
        plan_source: where plans come from.
        metrics: where workflows are counted.
        tasks: where the running workflows are tracked (the drain waits for them).
        trace_log: which traces go to MLflow.
        worker_names: the workers' display names, in pool order.
        internal_hosts: the upstreams' ``host[:port]``, scrubbed from what clients are told.
        quota: charged with the cost of each workflow that ends, to its job's caller (None:
            no spend quota).
        tracer: the OpenTelemetry tracer of the workflows' spans (None: no spans); each
            workflow's calls carry its request id either way (:mod:`conductor_core.telemetry`).
    """

    def __init__(
        self,
        config: GatewayConfig,
        pool: WorkerPool,
        plan_source: PlanSource,
        *,
        metrics: GatewayMetrics,
        tasks: InFlight,
        trace_log: TraceLog,
        worker_names: list[str],
        internal_hosts: tuple[str, ...] = (),
        quota: SpendQuota | None = None,
        tracer: Any = None,
    ) -> None:
        self.config = config
        self.pool = pool
        self.plan_source = plan_source
        self.metrics = metrics
        self.tasks = tasks
        self.trace_log = trace_log
        self.worker_names = worker_names
        self.internal_hosts = internal_hosts
        self.quota = quota
        self.tracer = tracer

    def redact(self, text: str) -> str:
        """``text`` fit for a client: no URL, no upstream host (:func:`.redaction.redact_urls`)."""
        return redact_urls(text, self.internal_hosts)

    async def run(
        self,
        job: SolveJob,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        client_gone: Awaitable[Any] | None = None,
        on_answer_delta: Callable[[str], None] | None = None,
    ) -> SolveTrace:
        """Solve ``job`` within ``config.request_timeout_s``; counts it in the metrics.

        ``on_answer_delta`` gets the answer in pieces as the last step's worker writes it
        (:func:`~conductor_core.solve.solve`).

        ``client_gone`` completes when the client disconnects: the workflow is then cancelled
        (and awaited, so none of its worker calls starts afterwards) and counted as
        ``client_disconnected``. Cancelling the caller cancels the workflow too.

        Raises:
            RequestError: 504 on timeout; 400 when the Conductor's server refused the request
                itself (HTTP 400/413/422, e.g. a prompt longer than its context: a retry cannot
                fix it); 502 when the plan source fails otherwise (unreachable Conductor); 499
                ``client_disconnected`` when ``client_gone`` completed first (nobody reads that
                answer; it names the outcome in the access log). The messages name no upstream
                URL.
        """
        context = contextvars.copy_context()  # the workflow's: its answer's format, its calls'
        context.run(ANSWER_FORMAT.set, job.output_format)
        context.run(telemetry.bind, job.request_id, self.tracer)
        task = asyncio.create_task(
            solve(
                job.question,
                self.plan_source,
                self.pool,
                options=job.options,
                sample_index=job.sample_index,
                on_event=on_event,
                on_answer_delta=on_answer_delta,
            ),
            name=f"solve {job.request_id}",
            context=context,
        )
        self.tasks.track(task)
        self.metrics.in_flight.inc()
        watcher = asyncio.ensure_future(client_gone) if client_gone is not None else None
        try:
            async with asyncio.timeout(self.config.request_timeout_s):
                if watcher is not None:
                    await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
                    if not task.done():
                        raise _ClientGone
                trace = await task  # cancelling this await cancels the workflow too
        except _ClientGone:
            await _cancelled(task)
            self.metrics.observe_failure("client_disconnected")
            logger.info(
                "the client disconnected: workflow cancelled", extra={"request_id": job.request_id}
            )
            raise RequestError(
                499,
                "the client closed the connection before the answer; the workflow was cancelled",
                code="client_disconnected",
            ) from None
        except TimeoutError:
            self.metrics.observe_failure("timeout")
            raise RequestError(
                504,
                f"the workflow did not finish within {self.config.request_timeout_s:g}s",
                "timeout",
                code="request_timeout",
            ) from None
        except ConductorError as exc:
            logger.warning("plan source failed: %s", exc, extra={"request_id": job.request_id})
            error, outcome = plan_source_error(exc, job.request_id, self.redact)
            self.metrics.observe_failure(outcome)
            raise error from None
        finally:
            if watcher is not None:
                if watcher.done() and not watcher.cancelled():
                    watcher.exception()  # a failed receive() counts as gone; not worth a warning
                watcher.cancel()
            if not task.done():  # timed out while watching, or the caller was cancelled
                await _cancelled(task)
            self.metrics.in_flight.dec()
        self.metrics.observe_workflow(trace, self.worker_names, outcome_of(trace))
        if self.quota is not None and job.caller is not None:
            self.quota.charge(job.caller, trace.cost)
        self.trace_log.maybe_log(job, trace)
        return trace
