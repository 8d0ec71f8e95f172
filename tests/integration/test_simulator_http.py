"""The worker simulator over real HTTP: the official openai client and the WorkerPool retries."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import yaml
from click.testing import CliRunner

from conductor_core.simulation.answers import is_right_text
from conductor_core.simulation.problem_bank import ProblemBank
from conductor_core.simulation.server import create_app, running_app
from conductor_core.tasks.problem import Problem, write_jsonl
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import (
    PoolConfig,
    RetryConfig,
    WorkerConfig,
    load_pool,
)

RETRY_AFTER_S = 0.2
HANG_S = 3.0


@pytest.fixture(scope="module")
def bank() -> ProblemBank:
    return ProblemBank.bundled()


@pytest.fixture(scope="module")
def simulator():
    """(base URL, app state) of a simulator serving the bundled pool on a free loopback port."""
    app = create_app(load_pool(bundled_pool_path()), hang_s=HANG_S, retry_after_s=RETRY_AFTER_S)
    with running_app(app) as url:
        health = httpx.get(url.removesuffix("/v1") + "/health", timeout=5)
        assert health.status_code == 200
        yield url, app.state.simulator


@pytest.fixture
def scripted(simulator):
    """Set the failure script of the shared server for one test; restored afterwards."""
    url, state = simulator

    def set_script(*outcomes: str) -> None:
        state.set_script(list(outcomes))

    yield url, state, set_script
    state.set_script(None)


def openai_pool(url: str, *, timeout_s: float = 5.0, max_retries: int = 3) -> PoolConfig:
    worker = WorkerConfig(
        provider="openai",
        model="sim-math-expert",
        endpoint=url,
        timeout_s=timeout_s,
        max_retries=max_retries,
    )
    return PoolConfig(workers=[worker], retry=RetryConfig(backoff_base_s=0.01, backoff_max_s=0.05))


def math_messages(bank: ProblemBank) -> list[dict[str, str]]:
    problem = next(p for p in bank if p.id == "demo-math-001")
    return [{"role": "user", "content": problem.question}]


async def pool_call(config: PoolConfig, messages, delays: list[float]):
    from conductor_core.workers.pool import WorkerPool

    async def recording_sleep(seconds: float) -> None:
        delays.append(seconds)
        await asyncio.sleep(seconds)

    async with WorkerPool(config, sleep=recording_sleep) as pool:
        return await pool.call(0, messages)


# -- plain HTTP and the official client -----------------------------------------------------------


def test_health_and_models(simulator):
    url, _ = simulator
    health = httpx.get(url.removesuffix("/v1") + "/health", timeout=5).json()
    assert health["status"] == "ok" and health["problems"] == 60
    models = httpx.get(url + "/models", timeout=5).json()
    assert models["object"] == "list"
    assert [m["id"] for m in models["data"]] == [
        "sim-math-expert",
        "sim-knowledge-expert",
        "sim-code-expert",
        "sim-generalist",
    ]


def test_official_openai_client_gets_completions(simulator, bank):
    import openai

    url, _ = simulator
    problem = next(p for p in bank if p.id == "demo-math-002")

    async def run():
        client = openai.AsyncOpenAI(base_url=url, api_key="EMPTY", max_retries=0)
        try:
            one = await client.chat.completions.create(
                model="sim-math-expert",
                messages=[{"role": "user", "content": problem.question}],
            )
            many = await client.chat.completions.create(
                model="sim-math-expert",
                messages=[{"role": "user", "content": problem.question}],
                n=60,
            )
            listed = await client.models.list()
            with pytest.raises(openai.NotFoundError):
                await client.chat.completions.create(
                    model="no-such-model", messages=[{"role": "user", "content": "hi"}]
                )
            return one, many, listed
        finally:
            await client.close()

    one, many, listed = asyncio.run(run())
    assert one.choices[0].message.content and "\\boxed{" in one.choices[0].message.content
    assert one.usage.prompt_tokens == len(problem.question) // 4
    assert one.usage.total_tokens == one.usage.prompt_tokens + one.usage.completion_tokens
    assert len(many.choices) == 60 and [c.index for c in many.choices] == list(range(60))
    assert many.choices[0].message.content == one.choices[0].message.content  # deterministic
    accuracy = sum(is_right_text(problem, c.message.content) for c in many.choices) / 60
    assert accuracy > 0.75  # skill 0.9
    assert {m.id for m in listed.data} >= {"sim-math-expert", "sim-generalist"}


def test_rate_limit_response_shape(scripted):
    url, _, set_script = scripted
    set_script("429")
    body = {"model": "sim-generalist", "messages": [{"role": "user", "content": "hi"}]}
    response = httpx.post(url + "/chat/completions", json=body, timeout=5)
    assert response.status_code == 429
    assert float(response.headers["retry-after"]) == RETRY_AFTER_S
    assert response.json()["error"]["type"] == "rate_limit_error"
    ok = httpx.post(url + "/chat/completions", json=body, timeout=5)
    assert ok.status_code == 200 and ok.json()["object"] == "chat.completion"


def test_bad_requests_get_openai_style_errors(simulator):
    url, _ = simulator
    bad = httpx.post(url + "/chat/completions", json={"model": "sim-generalist"}, timeout=5)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"
    body = {"model": "sim-generalist", "messages": [{"role": "user", "content": "x"}], "n": 0}
    assert httpx.post(url + "/chat/completions", json=body, timeout=5).status_code == 400


# -- the WorkerPool with provider 'openai' against the simulator ----------------------------------


def test_pool_retries_429_and_500_then_succeeds(scripted, bank):
    pytest.importorskip("conductor_core.workers.pool")
    url, state, set_script = scripted
    set_script("429", "500")
    before = state.requests
    delays: list[float] = []
    result = asyncio.run(pool_call(openai_pool(url), math_messages(bank), delays))
    assert result.ok, result.error
    assert result.retries == 2
    assert state.requests - before == 3
    assert delays[0] >= RETRY_AFTER_S  # Retry-After honoured
    assert delays[1] < RETRY_AFTER_S  # plain backoff after the 500
    assert "\\boxed{" in (result.text or "")


def test_pool_hang_hits_timeout_and_retries(scripted, bank):
    pytest.importorskip("conductor_core.workers.pool")
    url, _, set_script = scripted
    set_script("hang")
    delays: list[float] = []
    start = time.monotonic()
    config = openai_pool(url, timeout_s=0.3)
    result = asyncio.run(pool_call(config, math_messages(bank), delays))
    elapsed = time.monotonic() - start
    assert result.ok, result.error
    assert result.retries == 1
    assert elapsed < HANG_S  # the client gave up; it did not wait for the hang


def test_pool_all_failures_become_recorded_error(scripted, bank):
    pytest.importorskip("conductor_core.workers.pool")
    url, _, set_script = scripted
    set_script("500", "500", "500")
    delays: list[float] = []
    config = openai_pool(url, max_retries=2)
    result = asyncio.run(pool_call(config, math_messages(bank), delays))
    assert not result.ok
    assert result.error_kind == "server_error"
    assert result.retries == 2
    assert result.text is None


def test_pool_retries_malformed_reply(scripted, bank):
    pytest.importorskip("conductor_core.workers.pool")
    url, state, set_script = scripted
    set_script("malformed")
    delays: list[float] = []
    result = asyncio.run(pool_call(openai_pool(url), math_messages(bank), delays))
    assert result.ok, result.error
    assert result.retries == 1
    assert state.outcomes["malformed"] >= 1


def test_malformed_reply_is_reported_as_malformed(scripted, bank):
    pytest.importorskip("conductor_core.workers.pool")
    url, _, set_script = scripted
    set_script("malformed")
    delays: list[float] = []
    config = openai_pool(url, max_retries=0)
    result = asyncio.run(pool_call(config, math_messages(bank), delays))
    assert result.error_kind == "malformed_response", result.error


def test_workers_know_the_problems_of_their_config(tmp_path):
    problem = Problem(
        id="f1", source="t", domain="freeform", question="Capital of France?", reference="Paris"
    )
    path = tmp_path / "known.jsonl"
    write_jsonl([problem], path)
    pool = load_pool(bundled_pool_path()).with_simulation_problems([path], replace=True)
    with running_app(create_app(pool)) as url:
        health = httpx.get(url.removesuffix("/v1") + "/health", timeout=5).json()
        assert health["problems"] == 1
        body = {
            "model": "sim-knowledge-expert",
            "messages": [{"role": "user", "content": problem.question}],
            "n": 8,
        }
        reply = httpx.post(url + "/chat/completions", json=body, timeout=5).json()
    # free-form skill 0.85; a wrong answer has no other known reference to borrow
    texts = [c["message"]["content"] for c in reply["choices"]]
    assert any(is_right_text(problem, t) for t in texts)
    assert all(is_right_text(problem, t) or "Paris" not in t for t in texts)


# -- CLI ------------------------------------------------------------------------------------------


def test_cli_serve_problems_replace_the_pools(tmp_path, monkeypatch):
    from conductor_core.cli.simulate import command
    from conductor_core.simulation import server as simulator

    path = tmp_path / "known.jsonl"
    write_jsonl(list(ProblemBank.bundled())[:3], path)
    served = []
    monkeypatch.setattr(simulator, "serve", lambda pool, **kw: served.append((pool, kw)))
    result = CliRunner().invoke(command, ["serve", "--problems", str(path), "--port", "8111"])
    assert result.exit_code == 0, result.output
    assert "(3 known problems)" in result.output
    pool, kwargs = served[0]
    assert kwargs["port"] == 8111
    assert all(w.simulation.problems == [str(path.resolve())] for w in pool.workers)
    result = CliRunner().invoke(command, ["serve", "--port", "8111"])
    assert "(60 known problems)" in result.output
    assert all(w.simulation.problems == ["bundled"] for w in served[1][0].workers)


def test_cli_pool_for_endpoint_writes_usable_pool(simulator, bank, tmp_path):
    pytest.importorskip("conductor_core.workers.pool")
    from conductor_core.cli.simulate import command

    url, _ = simulator
    out = tmp_path / "pool.yaml"
    base = url.removesuffix("/v1")
    result = CliRunner().invoke(command, ["pool-for-endpoint", "--url", base, "--out", str(out)])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(out.read_text())
    assert data["workers"][0]["model"] == "sim-math-expert"
    assert all(w["provider"] == "openai" and w["endpoint"] == url for w in data["workers"])
    pool = load_pool(out)
    assert pool.workers[0].name == "sim-math-expert"
    assert pool.workers[3].price.output_per_mtok == 0.8
    delays: list[float] = []
    call = asyncio.run(pool_call(pool, math_messages(bank), delays))
    assert call.ok and call.cost > 0


def test_cli_pool_for_endpoint_unreachable_is_one_clear_error(tmp_path):
    from conductor_core.cli import main

    with pytest.raises(SystemExit) as info:
        main(
            [
                "simulate",
                "pool-for-endpoint",
                "--url",
                "http://127.0.0.1:9",
                "--out",
                str(tmp_path / "p.yaml"),
            ]
        )
    assert info.value.code == 2
    assert not (tmp_path / "p.yaml").exists()
