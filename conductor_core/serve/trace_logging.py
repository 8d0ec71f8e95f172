"""Sampled trace logging: a share of the gateway's workflows (``config.trace_sample_rate``) sent
to MLflow in the background, never failing or delaying a request."""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from typing import Any

from conductor_core.serve.drain import InFlight
from conductor_core.serve.request_mapping import SolveJob
from conductor_core.track.traces import log_solve_trace
from conductor_core.workflow.trace import SolveTrace

__all__ = ["TraceLog"]

logger = logging.getLogger("conductor.gateway")


class TraceLog:
    """Logs a sample of the workflows' traces.

    Args:
        rate: the share of workflows logged (0: none).
        tasks: where the uploads run as background tasks (a drain waits for them).
        rng: decides which workflows are logged.
        log: logs one trace (default: :func:`conductor_core.track.traces.log_solve_trace`).
    """

    def __init__(
        self,
        rate: float,
        tasks: InFlight,
        rng: random.Random | None = None,
        log: Callable[..., Any] | None = None,
    ) -> None:
        self.rate = rate
        self.tasks = tasks
        self.rng = rng or random.Random()
        self.log = log

    def maybe_log(self, job: SolveJob, trace: SolveTrace) -> None:
        """Start logging ``trace`` in the background when the sample picks it."""
        if self.rate <= 0 or self.rng.random() >= self.rate:
            return
        log = self.log or log_solve_trace

        async def send() -> None:
            try:
                await asyncio.to_thread(
                    log,
                    trace,
                    name=f"gateway {job.request_id}",
                    attributes={"request_id": job.request_id, "model": job.model},
                )
            except Exception as exc:  # tracing must never fail a request
                logger.warning(
                    "could not log the trace to MLflow: %s",
                    type(exc).__name__,
                    extra={"request_id": job.request_id},
                )

        self.tasks.spawn(send())
