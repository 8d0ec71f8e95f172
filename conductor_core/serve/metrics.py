"""Prometheus metrics of the gateway, on a registry of its own (one per app).

Metric names (all prefixed ``conductor_gateway_``):

* ``requests_total{route,method,status}``, ``request_duration_seconds{route}`` (histogram; for a
  stream, until its last byte);
* ``workflows_total{outcome}`` (answered, format_error, infra_error, plan_failure, no_answer,
  timeout, error, rejected: the Conductor's server refused the request, client_disconnected: the
  client went away and the workflow was cancelled), ``workflows_in_flight``;
* ``rounds_per_request`` and ``steps_per_request`` (histograms of the workflows that ran);
* ``worker_calls_total{worker}``, ``worker_errors_total{worker,kind}``,
  ``worker_retries_total{worker}`` (from each request's trace; ``worker`` is the display name);
* ``tokens_total{source,kind}`` (source conductor|workers, kind prompt|completion) and
  ``cost_dollars_total`` (worker calls);
* ``conductor_up`` (the Conductor answered the last readiness check: 1, else 0) and
  ``worker_up{worker}`` (the worker's endpoint answered its last background health check: 1,
  else 0; local and simulated workers 1; hosted APIs of other providers absent);
* ``read_timeouts_total{phase}`` (headers|body: connections closed because a request did not
  arrive in time);
* ``worker_latency_seconds{worker}`` (histogram: each worker call that reached the worker, from
  its start to its reply or final failure, queueing and retries included; response-cache hits
  and calls refused by an open circuit left out);
* ``time_to_first_token_seconds`` (histogram: a streamed response's time from the request's
  arrival to its first answer text);
* ``build_info{version,model,model_version}`` (always 1): the gateway's package version, the
  served model's id (``/v1/models``) and version (``$CONDUCTOR_MODEL_VERSION``, ``unknown``
  when not given).

The labelled children that every request touches are looked up once and kept
(:meth:`GatewayMetrics.child`): ``labels()`` validates and locks on each call, which cost more
than the counting itself. Label values come from bounded sets (routes, methods, statuses, pool
workers, outcomes), so the cache holds no more series than the registry does.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from conductor_core import __version__
from conductor_core.errors import require
from conductor_core.workers.types import ErrorKind
from conductor_core.workflow.trace import SolveTrace

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)

UNKNOWN_VERSION = "unknown"
"""The ``model_version`` label of ``build_info`` when the served model's version is not given."""


class GatewayMetrics:
    """The gateway's counters and histograms (``prometheus_client`` is imported here, lazily)."""

    def __init__(self) -> None:
        pc = require("prometheus_client", extra="serve", purpose="the gateway's /metrics")
        self._pc = pc
        self.registry = pc.CollectorRegistry(auto_describe=True)
        reg = {"registry": self.registry}
        p = "conductor_gateway_"
        self.requests = pc.Counter(
            p + "requests",
            "HTTP requests by route, method and status.",
            ["route", "method", "status"],
            **reg,
        )
        self.latency = pc.Histogram(
            p + "request_duration_seconds",
            "HTTP request latency in seconds.",
            ["route"],
            buckets=_LATENCY_BUCKETS,
            **reg,
        )
        self.workflows = pc.Counter(p + "workflows", "Workflows by outcome.", ["outcome"], **reg)
        self.in_flight = pc.Gauge(p + "workflows_in_flight", "Workflows running now.", **reg)
        self.rounds = pc.Histogram(
            p + "rounds_per_request",
            "Conductor rounds per workflow.",
            buckets=(1, 2, 3, 4, 5, 8),
            **reg,
        )
        self.steps = pc.Histogram(
            p + "steps_per_request",
            "Executed worker steps per workflow.",
            buckets=(0, 1, 2, 3, 4, 5, 8, 12, 20, 40),
            **reg,
        )
        self.worker_calls = pc.Counter(
            p + "worker_calls", "Worker calls (executed steps) by worker.", ["worker"], **reg
        )
        self.worker_errors = pc.Counter(
            p + "worker_errors",
            "Failed worker calls by worker and error kind.",
            ["worker", "kind"],
            **reg,
        )
        self.worker_retries = pc.Counter(
            p + "worker_retries", "Retries of worker calls by worker.", ["worker"], **reg
        )
        self.tokens = pc.Counter(
            p + "tokens",
            "Tokens by source (conductor|workers) and kind (prompt|completion).",
            ["source", "kind"],
            **reg,
        )
        self.cost = pc.Counter(p + "cost_dollars", "Dollars spent on worker calls.", **reg)
        self.conductor_up = pc.Gauge(
            p + "conductor_up",
            "1 when the Conductor answered the last readiness check, else 0.",
            **reg,
        )
        self.worker_up = pc.Gauge(
            p + "worker_up",
            "1 when the worker's endpoint answered its last health check, else 0.",
            ["worker"],
            **reg,
        )
        self.read_timeouts = pc.Counter(
            p + "read_timeouts",
            "Connections closed because a request's headers or body did not arrive in time.",
            ["phase"],
            **reg,
        )
        self.worker_latency = pc.Histogram(
            p + "worker_latency_seconds",
            "Latency of worker calls in seconds by worker (queueing and retries included; "
            "response-cache hits and open-circuit refusals left out).",
            ["worker"],
            buckets=_LATENCY_BUCKETS,
            **reg,
        )
        self.first_token = pc.Histogram(
            p + "time_to_first_token_seconds",
            "Seconds from a streamed request's arrival to the first answer text sent.",
            buckets=_LATENCY_BUCKETS,
            **reg,
        )
        self.build_info = pc.Gauge(
            p + "build_info",
            "Always 1: the gateway's version and the served model's id and version.",
            ["version", "model", "model_version"],
            **reg,
        )
        self._children: dict[tuple[Any, ...], Any] = {}

    def set_build_info(self, model: str, model_version: str | None = None) -> None:
        """Publish ``build_info``: this package's version, the served ``model`` and its
        ``model_version`` (None: ``unknown``)."""
        self.build_info.clear()
        self.build_info.labels(
            version=__version__, model=model, model_version=model_version or UNKNOWN_VERSION
        ).set(1)

    def first_token_timer(self, start: float | None = None) -> Callable[[], None]:
        """A clock for one streamed response, started at ``start`` (``time.perf_counter()``;
        None: now): calling it observes the time to first token (the first call; later calls
        do nothing)."""
        start = time.perf_counter() if start is None else start
        observe = self.first_token.observe
        pending = True

        def first_token() -> None:
            nonlocal pending
            if pending:
                pending = False
                observe(time.perf_counter() - start)

        return first_token

    def child(self, metric: Any, *values: str) -> Any:
        """``metric.labels(*values)``, looked up once per label values and kept."""
        key = (id(metric), *values)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*values)
        return found

    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        """Count one HTTP request and its latency."""
        self.child(self.requests, route, method, str(status)).inc()
        self.child(self.latency, route).observe(seconds)

    def observe_workflow(self, trace: SolveTrace, worker_names: list[str], outcome: str) -> None:
        """Count one finished workflow from its trace (``worker_names[i]`` = pool worker i)."""
        child = self.child
        child(self.workflows, outcome).inc()
        self.rounds.observe(len(trace.rounds))
        steps = 0
        for rnd in trace.rounds:
            child(self.tokens, "conductor", "prompt").inc(rnd.conductor_input_tokens)
            child(self.tokens, "conductor", "completion").inc(rnd.conductor_output_tokens)
            if rnd.workflow is None:
                continue
            for step in rnd.workflow.steps:
                if step.skipped is not None:
                    continue
                steps += 1
                name = _name(worker_names, step.worker)
                child(self.worker_calls, name).inc()
                if not step.cached and step.error_kind != ErrorKind.CIRCUIT_OPEN:
                    child(self.worker_latency, name).observe(step.latency_s)
                if step.retries:
                    child(self.worker_retries, name).inc(step.retries)
                if step.error is not None:
                    child(self.worker_errors, name, step.error_kind or "unknown").inc()
        self.steps.observe(steps)
        child(self.tokens, "workers", "prompt").inc(trace.input_tokens)
        child(self.tokens, "workers", "completion").inc(trace.output_tokens)
        self.cost.inc(max(0.0, trace.cost))

    def observe_failure(self, outcome: str) -> None:
        """Count a workflow that ended without a trace (timeout, error)."""
        self.child(self.workflows, outcome).inc()

    def render(self) -> tuple[bytes, str]:
        """The Prometheus text exposition and its content type."""
        return self._pc.generate_latest(self.registry), self._pc.CONTENT_TYPE_LATEST

    def value(self, name: str, labels: dict[str, Any] | None = None) -> float | None:
        """The current value of a sample (for tests and debugging)."""
        return self.registry.get_sample_value(name, labels or {})


def _name(names: list[str], worker: int) -> str:
    return names[worker] if 0 <= worker < len(names) else str(worker)
