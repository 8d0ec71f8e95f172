"""Readiness of one replica, from local facts: it is not draining (shutdown has begun, or the
drain file of the chart's preStop hook exists) and the Conductor answered within a cached window.
The workers are not asked: their health is a metric (:mod:`.worker_health`)."""

from __future__ import annotations

import asyncio
import os
import time

from conductor_core.policy.base import PlanSource
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.drain import InFlight
from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.serve.probe import Probe

__all__ = ["Readiness"]


class Readiness:
    """Whether this replica can serve.

    Args:
        config: ``drain_file`` and ``readiness_cache_s``.
        plan_source: the Conductor (checked when it has a ``base_url``: a remote server).
        probe: how the Conductor is checked.
        metrics: where ``conductor_up`` is set.
        tasks: the gateway's tasks: draining when they drain; the shared Conductor check is
            kept among their background tasks.
    """

    def __init__(
        self,
        config: GatewayConfig,
        plan_source: PlanSource,
        probe: Probe,
        metrics: GatewayMetrics,
        tasks: InFlight,
    ) -> None:
        self.config = config
        self.plan_source = plan_source
        self.probe = probe
        self.metrics = metrics
        self.tasks = tasks
        # a drain file older than this process is a leftover of an earlier container
        self.started_at = time.time()
        self._cached: tuple[float, str] | None = None  # (monotonic time, result)
        self._check: asyncio.Task[str] | None = None

    def is_draining(self) -> bool:
        """Whether this replica is going away: shutdown has begun, or ``config.drain_file``
        exists and is newer than the process (the chart's preStop hook)."""
        if self.tasks.draining:
            return True
        path = self.config.drain_file
        if path is None:
            return False
        try:
            return os.stat(path).st_mtime >= self.started_at
        except OSError:
            return False

    async def conductor_status(self) -> str:
        """Whether the Conductor answers: ``ok`` (or ``ok (..., local)`` for a plan source
        in this process) or why not.

        The Conductor's endpoint is asked ``/models`` with its key at most once per
        ``config.readiness_cache_s``; callers within that window get the cached result, and
        concurrent callers share one check. Sets the metric ``conductor_up``.
        """
        base = getattr(self.plan_source, "base_url", None)
        if not isinstance(base, str):
            return f"ok ({type(self.plan_source).__name__}, local)"
        cached = self._cached
        if cached is not None and time.monotonic() - cached[0] < self.config.readiness_cache_s:
            return cached[1]
        if self._check is None:
            key_env = getattr(self.plan_source, "api_key_env", None)
            self._check = self.tasks.spawn(
                self._check_conductor(base.rstrip("/") + "/models", key_env)
            )
        # shielded: a probe that gives up (its client timed out) does not cancel the shared check
        return await asyncio.shield(self._check)

    async def _check_conductor(self, url: str, key_env: str | None) -> str:
        try:
            result = await self.probe.check(url, key_env)
            self._cached = (time.monotonic(), result)
            self.metrics.conductor_up.set(1 if result == "ok" else 0)
            return result
        finally:
            self._check = None

    async def check(self) -> tuple[bool, dict[str, str]]:
        """Whether this replica can serve: it is not draining (:meth:`is_draining`) and the
        Conductor answered within the cached window (:meth:`conductor_status`). That it has
        started is the caller's business (this object exists once the app's lifespan started).
        Returns (ready, check name -> result)."""
        if self.is_draining():
            return False, {"gateway": "draining"}
        checks = {"gateway": "ok", "conductor": await self.conductor_status()}
        return all(v.startswith("ok") for v in checks.values()), checks
