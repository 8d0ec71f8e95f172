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
