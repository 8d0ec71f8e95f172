"""The gateway's lifespan: at startup the plan source and the
:class:`~conductor_core.serve.serving.ConductorServing` (``app.state.serving``); at shutdown the
drain, then the pool, the plan source and the tracer closed."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from conductor_core.policy.base import PlanSource
from conductor_core.policy.factory import load_plan_source
from conductor_core.serve.auth import SpendQuota
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.serve.serving import ConductorServing
from conductor_core.serve.tracing import GatewayTracing
from conductor_core.workers.config import PoolConfig

__all__ = ["GatewayLifespan"]

logger = logging.getLogger("conductor.gateway")


class GatewayLifespan:
    """The lifespan of one gateway app (``FastAPI(lifespan=...)``).

    Args:
        config: the gateway settings.
        pool: the worker pool.
        plan_source: the plan source (None: the embedded ``scripted`` one, loaded at startup);
            closed at shutdown.
        metrics: where the serving object counts.
        quota: the spend quota charged with each workflow's cost (None: none).
        tracing: the gateway's OpenTelemetry tracing (None: off).
        serving_kwargs: extra keyword arguments of :class:`ConductorServing` (``rng``,
            ``trace_logger``, ``probe_transport``).
        open_gateway: whether no API key is configured (then a warning is logged at startup).
    """

    def __init__(
        self,
        config: GatewayConfig,
        pool: PoolConfig,
        plan_source: PlanSource | None,
        *,
        metrics: GatewayMetrics,
        quota: SpendQuota | None,
        tracing: GatewayTracing | None,
        serving_kwargs: dict[str, Any] | None,
        open_gateway: bool,
    ) -> None:
        self.config = config
        self.pool = pool
        self.plan_source = plan_source
        self.metrics = metrics
        self.quota = quota
        self.tracing = tracing
        self.serving_kwargs = dict(serving_kwargs or {})
        self.open_gateway = open_gateway

    @contextlib.asynccontextmanager
    async def __call__(self, app: Any) -> AsyncIterator[None]:
        config = self.config
        if self.open_gateway:
            logger.warning(
                "no API keys configured (api_keys_file, $CONDUCTOR_API_KEYS_FILE, $%s): the "
                "gateway is OPEN to anyone who can reach it",
                config.api_keys_env,
            )
        source = self.plan_source
        if source is None:
            source = load_plan_source("scripted")
        serving = ConductorServing(
            config,
            self.pool,
            source,
            metrics=self.metrics,
            quota=self.quota,
            tracer=self.tracing.tracer if self.tracing is not None else None,
            **self.serving_kwargs,
        )
        app.state.serving = serving
        serving.start()
        logger.info(
            "gateway ready: model %s, %d workers, plan source %s",
            config.model_name,
            len(self.pool.workers),
            type(source).__name__,
        )
        try:
            yield
        finally:
            await serving.aclose()
            if self.tracing is not None:
                await self.tracing.aclose()  # the last spans exported
            logger.info("gateway stopped")
