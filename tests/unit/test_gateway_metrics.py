"""The gateway's metrics (:mod:`conductor_core.serve.metrics`): the labelled series a request
touches are looked up once and kept, and still count what they counted."""

from __future__ import annotations

from typing import Any

import pytest

from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.workflow.trace import SolveTrace

pytest.importorskip("prometheus_client")


def test_request_series_are_looked_up_once_and_count_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    m = GatewayMetrics()
    m.observe_request("/v1/chat/completions", "POST", 200, 0.02)
    looked_up: list[Any] = []
    for metric in (m.requests, m.latency):
        original = metric.labels

        def counting(*args: Any, _original: Any = original, **kwargs: Any) -> Any:
            looked_up.append(args or kwargs)
            return _original(*args, **kwargs)

        monkeypatch.setattr(metric, "labels", counting)
    for _ in range(3):
        m.observe_request("/v1/chat/completions", "POST", 200, 0.02)
    assert looked_up == []  # the kept series, not labels() again
    m.observe_request("/v1/chat/completions", "POST", 429, 0.001)
    assert len(looked_up) == 1  # a new status is a new series: looked up once
    labels = {"route": "/v1/chat/completions", "method": "POST", "status": "200"}
    assert m.value("conductor_gateway_requests_total", labels) == 4
    assert m.value("conductor_gateway_requests_total", {**labels, "status": "429"}) == 1
    route = {"route": "/v1/chat/completions"}
    assert m.value("conductor_gateway_request_duration_seconds_count", route) == 5
    assert m.child(m.requests, "/v1/chat/completions", "POST", "200") is m.requests.labels(
        "/v1/chat/completions", "POST", "200"
    )


def test_workflow_counts_through_the_kept_series() -> None:
    m = GatewayMetrics()
    trace = SolveTrace.model_validate(
        {
            "question": "q",
            "answer": "a",
            "input_tokens": 7,
            "output_tokens": 2,
            "cost": 0.5,
            "rounds": [],
        }
    )
    for _ in range(2):
        m.observe_workflow(trace, ["w0"], "answered")
    m.observe_failure("timeout")
    assert m.value("conductor_gateway_workflows_total", {"outcome": "answered"}) == 2
    assert m.value("conductor_gateway_workflows_total", {"outcome": "timeout"}) == 1
    tokens = {"source": "workers", "kind": "prompt"}
    assert m.value("conductor_gateway_tokens_total", tokens) == 14
    assert m.value("conductor_gateway_cost_dollars_total") == 1.0


def test_worker_latency_counts_calls_that_reached_the_worker() -> None:
    m = GatewayMetrics()
    step = {"subtask": "s", "latency_s": 0.3}
    trace = SolveTrace.model_validate(
        {
            "question": "q",
            "answer": "a",
            "rounds": [
                {
                    "round": 0,
                    "workflow": {
                        "plan": {},
                        "steps": [
                            {**step, "index": 0, "worker": 0},
                            {**step, "index": 1, "worker": 1, "latency_s": 2.0},
                            {**step, "index": 2, "worker": 1, "cached": True},
                            {**step, "index": 3, "worker": 0, "error_kind": "circuit_open"},
                            {**step, "index": 4, "worker": 0, "skipped": "dependency:3"},
                        ],
                    },
                }
            ],
        }
    )
    m.observe_workflow(trace, ["w0", "w1"], "answered")
    name = "conductor_gateway_worker_latency_seconds"
    assert m.value(name + "_count", {"worker": "w0"}) == 1
    assert m.value(name + "_sum", {"worker": "w0"}) == pytest.approx(0.3)
    assert m.value(name + "_count", {"worker": "w1"}) == 1  # the cache hit is left out
    assert m.value(name + "_bucket", {"worker": "w1", "le": "1.0"}) == 0
    assert m.value(name + "_bucket", {"worker": "w1", "le": "2.5"}) == 1


def test_time_to_first_token_is_observed_once_per_stream() -> None:
    import time

    m = GatewayMetrics()
    name = "conductor_gateway_time_to_first_token_seconds"
    first_token = m.first_token_timer(time.perf_counter() - 0.5)  # arrived half a second ago
    first_token()
    first_token()
    assert m.value(name + "_count") == 1
    assert 0.5 <= m.value(name + "_sum") < 5
    m.first_token_timer()()
    assert m.value(name + "_count") == 2


def test_build_info_names_the_version_and_the_served_model() -> None:
    from conductor_core import __version__

    m = GatewayMetrics()
    m.set_build_info("conductor")
    labels = {"version": __version__, "model": "conductor", "model_version": "unknown"}
    assert m.value("conductor_gateway_build_info", labels) == 1
    m.set_build_info("conductor", "7")
    assert m.value("conductor_gateway_build_info", labels) is None  # one series at a time
    assert m.value("conductor_gateway_build_info", {**labels, "model_version": "7"}) == 1


def test_every_served_route_is_counted_under_its_own_name() -> None:
    from conductor_core.serve.middleware import _ROUTES
    from conductor_core.serve.routes import router

    assert {route.path for route in router.routes} == _ROUTES
