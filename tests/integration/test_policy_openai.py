"""OpenAIPlanSource against a minimal OpenAI-compatible server on loopback (its settings,
checked without a server: tests/unit/test_policy_openai.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from conductor_core.errors import ConductorError, ConfigError
from conductor_core.policy.base import PlanRequest, PlanSource, PreviousRound, WorkerInfo
from conductor_core.policy.openai_policy import OpenAIPlanSource
from conductor_core.track.loopback import free_port
from conductor_core.workflow.errors import FormatErrorCode

PLAN = (
    'Two steps.\nmodel_id = [1, 0]\nsubtasks = ["Solve it.", "Check it."]\n'
    'access_list = [[], ["all"]]'
)


class FakeConductor:
    """A tiny OpenAI-compatible app: records requests, replies with ``reply`` or ``status``."""

    def __init__(self) -> None:
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.reply = PLAN
        self.status = 200
        self.models = ["conductor-tiny"]

    def app(self):
        app = FastAPI()

        @app.get("/v1/models")
        async def models() -> dict:
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "t"} for m in self.models
            ]
            return {"object": "list", "data": data}

        @app.post("/v1/chat/completions")
        async def chat(request: Request):
            body = await request.json()
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            if self.status != 200:
                return JSONResponse({"error": {"message": "boom"}}, status_code=self.status)
            return {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": self.reply},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 120, "completion_tokens": 30, "total_tokens": 150},
            }

        return app


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, FakeConductor]]:
    import uvicorn

    fake = FakeConductor()
    port = free_port()
    config = uvicorn.Config(fake.app(), host="127.0.0.1", port=port, log_level="warning")
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "fake server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", fake
    srv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def fake(server) -> FakeConductor:
    _, fake = server
    fake.requests.clear()
    fake.headers.clear()
    fake.reply, fake.status, fake.models = PLAN, 200, ["conductor-tiny"]
    return fake


def _request(**kw) -> PlanRequest:
    return PlanRequest(question="What is 6 * 7?", workers=(WorkerInfo(0), WorkerInfo(1)), **kw)


def _run(source: OpenAIPlanSource, request: PlanRequest):
    async def go():
        try:
            return await source.plan(request)
        finally:
            await source.aclose()

    return asyncio.run(go())


def test_plan_over_http(server, fake) -> None:
    url, _ = server
    source = OpenAIPlanSource(url, "conductor-tiny", temperature=0.7, max_tokens=256, seed=10)
    assert isinstance(source, PlanSource)
    result = _run(source, _request(sample_index=3))
    assert result.ok, result.error
    assert result.workflow.worker_ids() == [1, 0]
    assert (result.input_tokens, result.output_tokens) == (120, 30)
    assert result.latency_s > 0
    body = fake.requests[-1]
    assert body["model"] == "conductor-tiny"
    assert body["temperature"] == 0.7
    assert body["max_tokens"] == 256
    assert body["seed"] == 13
    assert body["messages"][-1]["role"] == "user"
    assert "What is 6 * 7?" in body["messages"][-1]["content"]


def test_format_error_is_returned_not_raised(server, fake) -> None:
    fake.reply = "I think the answer is 42."
    result = _run(OpenAIPlanSource(server[0], "conductor-tiny"), _request())
    assert not result.ok
    assert result.error.code == FormatErrorCode.MISSING_LIST
    assert result.raw == "I think the answer is 42."


def test_recursion_round_allows_keep_and_shows_previous(server, fake) -> None:
    fake.reply = "Keep it.\nmodel_id = []\nsubtasks = []\naccess_list = []"
    previous = PreviousRound(plan=PLAN, answer="the answer is 42")
    result = _run(OpenAIPlanSource(server[0], "conductor-tiny"), _request(previous=previous))
    assert result.ok, result.error
    assert result.workflow.is_keep
    sent = fake.requests[-1]["messages"]
    assert [m["role"] for m in sent] == ["user", "assistant", "user"]
    assert sent[1]["content"] == PLAN.strip()  # the previous plan as the Conductor's own turn
    assert "the answer is 42" in sent[-1]["content"]


def test_model_resolved_from_v1_models(server, fake) -> None:
    source = OpenAIPlanSource(server[0], None)
    result = _run(source, _request())
    assert result.ok
    assert source.model == "conductor-tiny"
    assert fake.requests[-1]["model"] == "conductor-tiny"


def test_several_served_models_need_an_explicit_model(server, fake) -> None:
    fake.models = ["a", "b"]
    with pytest.raises(ConfigError, match=r"serves 2 models \(a, b\); name one with --model"):
        _run(OpenAIPlanSource(server[0], None), _request())


def test_api_key_from_named_env_var(server, fake, monkeypatch) -> None:
    monkeypatch.setenv("TEST_CONDUCTOR_KEY", "sk-test-123")
    _run(OpenAIPlanSource(server[0], "m", api_key_env="TEST_CONDUCTOR_KEY"), _request())
    assert fake.headers[-1]["authorization"] == "Bearer sk-test-123"


def test_missing_api_key_env_is_a_config_error(server, monkeypatch) -> None:
    monkeypatch.delenv("TEST_CONDUCTOR_KEY", raising=False)
    with pytest.raises(ConfigError, match="TEST_CONDUCTOR_KEY is not set"):
        _run(OpenAIPlanSource(server[0], "m", api_key_env="TEST_CONDUCTOR_KEY"), _request())


def test_http_error_is_one_clear_error(server, fake) -> None:
    fake.status = 500
    source = OpenAIPlanSource(server[0], "m", max_retries=0)
    with pytest.raises(ConductorError, match="answered HTTP 500: boom"):
        _run(source, _request())


def test_unreachable_url_is_one_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    source = OpenAIPlanSource(url, "m", max_retries=0, timeout_s=5)
    with pytest.raises(ConductorError, match=rf"^cannot reach the Conductor at {url}/v1: "):
        _run(source, _request())
