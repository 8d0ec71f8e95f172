"""The workers' health, a metric rather than a readiness condition: a background check of the
pool's OpenAI-compatible worker endpoints every ``config.worker_health_interval_s``, reported as
``worker_up{worker}`` (a worker down fails only the requests that use it). Local workers
(simulated, transformers) are up by construction; hosted APIs of other providers are not
checked."""

from __future__ import annotations

import asyncio
import logging

from conductor_core.policy.openai_policy import normalize_base_url
from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.serve.probe import Probe
from conductor_core.workers.config import PoolConfig

__all__ = ["WorkerHealth"]

logger = logging.getLogger("conductor.gateway")


class WorkerHealth:
    """The health checks of one pool's workers.

    Args:
        pool_config: the pool.
        worker_names: the workers' display names (the metric's label), in pool order.
        probe: how an endpoint is checked.
        metrics: where ``worker_up`` is set.
    """

    def __init__(
        self,
        pool_config: PoolConfig,
        worker_names: list[str],
        probe: Probe,
        metrics: GatewayMetrics,
    ) -> None:
        self.probe = probe
        self.metrics = metrics
        # the endpoints asked (``/models`` URL -> (key variable, the workers behind it)), and
        # the local workers
        self.targets: dict[str, tuple[str | None, list[str]]] = {}
        self.local: list[str] = []
        for w, name in zip(pool_config.workers, worker_names, strict=True):
            if w.provider == "openai" and w.endpoint:
                url = normalize_base_url(w.endpoint) + "/models"
                self.targets.setdefault(url, (w.api_key_env, []))[1].append(name)
            elif w.provider in ("simulated", "transformers"):
                self.local.append(name)
        self.task: asyncio.Task[None] | None = None

    def start(self, interval_s: float | None) -> None:
        """Report the local workers up, and check the others every ``interval_s`` seconds in
        the background (None: never) until :meth:`stop`. Call it in the gateway's event loop."""
        for name in self.local:
            self.metrics.worker_up.labels(worker=name).set(1)
        if interval_s is not None and self.targets and self.task is None:
            self.task = asyncio.create_task(self._loop(interval_s), name="worker health checks")

    async def _loop(self, interval_s: float) -> None:
        while True:
            try:
                await self.check()
            except Exception as exc:  # a failed pass must not end the checks
                logger.warning("worker health check failed: %s", type(exc).__name__)
            await asyncio.sleep(interval_s)

    async def check(self) -> dict[str, str]:
        """One health check of the worker endpoints (each distinct endpoint asked ``/models``
        once, with its key); sets ``worker_up{worker}``. Returns worker name -> result (``ok``,
        ``HTTP 503``, ``unreachable (ConnectError)``, ...)."""
        if not self.targets:
            return {}
        results = await asyncio.gather(
            *(self.probe.check(url, env) for url, (env, _) in self.targets.items())
        )
        out: dict[str, str] = {}
        for (_, names), result in zip(self.targets.values(), results, strict=True):
            for name in names:
                out[name] = result
                self.metrics.worker_up.labels(worker=name).set(1 if result == "ok" else 0)
        return out

    async def stop(self) -> None:
        """Stop the background checks."""
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
            self.task = None
