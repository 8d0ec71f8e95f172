"""An OpenAI-compatible HTTP server in front of simulated workers.

Each simulated worker of a pool is served as one model (id = ``worker.model``), answering from
the problems its ``simulation.problems`` names:
``GET /v1/models``, ``POST /v1/chat/completions`` (``n`` choices, usage, the OpenAI response
schema) and ``GET /health``. Injected failures travel over real HTTP: a rate limit is a 429 with
``Retry-After``, a server error a 500, a timeout a request that hangs for ``hang_s`` seconds (so
the client's timeout fires), a malformed reply a 200 whose body is not a chat completion.

Requests are validated by the models of :mod:`conductor_core.serve.protocol` (shared with the
gateway); an invalid one gets a 400 in the OpenAI error format naming the field.

``stream: true`` (with ``n`` = 1) answers as OpenAI's server-sent events: a role chunk, the answer
in pieces with the simulated latency spread before them
(:meth:`~conductor_core.simulation.provider.SimulatedProvider.stream_plan`), a chunk with the
``finish_reason``, the usage chunk when ``stream_options.include_usage`` is set, ``[DONE]``. A
failure drawn for a streamed request is sent before the stream starts, as for any other (a
malformed one as a ``data:`` line that is not JSON).

A ``response_format`` of type ``json_object`` or ``json_schema`` is honoured as vLLM honours it:
the answer is the simulated worker's, as JSON in that form
(:mod:`~conductor_core.simulation.json_answers`); a schema that is not a JSON Schema is a 400.

Over HTTP a request carries no sample index; ``sample_index`` (an extension field) or ``seed`` in
the request body picks it, else 0. Choice ``i`` of a request uses ``sample_index + i``.

``failure_script`` forces the outcomes of the first requests in order (for exact retry tests):
entries are ``"429"``/``"rate_limit"``, ``"500"``/``"server_error"``, ``"hang"``/``"timeout"``,
``"malformed"``, ``"cut"`` (a stream that ends after half of the answer's pieces, without a
``finish_reason`` or ``[DONE]``; an unstreamed request gets the malformed reply) or ``"ok"``.
"""

# No ``from __future__ import annotations`` here: FastAPI must see the handler's real
# ``Request`` annotation, and fastapi is imported lazily inside :func:`create_app`.

import asyncio
import contextlib
import json
import socket
import threading
import time
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from conductor_core.errors import ConfigError, require
from conductor_core.serve.protocol import (
    AssistantMessage,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionStreamChoice,
    DeltaMessage,
    ModelCard,
    ModelList,
    RequestError,
    UsageInfo,
    error_body,
    parse_chat_request,
)
from conductor_core.serve.structured import output_format_of
from conductor_core.simulation.problem_bank import known_problems
from conductor_core.simulation.provider import SimulatedProvider
from conductor_core.workers.config import PoolConfig
from conductor_core.workers.types import Messages, OutputFormat

__all__ = [
    "MALFORMED_BODY",
    "SimulatorState",
    "create_app",
    "running_app",
    "running_simulator",
    "serve",
]

_SCRIPT_ALIASES = {
    "429": "rate_limit",
    "rate_limit": "rate_limit",
    "500": "server_error",
    "server_error": "server_error",
    "hang": "timeout",
    "timeout": "timeout",
    "malformed": "malformed",
    "cut": "cut",
    "ok": "ok",
}

MALFORMED_BODY = '{"id": "chatcmpl-sim", "object": "chat.completion", "choices": ['
"""Body of a simulated malformed reply: truncated JSON, sent with status 200."""


@dataclass
class SimulatorState:
    """Mutable state of one simulator app: its providers, the failure script and counters."""

    providers: dict[str, SimulatedProvider]
    script: deque[str] = field(default_factory=deque)
    outcomes: Counter[str] = field(default_factory=Counter)
    requests: int = 0

    def set_script(self, outcomes: list[str] | None) -> None:
        """Force the outcomes of the next requests, in order (replaces any remaining script)."""
        self.script = _normalise_script(outcomes)

    def next_outcome(self, provider: SimulatedProvider, messages: Messages, sample: int) -> str:
        """The outcome of this request: the next scripted one, else a drawn failure, else ok."""
        self.requests += 1
        if self.script:
            outcome = self.script.popleft()
        else:
            outcome = provider.draw_failure(messages, sample_index=sample) or "ok"
        self.outcomes[outcome] += 1
        return outcome


def _normalise_script(script: list[str] | None) -> deque[str]:
    out: deque[str] = deque()
    for i, entry in enumerate(script or []):
        name = _SCRIPT_ALIASES.get(str(entry).strip().lower())
        if name is None:
            allowed = ", ".join(sorted(_SCRIPT_ALIASES))
            raise ConfigError(
                f"failure_script[{i}]: unknown outcome {entry!r}; use one of {allowed}"
            )
        out.append(name)
    return out


def _build_providers(pool: PoolConfig) -> dict[str, SimulatedProvider]:
    providers: dict[str, SimulatedProvider] = {}
    for i, worker in enumerate(pool.workers):
        if worker.provider != "simulated":
            continue
        if worker.model in providers:
            raise ConfigError(
                f"workers.{i}.model: {worker.model!r} is used by two simulated workers; "
                "give each simulated worker a distinct model name"
            )
        providers[worker.model] = SimulatedProvider(worker)
    if not providers:
        raise ConfigError(
            "workers: the pool has no worker with provider 'simulated'; the simulator serves "
            "only simulated workers (see the bundled pool: conductor simulate serve)"
        )
    return providers


def create_app(
    pool: PoolConfig,
    *,
    failure_script: list[str] | None = None,
    hang_s: float = 30.0,
    retry_after_s: float = 0.05,
):
    """Build the FastAPI app serving the simulated workers of ``pool``.

    Args:
        pool: the pool; each ``simulated`` worker becomes a model named ``worker.model`` and
            knows the problems of its ``simulation.problems`` (see
            :meth:`PoolConfig.with_simulation_problems`).
        failure_script: forced outcomes of the first requests, in order (see module doc).
        hang_s: how long a ``timeout`` outcome hangs before answering 504.
        retry_after_s: the ``Retry-After`` sent with a 429.

    The app's :class:`SimulatorState` is ``app.state.simulator``.
    """
    fastapi = require("fastapi", extra="serve", purpose="the worker simulator server")
    responses = require("fastapi.responses", extra="serve", purpose="the worker simulator server")
    JSONResponse = responses.JSONResponse
    Response = responses.Response
    StreamingResponse = responses.StreamingResponse

    state = SimulatorState(providers=_build_providers(pool))
    known = known_problems(pool)
    n_problems = len(known) if known is not None else 0
    state.set_script(failure_script)
    app = fastapi.FastAPI(title="Conductor worker simulator", version="1")
    app.state.simulator = state
    created = int(time.time())

    def error(status: int, message: str, type_: str, **kw: Any):
        return JSONResponse(status_code=status, content=error_body(message, type_, **kw))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "models": list(state.providers), "problems": n_problems}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        cards = [
            ModelCard(id=m, created=created, owned_by="conductor-simulator")
            for m in state.providers
        ]
        return ModelList(data=cards).to_json()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: fastapi.Request):
        try:
            body = parse_chat_request(await request.body())
        except RequestError as exc:
            return JSONResponse(status_code=exc.status, content=exc.body())
        model = body.model
        provider = state.providers.get(model) if model is not None else None
        if provider is None:
            known = ", ".join(state.providers)
            return error(
                404,
                f"model {model!r} does not exist; available models: {known}",
                "invalid_request_error",
                param="model",
                code="model_not_found",
            )
        if body.stream and (body.n or 1) != 1:
            return error(
                400,
                "n: the simulator streams one choice only; omit 'n' or set it to 1",
                "invalid_request_error",
                param="n",
            )
        try:
            fmt = output_format_of(body.response_format)
        except RequestError as exc:
            return JSONResponse(status_code=exc.status, content=exc.body())
        messages: Messages = [{"role": m.role, "content": m.content} for m in body.messages]
        sample = body.sample
        max_tokens = body.token_limit or 0

        outcome = state.next_outcome(provider, messages, sample)
        if outcome == "rate_limit":
            return JSONResponse(
                status_code=429,
                content=error_body(
                    f"rate limit reached for {model}; retry after {retry_after_s:g}s",
                    "rate_limit_error",
                    code="rate_limit_exceeded",
                ),
                headers={
                    "Retry-After": f"{retry_after_s:g}",
                    "retry-after-ms": str(round(retry_after_s * 1000)),
                },
            )
        if outcome == "server_error":
            return error(500, f"simulated internal error for {model}", "server_error")
        if outcome == "timeout":
            await _hang(request, hang_s)
            return error(504, f"simulated upstream timeout for {model}", "timeout")
        if body.stream and outcome in ("ok", "cut", "malformed"):
            return StreamingResponse(
                _stream(provider, body, messages, outcome, fmt), media_type="text/event-stream"
            )
        if outcome in ("malformed", "cut"):
            return Response(content=MALFORMED_BODY, media_type="application/json")

        completions = await asyncio.gather(
            *(
                provider.answer(messages, sample_index=sample + i, output_format=fmt)
                for i in range(body.n or 1)
            )
        )
        choices = []
        completion_tokens = 0
        for i, comp in enumerate(completions):
            tokens = comp.usage.output_tokens
            capped = bool(max_tokens) and tokens > max_tokens
            completion_tokens += min(tokens, max_tokens) if capped else tokens
            choices.append(
                ChatCompletionChoice(
                    index=i,
                    message=AssistantMessage(content=comp.text),
                    finish_reason="length" if capped else "stop",
                )
            )
        response = ChatCompletionResponse(
            model=model,
            choices=choices,
            usage=UsageInfo.of(completions[0].usage.input_tokens, completion_tokens),
        )
        return response.to_json()

    return app


async def _stream(
    provider: SimulatedProvider,
    body: ChatCompletionRequest,
    messages: Messages,
    outcome: str,
    fmt: OutputFormat | None = None,
):
    """The server-sent events of a streamed answer (see the module doc); ``outcome`` ``cut``
    ends after half of the pieces, ``malformed`` sends a line that is not JSON."""
    model = body.model or ""
    cid, created = f"chatcmpl-sim-{time.monotonic_ns():x}", int(time.time())

    def event(**fields: Any) -> str:
        chunk = ChatCompletionChunk(id=cid, created=created, model=model, **fields)
        return f"data: {json.dumps(chunk.to_json())}\n\n"

    def choice(**fields: Any) -> list[ChatCompletionStreamChoice]:
        return [ChatCompletionStreamChoice(**fields)]

    if outcome == "malformed":
        yield "data: " + MALFORMED_BODY + "\n\n"
        return
    completion, plan = provider.stream_plan(messages, sample_index=body.sample, output_format=fmt)
    yield event(choices=choice(delta=DeltaMessage(role="assistant")))
    if outcome == "cut":
        plan = plan[: len(plan) // 2]
    loop = asyncio.get_running_loop()
    due = loop.time()
    for delay_s, piece in plan:
        due += delay_s  # against the start: the timer's slack does not add up over the pieces
        if (wait := due - loop.time()) > 0:
            await asyncio.sleep(wait)
        yield event(choices=choice(delta=DeltaMessage(content=piece)))
    if outcome == "cut":
        return
    limit = body.token_limit or 0
    tokens = completion.usage.output_tokens
    capped = bool(limit) and tokens > limit
    yield event(choices=choice(finish_reason="length" if capped else "stop"))
    if body.stream_options is not None and body.stream_options.include_usage:
        yield event(usage=UsageInfo.of(completion.usage.input_tokens, limit if capped else tokens))
    yield "data: [DONE]\n\n"


async def _hang(request: Any, seconds: float) -> None:
    """Sleep up to ``seconds``, stopping early when the client has gone away."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        await asyncio.sleep(min(0.05, left))
        if await request.is_disconnected():
            return


def serve(
    pool: PoolConfig,
    host: str = "127.0.0.1",
    port: int = 8100,
    **app_kwargs: Any,
) -> None:
    """Run the simulator with uvicorn until interrupted (``app_kwargs`` go to create_app)."""
    uvicorn = require("uvicorn", extra="serve", purpose="the worker simulator server")
    uvicorn.run(create_app(pool, **app_kwargs), host=host, port=port, log_level="info")


@contextlib.contextmanager
def running_app(
    app: Any,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    startup_timeout_s: float = 15.0,
    lifespan: str = "off",
    graceful_shutdown_s: float = 1.0,
    **uvicorn_options: Any,
) -> Iterator[str]:
    """Run an ASGI ``app`` with uvicorn in a background thread; yields ``http://HOST:PORT/v1``.

    ``port=0`` picks a free port. ``lifespan="on"`` runs the app's startup and shutdown (the
    gateway needs it); ``graceful_shutdown_s`` is how long in-flight requests may finish when the
    block exits, after which the server stops. ``uvicorn_options`` go to ``uvicorn.Config``
    (e.g. :func:`conductor_core.serve.server.uvicorn_options`).
    """
    uvicorn = require("uvicorn", extra="serve", purpose="the worker simulator server")
    # proto=IPPROTO_TCP, as uvicorn.run's own sockets have it: asyncio then turns Nagle's
    # algorithm off on every accepted connection (with proto 0 it does not, and a streamed
    # response waits ~40 ms for delayed ACKs between its small writes)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        log_level="warning",
        lifespan=lifespan,
        timeout_graceful_shutdown=graceful_shutdown_s,
        access_log=False,
        **uvicorn_options,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name="conductor-simulator", daemon=True
    )
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(timeout=5)
            sock.close()
            raise RuntimeError(f"the simulator did not start on {host}:{bound_port}")
        time.sleep(0.01)
    try:
        yield f"http://{host}:{bound_port}/v1"
    finally:
        server.should_exit = True
        thread.join(timeout=10 + graceful_shutdown_s)
        sock.close()


@contextlib.contextmanager
def running_simulator(
    pool: PoolConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    **app_kwargs: Any,
) -> Iterator[str]:
    """Run the simulator for ``pool`` in a background thread; yields its base URL (``.../v1``).

    ``app_kwargs`` go to :func:`create_app`. Example::

        with running_simulator(load_pool(bundled_pool_path())) as url:
            ...  # point provider 'openai' workers at ``url``
    """
    with running_app(create_app(pool, **app_kwargs), host=host, port=port) as url:
        yield url
