"""The Conductor gateway over real HTTP on loopback, called with the official ``openai`` client.

Each app runs in uvicorn (lifespan on) in a background thread on a free port; the plan source is
the embedded scripted one (wrapped where a test needs Conductor tokens, a delay or a bad plan) and
the pool is the bundled simulated pool.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time

import httpx
import openai
import pytest

from conductor_core.policy.base import PlanRequest, PlanResult, parse_result
from conductor_core.policy.scripted import ScriptedPlanSource
from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.simulation.server import running_app
from conductor_core.solve import solve, solve_options
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool

pytest.importorskip("prometheus_client")

QUESTION = (
    "A train travels 240 kilometres in 3 hours. At the same speed, how many kilometres "
    "does it travel in 5 hours?"
)
MAX_BODY = 4096


class CountingSource:
    """The scripted plan source, reporting Conductor tokens as a served model would."""

    def __init__(self, delay_s: float = 0.0) -> None:
        self.inner = ScriptedPlanSource()
        self.delay_s = delay_s
        self.started = threading.Event()

    async def plan(self, request: PlanRequest) -> PlanResult:
        self.started.set()
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        result = await self.inner.plan(request)
        result.input_tokens = 50 + len(request.question) // 4
        result.output_tokens = len(result.raw) // 4
        return result

    async def aclose(self) -> None:
        await self.inner.aclose()


class UnparsableSource:
    """A Conductor whose output never parses."""

    async def plan(self, request: PlanRequest) -> PlanResult:
        return parse_result(request, "I would rather not write a plan.")

    async def aclose(self) -> None:
        return None


def base(url: str) -> str:
    return url.removesuffix("/v1")


@pytest.fixture(scope="module")
def pool():
    return load_pool(bundled_pool_path())


@pytest.fixture(scope="module")
def gateway(pool):
    """(base URL .../v1, app) of an open gateway on the bundled pool."""
    app = create_app(
        GatewayConfig(max_body_bytes=MAX_BODY), pool=pool, plan_source=CountingSource()
    )
    with running_app(app, lifespan="on") as url:
        yield url, app


@pytest.fixture
def client(gateway):
    url, _ = gateway
    with openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as c:
        yield c


def direct_solve(pool, question: str):
    """What solve() gives for ``question`` with the gateway's defaults (no HTTP)."""
    from conductor_core.workers.pool import WorkerPool

    async def run():
        source = CountingSource()
        async with WorkerPool(pool) as workers:
            return await solve(question, source, workers, options=solve_options(pool))

    return asyncio.run(run())


def metric(text: str, name: str, **labels: str) -> float:
    """A sample's value in a Prometheus text exposition (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        key, _, rest = sample.partition("{")
        got = ",".join(sorted(rest.rstrip("}").split(","))) if rest else ""
        if key == name and got == want:
            return float(value)
    return 0.0


# -- answers --------------------------------------------------------------------------------------


def test_answer_and_usage_equal_what_solve_gives(client, pool):
    trace = direct_solve(pool, QUESTION)
    response = client.chat.completions.create(
        model="conductor", messages=[{"role": "user", "content": QUESTION}]
    )
    assert trace.answer and "\\boxed{400}" in trace.answer
    assert response.choices[0].message.content == trace.answer
    assert response.choices[0].finish_reason == "stop"
    conductor_in = sum(r.conductor_input_tokens for r in trace.rounds)
    conductor_out = sum(r.conductor_output_tokens for r in trace.rounds)
    assert conductor_in > 0 and conductor_out > 0
    assert response.usage.prompt_tokens == trace.input_tokens + conductor_in
    assert response.usage.completion_tokens == trace.output_tokens + conductor_out
    assert response.usage.total_tokens == (
        response.usage.prompt_tokens + response.usage.completion_tokens
    )
    summary = response.model_extra["conductor"]
    assert summary["calls"] == trace.calls == 2
    assert summary["workers"] == [0, 1] and summary["rounds"] == 1
    assert summary["cost"] == pytest.approx(trace.cost) and summary["cost"] > 0
    assert "trace" not in summary


def test_models_health_and_readiness(client, gateway):
    url, _ = gateway
    assert [m.id for m in client.models.list().data] == ["conductor"]
    assert httpx.get(base(url) + "/healthz", timeout=5).json() == {"status": "ok"}
    ready = httpx.get(base(url) + "/readyz", timeout=5)
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    # local readiness: the gateway and its Conductor, not the workers
    assert ready.json()["checks"] == {"gateway": "ok", "conductor": "ok (CountingSource, local)"}
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}])
    assert info.value.body["code"] == "model_not_found"


def test_a_worker_endpoint_down_leaves_the_replica_ready_and_shows_in_metrics(pool):
    from conductor_core.workers.config import PoolConfig, WorkerConfig

    dead = WorkerConfig(provider="openai", model="m", endpoint="http://127.0.0.1:9/v1")
    config = PoolConfig(workers=[*pool.workers, dead])
    app = create_app(GatewayConfig(readiness_timeout_s=2.0), pool=config)
    with running_app(app, lifespan="on") as url:
        ready = httpx.get(base(url) + "/readyz", timeout=10)
        deadline = time.monotonic() + 10
        while True:  # the background health check's first pass
            text = httpx.get(base(url) + "/metrics", timeout=5).text
            if 'conductor_gateway_worker_up{worker="m"}' in text or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert ready.status_code == 200 and ready.json()["status"] == "ready"
    assert metric(text, "conductor_gateway_worker_up", worker="m") == 0
    assert 'conductor_gateway_worker_up{worker="m"} 0.0' in text
    assert metric(text, "conductor_gateway_worker_up", worker="sim-generalist") == 1


def test_streaming_yields_plan_and_step_events_and_the_answer_as_it_is_written(gateway, pool):
    url, _ = gateway
    expected = direct_solve(pool, QUESTION).answer

    async def run():
        async with openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0) as c:
            stream = await c.chat.completions.create(
                model="conductor",
                messages=[{"role": "user", "content": QUESTION}],
                stream=True,
                stream_options={"include_usage": True},
            )
            return [chunk async for chunk in stream]

    chunks = asyncio.run(run())
    order: list[str] = []
    content = ""
    for chunk in chunks:
        event = (chunk.model_extra or {}).get("conductor")
        if event:
            order.append(event["type"])
        for choice in chunk.choices:
            if choice.delta.content:
                order.append("content")
                content += choice.delta.content
    assert content == expected
    assert order[:3] == ["plan_start", "plan", "step_start"]
    # the answer streams in pieces while the last step runs, between its start and its end
    assert order.count("step_end") == 2 and order.count("content") > 1
    last_start = max(i for i, t in enumerate(order) if t == "step_start")
    last_end = max(i for i, t in enumerate(order) if t == "step_end")
    assert last_start < order.index("content") < last_end
    assert order[-1] == "done"
    plan = next(c.model_extra["conductor"] for c in chunks if _event(c) == "plan")
    assert plan["data"]["workers"] == [0, 1] and plan["data"]["plan"]["model_id"] == [0, 1]
    step_end = next(c.model_extra["conductor"] for c in chunks if _event(c) == "step_end")
    assert step_end["data"]["response"] and step_end["data"]["worker_name"] == "sim-math-expert"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens > 0
    assert all(c.id == chunks[0].id for c in chunks)


def _event(chunk) -> str | None:
    return ((chunk.model_extra or {}).get("conductor") or {}).get("type")


def test_worker_subset_is_honoured(client):
    response = client.chat.completions.create(
        model="conductor",
        messages=[{"role": "user", "content": QUESTION}],
        extra_body={"conductor": {"workers": [2, "sim-generalist"], "return_trace": True}},
    )
    summary = response.model_extra["conductor"]
    trace = summary["trace"]
    used = {s["worker"] for r in trace["rounds"] for s in r["workflow"]["steps"]}
    assert used and used <= {2, 3}
    assert set(summary["workers"]) <= {2, 3}
    assert response.choices[0].message.content == trace["answer"]


def test_conversation_turns_become_context(client):
    response = client.chat.completions.create(
        model="conductor",
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "We are talking about trains."},
            {"role": "assistant", "content": "Noted."},
            {"role": "user", "content": [{"type": "text", "text": QUESTION}]},
        ],
        extra_body={"conductor": {"return_trace": True}},
    )
    question = response.model_extra["conductor"]["trace"]["question"]
    assert "Be brief." in question and "We are talking about trains." in question
    assert question.rstrip().endswith(QUESTION)
    assert response.choices[0].message.content


def test_invalid_conductor_options_are_400_naming_the_field(client):
    cases = {
        "conductor.workers.0": {"workers": [9]},
        "conductor.workers.1": {"workers": [0, "no-such-worker"]},
        "conductor.max_round": {"max_round": 2},
        "conductor.max_rounds": {"max_rounds": 50},
        "conductor.budget.max_cost": {"budget": {"max_cost": -1}},
    }
    for param, options in cases.items():
        with pytest.raises(openai.BadRequestError) as info:
            client.chat.completions.create(
                model="conductor",
                messages=[{"role": "user", "content": QUESTION}],
                extra_body={"conductor": options},
            )
        error = info.value.body
        assert error["param"] == param, (options, error)
        assert param in error["message"] and error["type"] == "invalid_request_error"


def test_malformed_requests_get_openai_errors(gateway, client):
    url, _ = gateway
    bad_json = httpx.post(
        url + "/chat/completions",
        content=b'{"model": "conductor", "messages": [',
        headers={"content-type": "application/json"},
        timeout=5,
    )
    assert bad_json.status_code == 400
    assert bad_json.json()["error"]["code"] == "invalid_json"
    missing = httpx.post(url + "/chat/completions", json={"model": "conductor"}, timeout=5)
    assert missing.status_code == 400
    assert set(missing.json()["error"]) == {"message", "type", "param", "code"}
    assert missing.json()["error"]["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model="conductor", messages=[])
    assert info.value.body["param"] == "messages"
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="conductor", messages=[{"role": "assistant", "content": "hi"}]
        )
    assert info.value.body["param"] == "messages.0.role"
    nested = httpx.post(url + "/chat/completions", content=b"[" * 3000, timeout=5)
    assert nested.status_code in (400, 413) and "error" in nested.json()
    unknown = httpx.get(base(url) + "/v2/nothing", timeout=5)
    assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "not_found_error"


def test_oversize_body_is_413(gateway, client):
    url, _ = gateway
    big = "x" * (MAX_BODY * 2)
    with pytest.raises(openai.APIStatusError) as info:
        client.chat.completions.create(
            model="conductor", messages=[{"role": "user", "content": big}]
        )
    assert info.value.status_code == 413
    assert info.value.body["code"] == "request_too_large"

    def chunked():  # no Content-Length: the limit holds while reading
        for _ in range(4):
            yield b" " * MAX_BODY

    response = httpx.post(url + "/chat/completions", content=chunked(), timeout=5)
    assert response.status_code == 413


def test_request_id_is_echoed(gateway):
    url, _ = gateway
    given = httpx.get(base(url) + "/healthz", headers={"X-Request-ID": "abc-123"}, timeout=5)
    assert given.headers["x-request-id"] == "abc-123"
    hostile = httpx.get(base(url) + "/healthz", headers={"X-Request-ID": "a b\x7f<>"}, timeout=5)
    assert re.fullmatch(r"[0-9a-f]{32}", hostile.headers["x-request-id"])


def test_metrics_count_requests_workflows_and_workers(gateway, client):
    url, _ = gateway
    before = httpx.get(base(url) + "/metrics", timeout=5).text
    client.chat.completions.create(
        model="conductor", messages=[{"role": "user", "content": QUESTION}]
    )
    after = httpx.get(base(url) + "/metrics", timeout=5)
    assert after.headers["content-type"].startswith("text/plain")
    text = after.text

    def delta(name: str, **labels: str) -> float:
        return metric(text, name, **labels) - metric(before, name, **labels)

    ok = {"route": "/v1/chat/completions", "method": "POST", "status": "200"}
    assert delta("conductor_gateway_requests_total", **ok) == 1
    assert delta("conductor_gateway_request_duration_seconds_count", route=ok["route"]) == 1
    assert delta("conductor_gateway_workflows_total", outcome="answered") == 1
    assert delta("conductor_gateway_rounds_per_request_count") == 1
    assert delta("conductor_gateway_steps_per_request_sum") == 2
    assert delta("conductor_gateway_worker_calls_total", worker="sim-math-expert") == 1
    assert delta("conductor_gateway_worker_calls_total", worker="sim-knowledge-expert") == 1
    assert delta("conductor_gateway_cost_dollars_total") > 0
    assert delta("conductor_gateway_tokens_total", source="conductor", kind="prompt") > 0
    assert metric(text, "conductor_gateway_workflows_in_flight") == 0


# -- security and limits --------------------------------------------------------------------------


def test_api_keys_are_required_and_never_logged(tmp_path, pool, monkeypatch, caplog):
    keys_file = tmp_path / "keys"
    keys_file.write_text("# gateway keys\nsk-file-key-0123456789\n\n")
    monkeypatch.setenv("CONDUCTOR_API_KEYS", "sk-env-key-9876543210")
    config = GatewayConfig(api_keys_file=str(keys_file))
    caplog.set_level(logging.INFO, logger="conductor.gateway")
    with running_app(create_app(config, pool=pool), lifespan="on") as url:
        for key in ("sk-file-key-0123456789", "sk-env-key-9876543210"):
            with openai.OpenAI(base_url=url, api_key=key, max_retries=0) as c:
                assert c.models.list().data[0].id == "conductor"
        wrong = openai.OpenAI(base_url=url, api_key="sk-file-key-012345678", max_retries=0)
        with wrong, pytest.raises(openai.AuthenticationError) as info:
            wrong.chat.completions.create(
                model="conductor", messages=[{"role": "user", "content": QUESTION}]
            )
        assert info.value.body["type"] == "authentication_error"
        missing = httpx.post(url + "/chat/completions", json={}, timeout=5)
        assert missing.status_code == 401 and "Bearer" in missing.json()["error"]["message"]
        # probes and metrics stay open
        assert httpx.get(base(url) + "/healthz", timeout=5).status_code == 200
        assert httpx.get(base(url) + "/metrics", timeout=5).status_code == 200
    access = [r for r in caplog.records if r.name == "conductor.gateway.access"]
    assert {r.status for r in access} >= {200, 401}
    assert any(str(r.key_id).startswith("key-") for r in access)
    for record in caplog.records:
        dumped = json.dumps(record.__dict__, default=str)
        assert "sk-file-key" not in dumped and "sk-env-key" not in dumped


def test_missing_keys_file_refuses_to_start(tmp_path, pool):
    from conductor_core.errors import ConfigError

    with pytest.raises(ConfigError, match="api_keys_file"):
        create_app(GatewayConfig(api_keys_file=str(tmp_path / "absent")), pool=pool)


def test_rate_limit_is_429_per_key(pool, monkeypatch):
    monkeypatch.setenv("CONDUCTOR_API_KEYS", "sk-one-aaaaaaaa,sk-two-bbbbbbbb")
    config = GatewayConfig(rate_limit_per_minute=1, rate_limit_burst=2)
    with running_app(create_app(config, pool=pool), lifespan="on") as url:
        with openai.OpenAI(base_url=url, api_key="sk-one-aaaaaaaa", max_retries=0) as one:
            one.models.list()
            one.models.list()
            with pytest.raises(openai.RateLimitError) as info:
                one.models.list()
        assert int(info.value.response.headers["retry-after"]) >= 1
        assert info.value.body["type"] == "rate_limit_error"
        with openai.OpenAI(base_url=url, api_key="sk-two-bbbbbbbb", max_retries=0) as two:
            assert two.models.list().data  # another key has its own bucket


def test_slow_workflow_times_out_with_504(pool):
    config = GatewayConfig(request_timeout_s=0.3)
    app = create_app(config, pool=pool, plan_source=CountingSource(delay_s=5))
    with running_app(app, lifespan="on") as url:
        with openai.OpenAI(base_url=url, api_key="x", max_retries=0) as c:
            start = time.monotonic()
            with pytest.raises(openai.APIStatusError) as info:
                c.chat.completions.create(
                    model="conductor", messages=[{"role": "user", "content": QUESTION}]
                )
            assert time.monotonic() - start < 3
        metrics = httpx.get(base(url) + "/metrics", timeout=5).text
    assert info.value.status_code == 504 and info.value.body["code"] == "request_timeout"
    assert metric(metrics, "conductor_gateway_workflows_total", outcome="timeout") == 1


def test_unparsable_plan_is_502_and_a_stream_error(pool):
    app = create_app(GatewayConfig(), pool=pool, plan_source=UnparsableSource())
    messages = [{"role": "user", "content": QUESTION}]
    events = []
    with (
        running_app(app, lifespan="on") as url,
        openai.OpenAI(base_url=url, api_key="x", max_retries=0) as c,
    ):
        with pytest.raises(openai.APIStatusError) as info:
            c.chat.completions.create(model="conductor", messages=messages)
        assert info.value.status_code == 502
        assert info.value.body["code"] == "plan_format_error"
        with pytest.raises(openai.APIError, match="could not be parsed"):
            for chunk in c.chat.completions.create(
                model="conductor", messages=messages, stream=True
            ):
                events.append(_event(chunk))
    assert "plan" in events  # the rejected plan was streamed before the error


def test_shutdown_drains_in_flight_workflows(pool):
    source = CountingSource(delay_s=1.0)
    app = create_app(GatewayConfig(), pool=pool, plan_source=source)
    results: list[object] = []

    def call(url: str) -> None:
        with openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=20) as c:
            try:
                results.append(
                    c.chat.completions.create(
                        model="conductor", messages=[{"role": "user", "content": QUESTION}]
                    )
                )
            except Exception as exc:  # recorded for the assertion below
                results.append(exc)

    with running_app(app, lifespan="on", graceful_shutdown_s=10) as url:
        worker = threading.Thread(target=call, args=(url,))
        worker.start()
        assert source.started.wait(10)
    # the server stopped only after answering the request in flight
    worker.join(timeout=20)
    assert len(results) == 1 and not isinstance(results[0], Exception), results
    assert results[0].choices[0].message.content
    assert app.state.serving.in_flight == 0 and app.state.serving.draining


# -- the command ----------------------------------------------------------------------------------


def test_conductor_serve_command_runs_and_stops_cleanly(tmp_path):
    from conductor_core.track.loopback import free_port

    port = free_port()
    env = {**os.environ, "CONDUCTOR_API_KEYS": "sk-cli-key-1234567890"}
    env.pop("CONDUCTOR_API_KEYS_FILE", None)
    log = tmp_path / "serve.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "conductor_core", "serve", "--port", str(port), "--rounds", "2"],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env=env,
        )
        try:
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    if httpx.get(url + "/readyz", timeout=1).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                assert proc.poll() is None, log.read_text()
                time.sleep(0.2)
            with openai.OpenAI(
                base_url=url + "/v1", api_key="sk-cli-key-1234567890", max_retries=0
            ) as c:
                response = c.chat.completions.create(
                    model="conductor",
                    messages=[{"role": "user", "content": QUESTION}],
                    extra_body={"conductor": {"return_trace": True}},
                )
            assert "\\boxed{400}" in response.choices[0].message.content
            assert len(response.model_extra["conductor"]["trace"]["rounds"]) == 2  # --rounds 2
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    # uvicorn re-raises the captured SIGTERM once it has shut down gracefully
    assert code in (0, -signal.SIGTERM), log.read_text()
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    assert any(e["message"] == "gateway stopped" for e in lines)  # the lifespan's drain ran
    access = [e for e in lines if e["logger"] == "conductor.gateway.access"]
    assert any(e["route"] == "/v1/chat/completions" and e["status"] == 200 for e in access)
    assert all(e["request_id"] for e in access)
    assert "sk-cli-key" not in log.read_text()
