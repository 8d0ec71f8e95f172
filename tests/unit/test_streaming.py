"""The answer streamed as it is written, in process: simulated workers stream in pieces over
their latency, the pool passes the pieces on and never retries an attempt that already sent
some, the OpenAI-compatible provider reads a streamed reply (mocked HTTP), the HTTP simulator
streams (ASGI, no socket), the executor and ``solve()`` stream only the last step of the last
round, and the gateway forwards the pieces as ``delta.content`` chunks while the last step runs,
cut to ``max_tokens``, and ends a stream broken after its first piece with an error, never by
sending text again. (Over real HTTP with timestamps: tests/integration/test_gateway_streaming.py.)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
from typing import Any

import httpx
import pytest

from conductor_core.policy.base import PlanRequest, PlanResult
from conductor_core.policy.fixed import one_step
from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.protocol import ChatCompletionChunk
from conductor_core.serve.serving import AnswerStream, cut_to_tokens, final_answer
from conductor_core.simulation.provider import STREAM_CHUNKS, SimulatedProvider, stream_pieces
from conductor_core.simulation.server import create_app as create_simulator
from conductor_core.solve import SolveOptions, solve
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool, parse_pool
from conductor_core.workers.pool import WorkerPool
from conductor_core.workers.providers.openai_compat import OpenAIProvider
from conductor_core.workers.types import Completion, ErrorKind, ProviderError, Usage
from conductor_core.workflow.executor import execute
from conductor_core.workflow.model import Step, Workflow

pytest.importorskip("prometheus_client")

QUESTION = "Calculate: (56 + 26) * 25 = ?"
MSG = [{"role": "user", "content": QUESTION}]


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def bundled():
    return load_pool(bundled_pool_path())


# -- simulated workers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["", " ", "one", "a b c", "  lead and trail  \n", "x " * 100, "def f():\n    return 1"]
)
def test_stream_pieces_join_to_the_text_in_whole_words(text):
    pieces = stream_pieces(text)
    assert "".join(pieces) == text
    assert len(pieces) <= STREAM_CHUNKS
    assert all(p.strip() for p in pieces[: len(pieces) - 1])  # no piece of whitespace alone
    if len(text.split()) >= STREAM_CHUNKS:
        assert len(pieces) == STREAM_CHUNKS


def test_a_simulated_worker_streams_its_answer_over_its_latency(bundled):
    config = bundled.workers[0].model_copy(deep=True)
    config.simulation.latency_ms = 200
    config.simulation.latency_jitter_ms = 0
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    provider = SimulatedProvider(config, sleep=sleep)
    plain = run(provider.complete(MSG, sample_index=3))
    pieces: list[str] = []
    slept.clear()
    streamed = run(provider.complete_stream(MSG, sample_index=3, on_delta=pieces.append))
    assert streamed == plain  # same answer and usage as unstreamed
    assert len(pieces) > 1 and "".join(pieces) == plain.text
    # spread evenly, each wait up to the piece's time from the start (this sleep takes none)
    assert len(slept) == len(pieces) and slept == sorted(slept)
    assert slept[0] == pytest.approx(0.2 / len(pieces), abs=0.01)
    assert slept[-1] == pytest.approx(0.2, abs=0.01)


# -- the pool -------------------------------------------------------------------------------------


class Streaming:
    """A provider that streams the scripted replies: a list of pieces, then an optional error
    (raised after those pieces), one script entry per attempt."""

    def __init__(self, *attempts: tuple[list[str], ProviderError | None]) -> None:
        self.attempts = list(attempts)
        self.calls = 0
        self.plain_calls = 0

    async def complete(self, messages, *, sample_index: int = 0) -> Completion:
        self.plain_calls += 1
        return Completion(text="unstreamed reply", usage=Usage(input_tokens=3, output_tokens=2))

    async def complete_stream(self, messages, *, sample_index=0, on_delta) -> Completion:
        pieces, error = self.attempts[min(self.calls, len(self.attempts) - 1)]
        self.calls += 1
        for piece in pieces:
            await asyncio.sleep(0)
            on_delta(piece)
        if error is not None:
            raise error
        return Completion(text="".join(pieces), usage=Usage(input_tokens=5, output_tokens=7))

    async def aclose(self) -> None:
        return None


def pool_of(*providers: Any, **over: Any) -> WorkerPool:
    worker = {"provider": "simulated", "model": "fake", "max_retries": 3, "timeout_s": 5}
    config = parse_pool(
        {
            "workers": [dict(worker, model=f"fake-{i}") for i in range(len(providers))],
            "retry": {"backoff_base_s": 0.0, "backoff_max_s": 0.0},
            **over,
        }
    )
    return WorkerPool(config, providers=list(providers), rng=random.Random(0))


def server_error() -> ProviderError:
    return ProviderError("HTTP 500: boom", kind=ErrorKind.SERVER, retryable=True, status=500)


def test_the_pool_passes_a_streamed_reply_on_piece_by_piece():
    provider = Streaming((["The ", "answer ", "is 42."], None))
    pieces: list[str] = []
    result = run(pool_of(provider).call(0, MSG, on_delta=pieces.append))
    assert result.ok and result.text == "The answer is 42."
    assert pieces == ["The ", "answer ", "is 42."] and result.usage.output_tokens == 7
    assert provider.plain_calls == 0
    # a call that does not stream is not streamed
    assert run(pool_of(provider).call(0, MSG)).text == "unstreamed reply"


def test_a_failure_before_the_first_piece_is_retried_as_usual():
    provider = Streaming(([], server_error()), (["fine ", "now"], None))
    pieces: list[str] = []
    result = run(pool_of(provider).call(0, MSG, on_delta=pieces.append))
    assert result.ok and result.retries == 1 and provider.calls == 2
    assert "".join(pieces) == result.text == "fine now"


def test_an_attempt_that_fails_after_a_piece_is_not_retried():
    provider = Streaming((["half of ", "an "], server_error()), (["another reply"], None))
    pieces: list[str] = []
    result = run(pool_of(provider).call(0, MSG, on_delta=pieces.append))
    assert provider.calls == 1 and result.retries == 0  # a retry would send other text
    assert not result.ok and result.error_kind == ErrorKind.SERVER
    assert "after 11 characters of the reply were streamed; not retried" in result.error
    assert pieces == ["half of ", "an "]  # nothing sent twice


def test_a_provider_that_cannot_stream_and_a_cache_hit_pass_the_whole_reply_once(tmp_path):
    class Plain:
        async def complete(self, messages, *, sample_index=0):
            return Completion(text="whole reply", usage=Usage(input_tokens=1, output_tokens=2))

        async def aclose(self):
            return None

    cache = {"cache": {"enabled": True, "path": str(tmp_path / "cache.sqlite")}}
    pool = pool_of(Plain(), **cache)
    for cached in (False, True):
        pieces: list[str] = []
        result = run(pool.call(0, MSG, on_delta=pieces.append))
        assert result.cached is cached and pieces == ["whole reply"]
    run(pool.aclose())


# -- executor and solve ---------------------------------------------------------------------------


class RecordingPool:
    """A pool of simulated workers that records which calls were streamed."""

    def __init__(self, bundled) -> None:
        self.inner = WorkerPool(bundled)
        self.streamed: list[bool] = []

    def __len__(self) -> int:
        return len(self.inner)

    def worker(self, worker_id: int):
        return self.inner.worker(worker_id)

    async def call(self, worker_id, messages, **kwargs):
        self.streamed.append(kwargs.get("on_delta") is not None)
        return await self.inner.call(worker_id, messages, **kwargs)


def three_steps() -> Workflow:
    return Workflow(
        steps=(
            Step(worker=0, subtask="solve it", access=()),
            Step(worker=3, subtask="solve it too", access=()),
            Step(worker=1, subtask="check both", access=(0, 1)),
        )
    )


def test_the_executor_streams_the_last_step_only(bundled):
    pool = RecordingPool(bundled)
    pieces: list[str] = []
    trace = run(execute(three_steps(), QUESTION, pool, on_answer_delta=pieces.append))
    assert sorted(pool.streamed) == [False, False, True] and pool.streamed[-1]
    assert "".join(pieces) == trace.answer and len(pieces) > 1
    plain = run(execute(three_steps(), QUESTION, RecordingPool(bundled)))
    assert plain.answer == trace.answer


class EveryRound:
    """A Conductor that writes a new two-step plan in every round (never keeps)."""

    async def plan(self, request: PlanRequest) -> PlanResult:
        wf = Workflow(
            steps=(
                Step(worker=0, subtask="solve", access=()),
                Step(worker=1, subtask="check", access=(0,)),
            )
        )
        return PlanResult(raw=wf.render(), workflow=wf)

    async def aclose(self) -> None:
        return None


def test_solve_streams_only_the_last_rounds_answer(bundled):
    pool = RecordingPool(bundled)
    pieces: list[str] = []
    trace = run(
        solve(
            QUESTION,
            EveryRound(),
            pool,
            options=SolveOptions(max_rounds=2),
            on_answer_delta=pieces.append,
        )
    )
    assert len(trace.rounds) == 2
    assert pool.streamed == [False, False, False, True]  # round 2's last step only
    assert "".join(pieces) == trace.answer


# -- the OpenAI-compatible provider ---------------------------------------------------------------


def sse(*chunks: dict[str, Any] | str) -> httpx.Response:
    lines = [f"data: {c if isinstance(c, str) else json.dumps(c)}\n\n" for c in chunks]
    return httpx.Response(
        200, content="".join(lines).encode(), headers={"content-type": "text/event-stream"}
    )


def chunk(content: str | None = None, finish: str | None = None, usage=None) -> dict[str, Any]:
    delta = {} if content is None else {"content": content}
    choices = [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body = {"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return {**body, "choices": choices, "usage": usage}


def openai_provider(handler) -> OpenAIProvider:
    config = parse_pool(
        {"workers": [{"provider": "openai", "model": "m", "endpoint": "http://upstream.test/v1"}]}
    ).workers[0]
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return OpenAIProvider(config, http_client=client)


def stream_with(provider: OpenAIProvider) -> tuple[Completion | ProviderError, list[str]]:
    pieces: list[str] = []

    async def go():
        try:
            return await provider.complete_stream(MSG, on_delta=pieces.append)
        except ProviderError as exc:
            return exc
        finally:
            await provider.aclose()

    return run(go()), pieces


def test_the_openai_provider_streams_with_usage_from_the_last_chunk():
    requests: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        requests.append(json.loads(request.content))
        usage = {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15}
        return sse(
            chunk(""), chunk("Forty"), chunk("-two"), chunk(finish="stop"), chunk(usage=usage)
        )

    result, pieces = stream_with(openai_provider(handler))
    assert isinstance(result, Completion) and result.text == "Forty-two"
    assert pieces == ["Forty", "-two"]
    assert result.usage == Usage(input_tokens=12, output_tokens=3)
    assert requests[0]["stream"] is True
    assert requests[0]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("response", "kind", "sent"),
    [
        (sse(chunk("half"), chunk(" of it")), ErrorKind.MALFORMED, ["half", " of it"]),  # cut
        (sse(chunk("x"), "{not json"), ErrorKind.MALFORMED, ["x"]),
        (sse(chunk(finish="stop")), ErrorKind.MALFORMED, []),  # no content
        (httpx.Response(503, json={"error": {"message": "busy"}}), ErrorKind.SERVER, []),
        (httpx.Response(401, json={"error": {"message": "no"}}), ErrorKind.AUTH, []),
    ],
)
def test_a_broken_stream_is_a_provider_error(response, kind, sent):
    result, pieces = stream_with(openai_provider(lambda request: response))
    assert isinstance(result, ProviderError) and result.kind == kind, result
    assert pieces == sent


# -- the HTTP simulator ---------------------------------------------------------------------------


def simulator_provider(bundled, **app_kwargs) -> tuple[OpenAIProvider, Any]:
    app = create_simulator(bundled, **app_kwargs)
    model = bundled.workers[0].model
    config = parse_pool(
        {"workers": [{"provider": "openai", "model": model, "endpoint": "http://sim.test/v1"}]}
    ).workers[0]
    client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app))
    return OpenAIProvider(config, http_client=client), app


def test_the_simulator_streams_the_answer_it_would_send_whole(bundled):
    provider, _ = simulator_provider(bundled)
    plain = run(provider.complete(MSG))
    provider, _ = simulator_provider(bundled)
    result, pieces = stream_with(provider)
    assert isinstance(result, Completion) and result.text == plain.text
    assert len(pieces) > 1 and "".join(pieces) == plain.text
    assert result.usage == plain.usage  # include_usage: the same counts as unstreamed


def test_a_cut_simulated_stream_sends_half_and_no_end(bundled):
    provider, app = simulator_provider(bundled, failure_script=["cut"])
    plain = SimulatedProvider(bundled.workers[0]).answer_now(MSG)
    result, pieces = stream_with(provider)
    assert isinstance(result, ProviderError) and result.kind == ErrorKind.MALFORMED
    assert pieces and plain.text.startswith("".join(pieces)) and "".join(pieces) != plain.text
    assert app.state.simulator.outcomes["cut"] == 1


# -- the gateway ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def gateway(pool_config, source=None, providers=None):
    """A started gateway app; ``providers`` replace the pool's (with the same config)."""
    app = create_app(GatewayConfig(), pool=pool_config, plan_source=source)
    async with app.router.lifespan_context(app):
        serving = app.state.serving
        if providers is not None:
            serving.pool = WorkerPool(pool_config, providers=providers, rng=random.Random(0))
        yield app


async def post(app, **fields: Any) -> httpx.Response:
    body = {"model": "conductor", "messages": [{"role": "user", "content": QUESTION}], **fields}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as client:
        return await client.post("/v1/chat/completions", json=body)


def events(response: httpx.Response) -> list[dict[str, Any] | str]:
    """The stream's ``data:`` payloads in order (``[DONE]`` as a string)."""
    assert response.status_code == 200, response.text
    out: list[dict[str, Any] | str] = []
    for line in response.text.splitlines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def kinds(stream: list[dict[str, Any] | str]) -> list[str]:
    """Each chunk as ``content``, its workflow event's type, ``error``, ``usage`` or ``[DONE]``."""
    out = []
    for item in stream:
        if isinstance(item, str):
            out.append(item)
        elif "error" in item:
            out.append("error")
        elif item.get("conductor"):
            out.append(item["conductor"]["type"])
        elif item["choices"] and item["choices"][0]["delta"].get("content"):
            out.append("content")
        elif not item["choices"]:
            out.append("usage")
        else:
            out.append("role")
    return out


def content(stream: list[dict[str, Any] | str]) -> str:
    return "".join(
        c["choices"][0]["delta"].get("content") or ""
        for c in stream
        if isinstance(c, dict) and c.get("choices")
    )


def test_the_gateway_streams_the_answer_while_the_last_step_runs(bundled):
    async def go():
        async with gateway(bundled) as app:
            plain = await post(app, seed=7)
            streamed = await post(app, seed=7, stream=True, stream_options={"include_usage": True})
            return plain, streamed

    plain, streamed = run(go())
    answer = plain.json()["choices"][0]["message"]["content"]
    stream = events(streamed)
    order = kinds(stream)
    assert content(stream) == answer  # the same answer as unstreamed, for the same seed
    assert order.count("content") > 1  # in pieces, not one chunk after the workflow
    last_step_end = max(i for i, k in enumerate(order) if k == "step_end")
    last_step_start = max(i for i, k in enumerate(order) if k == "step_start")
    assert last_step_start < order.index("content") < last_step_end  # while it runs
    assert order[-3:] == ["done", "usage", "[DONE]"]
    usage = stream[-2]["usage"]
    assert usage == plain.json()["usage"] and stream[-2]["choices"] == []
    # include_usage: every other chunk says "usage": null, as OpenAI's do
    assert all(c["usage"] is None for c in stream[:-2] if isinstance(c, dict))
    without = run(_streamed(bundled))
    assert all("usage" not in c for c in without if isinstance(c, dict))


async def _streamed(bundled) -> list[dict[str, Any] | str]:
    async with gateway(bundled) as app:
        return events(await post(app, seed=7, stream=True))


def test_a_streamed_answer_is_cut_to_max_tokens(bundled):
    async def go():
        async with gateway(bundled) as app:
            plain = await post(app, seed=2, max_tokens=4)
            streamed = await post(app, seed=2, max_tokens=4, stream=True)
            return plain, streamed

    plain, streamed = run(go())
    choice = plain.json()["choices"][0]
    stream = events(streamed)
    assert choice["finish_reason"] == "length"
    assert content(stream) == choice["message"]["content"]
    finish = [
        c["choices"][0]["finish_reason"] for c in stream if isinstance(c, dict) and c.get("choices")
    ]
    assert finish[-1] == "length"


HOSTILE_PIECES = [
    'He said "stop" \\ and left.\n',
    '", "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n',  # an attempt to end the stream
    '"content": "\\u0000" \x00\x01\x1f\t\r',  # what the old splice looked for, and controls
    "line\u2028separator\u2029paragraph\x85next ",
    "</script> é 漢字 😀",
]


def data_lines(response: httpx.Response) -> list[str]:
    """The stream's ``data:`` payloads, split as the SSE format splits lines (CR, LF only)."""
    assert response.status_code == 200, response.text
    text = response.content.decode("utf-8")
    return [line[6:] for line in re.split(r"\r\n|\r|\n", text) if line.startswith("data: ")]


def test_a_hostile_answer_streams_as_valid_json_chunks(bundled):
    """Every ``data:`` line of the stream is one JSON value (parsed strictly, each line on its
    own whatever splits lines) and the content chunks join to exactly the text the worker wrote:
    quotes, backslashes, newlines, control characters, a fake end of stream, line separators."""
    config = parse_pool({"workers": [bundled.workers[0].model_dump(mode="json")]})
    provider = Streaming((HOSTILE_PIECES, None))

    async def go():
        source = one_step(0, "answer the question")
        async with gateway(config, source, providers=[provider]) as app:
            return await post(app, stream=True)

    response = run(go())
    lines = data_lines(response)
    assert lines[-1] == "[DONE]" and lines.count("[DONE]") == 1
    chunks = [json.loads(line) for line in lines[:-1]]  # each one whole JSON value
    assert all(isinstance(c, dict) and "error" not in c for c in chunks)
    assert content(chunks) == "".join(HOSTILE_PIECES)
    for line in lines:  # no line break of any reader's inside an event's data
        assert line.splitlines() == [line]


@pytest.mark.parametrize(
    "text", ["", "plain", *HOSTILE_PIECES, "lone \ud800 surrogate", "\ud83d half", "\\ud800"]
)
def test_each_content_chunk_is_the_json_of_a_chunk_object(text):
    from conductor_core.serve.chat_stream import ChunkWriter

    writer = ChunkWriter("conductor", include_usage=True)
    event = writer.content(text)
    assert event.startswith("data: ") and event.endswith("\n\n")
    payload = event[len("data: ") : -2]
    assert "\n" not in payload and payload.splitlines() == [payload]
    payload.encode("utf-8")  # a lone surrogate goes escaped: the response can be encoded
    chunk = json.loads(payload)
    assert chunk == {
        **writer.body(),
        "choices": [{**writer.body()["choices"][0], "delta": {"content": text}}],
    }
    assert ChatCompletionChunk.model_validate(chunk).choices[0].delta.content == text


def test_a_stream_broken_after_its_first_piece_ends_with_an_error_not_a_resend(bundled):
    config = parse_pool({"workers": [bundled.workers[0].model_dump(mode="json")]})
    provider = Streaming((["The answer ", "is "], server_error()), (["resent text"], None))

    async def go():
        source = one_step(0, "answer the question")
        async with gateway(config, source, providers=[provider]) as app:
            return events(await post(app, stream=True))

    stream = run(go())
    order = kinds(stream)
    assert content(stream) == "The answer is "  # each piece once; nothing after the break
    assert order[-2:] == ["error", "[DONE]"] and "done" not in order
    error = stream[-2]["error"]
    assert error["code"] == "worker_error" and "not sent again" in error["message"]
    assert provider.calls == 1


def test_a_later_round_broken_mid_stream_does_not_switch_to_the_earlier_answer(bundled):
    """Round 1 answers (unstreamed); round 2's last step streams a piece and fails. solve()
    keeps round 1's answer, but the client already has round 2's first piece: the stream ends
    with an error instead of sending round 1's answer after it."""
    config = parse_pool({"workers": [w.model_dump(mode="json") for w in bundled.workers[:2]]})
    first = Streaming(([], None))  # worker 0: plain calls ("unstreamed reply")
    last = Streaming((["round two ", "says "], server_error()))

    async def go():
        async with gateway(config, EveryRound(), providers=[first, last]) as app:
            return events(await post(app, stream=True, conductor={"max_rounds": 2}))

    stream = run(go())
    order = kinds(stream)
    assert content(stream) == "round two says "
    assert order[-2:] == ["error", "[DONE]"] and "done" not in order
    assert stream[-2]["error"]["code"] == "worker_error"


# -- AnswerStream ---------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [None, 1, 2, 3, 5, 50])
@pytest.mark.parametrize(
    "answer", ["The answer is 42.", "  lead  spaces\n\nand lines  ", "one", "a b c d e f g h"]
)
def test_what_is_sent_is_always_a_prefix_of_the_cut_answer(answer, limit):
    final, _ = cut_to_tokens(answer, limit)
    rng = random.Random(f"{answer}{limit}")
    for _ in range(30):
        cuts = sorted(rng.sample(range(len(answer) + 1), k=min(4, len(answer) + 1)))
        pieces = [answer[a:b] for a, b in zip([0, *cuts], [*cuts, len(answer)], strict=True)]
        stream = AnswerStream(limit)
        sent = ""
        for piece in pieces:
            sent += stream.push(piece)
            assert final.startswith(sent)
        rest, cut, continues = stream.finish(answer)
        assert continues and sent + rest == final and cut == (final != answer)
    stream = AnswerStream(limit)
    stream.push("something else entirely")
    assert stream.finish(answer)[2] is False


@pytest.mark.parametrize("limit", [None, 2, 50])
@pytest.mark.parametrize(
    ("answer", "stops"),
    [
        ("The answer is 42.\nObservation: done", ("\nObservation:",)),
        ("abcabcabd", ("abd",)),  # a partial match that fails, then one that holds
        ("no stop in here at all", ("STOP", "END")),
        ("END first", ("END",)),
        ("x y z", ("y", "z")),  # the earliest of several
    ],
)
def test_a_stop_sequence_split_across_pieces_is_never_sent(answer, stops, limit):
    final, _ = final_answer(answer, limit, stops)
    assert not any(stop in final for stop in stops)
    rng = random.Random(f"{answer}{stops}{limit}")
    for _ in range(30):
        cuts = sorted(rng.sample(range(len(answer) + 1), k=min(5, len(answer) + 1)))
        pieces = [answer[a:b] for a, b in zip([0, *cuts], [*cuts, len(answer)], strict=True)]
        stream = AnswerStream(limit, stops)
        sent = ""
        for piece in pieces:
            sent += stream.push(piece)
            assert final.startswith(sent), (pieces, sent)
        rest, _, continues = stream.finish(answer)
        assert continues and sent + rest == final
