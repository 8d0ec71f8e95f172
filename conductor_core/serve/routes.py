"""The gateway's routes: one module-level router of thin handlers over the app's state (as vLLM's
``entrypoints/openai`` does), each declared with its request and response models, which give the
OpenAPI description (:mod:`.openapi`).

* ``POST /v1/chat/completions``, ``POST /v1/responses``, ``POST /v1/completions``: API key,
  rate limit and spend quota, then the body, then the concurrency limits; the Responses and
  completions APIs are solved as the chat completion they stand for (:mod:`.api_adapters`);
* ``GET /v1/models`` (API key, rate limit): the served model;
* ``GET /healthz`` (the process is alive), ``GET /readyz`` (this replica can serve),
  ``GET /metrics`` (Prometheus text).

The chat routes read their bodies raw, as hostile input needs: the caller is admitted before a
byte of the body is read (:func:`caller_of`), the body is read under the size and time limits
(:func:`raw_body`, :func:`~.request_body.read_body`), then parsed as strict JSON into the request
model (:func:`~.protocol.parse_chat_request`), each failure an OpenAI error with its own status.
A client that disconnects from a chat completion cancels its workflow. The app's state
(``app.state``): ``config``, ``metrics``, ``gatekeeper`` (:class:`~.admission.Gatekeeper`),
``models`` (the ``/v1/models`` body) and, once started, ``serving``
(:class:`~.serving.ConductorServing`).
"""

# No ``from __future__ import annotations``: FastAPI reads the handlers' real annotations.

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException

from conductor_core.serve import api_adapters
from conductor_core.serve.admission import Gatekeeper
from conductor_core.serve.api_adapters import (
    CompletionsRequest,
    ResponseObject,
    ResponsesRequest,
    TextCompletion,
)
from conductor_core.serve.auth import ConcurrencySlot
from conductor_core.serve.openapi import SSE_EVENT, errors, json_body, with_request_id
from conductor_core.serve.protocol import (
    RETRYABLE_STATUSES,
    SHOULD_RETRY_HEADER,
    ChatCompletionRequest,
    ChatCompletionResponse,
    HealthStatus,
    ModelList,
    ReadinessStatus,
    RequestError,
    error_body,
    parse_chat_request,
)
from conductor_core.serve.request_body import read_body

__all__ = ["EXCEPTION_HANDLERS", "router"]

router = APIRouter()

QUESTION = "What is 6 times 7?"
"""The question of the request examples."""


def chat_responses() -> dict[int, Any]:
    """The responses of a chat route besides its JSON answer: the stream, and the errors of the
    checks each chat route runs (fresh dicts for each route: FastAPI fills them in)."""
    return {
        200: with_request_id(content={"text/event-stream": {"schema": SSE_EVENT}}),
        **errors(400, 401, 404, 408, 413, 429, 500, 502, 504, refused_by=("rate", "concurrency")),
    }


# -- responses and errors -------------------------------------------------------------------------


class SlotStreamingResponse(StreamingResponse):
    """A stream that holds its request's concurrency slot until the response is over, however it
    ends (sent, failed, or the client gone), then closes its generator, whose cleanup cancels a
    workflow still running."""

    def __init__(self, content: Any, slot: ConcurrencySlot, **kwargs: Any) -> None:
        super().__init__(content, **kwargs)
        self.slot = slot

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()
            aclose = getattr(self.body_iterator, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()


def json_bytes(body: bytes) -> Response:
    """A 200 with an already encoded JSON body (FastAPI's jsonable_encoder pass skipped)."""
    return Response(content=body, media_type="application/json")


async def on_request_error(request: Request, exc: RequestError) -> JSONResponse:
    """A :class:`~.protocol.RequestError` as its OpenAI error response."""
    return JSONResponse(status_code=exc.status, content=exc.body(), headers=exc.headers)


async def on_http_error(request: Request, exc: HTTPException) -> JSONResponse:
    """Starlette's own errors (an unknown route, a wrong method) as OpenAI error responses."""
    kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    detail = exc.detail if isinstance(exc.detail, str) else "request rejected"
    message = f"{detail}: {request.method[:16]} {request.url.path[:200]}"
    headers = dict(getattr(exc, "headers", None) or {})
    if 400 <= exc.status_code < 500 and exc.status_code not in RETRYABLE_STATUSES:
        headers[SHOULD_RETRY_HEADER] = "false"  # an unknown route stays unknown
    return JSONResponse(
        status_code=exc.status_code, content=error_body(message, kind), headers=headers
    )


EXCEPTION_HANDLERS: dict[Any, Callable[..., Any]] = {
    RequestError: on_request_error,
    HTTPException: on_http_error,
}
"""The app's exception handlers (``FastAPI(exception_handlers=...)``)."""


# -- dependencies ---------------------------------------------------------------------------------


async def caller_of(request: Request) -> str:
    """The admitted caller (:meth:`~.admission.Gatekeeper.admit`: 401 or 429 before anything
    else of the request is read)."""
    gatekeeper: Gatekeeper = request.app.state.gatekeeper
    return gatekeeper.admit(request)


Caller = Annotated[str, Depends(caller_of)]


async def raw_body(request: Request, caller: Caller) -> bytes:
    """The body of an admitted caller's request, read under ``max_body_bytes`` and
    ``body_timeout_s`` (413, 408, 499)."""
    state = request.app.state
    config = state.config
    return await read_body(
        request,
        config.max_body_bytes,
        config.body_timeout_s,
        lambda: state.metrics.read_timeouts.labels(phase="body").inc(),
    )


RawBody = Annotated[bytes, Depends(raw_body)]


async def chat_body(raw: RawBody) -> ChatCompletionRequest:
    """A chat-completions body (400 naming what is wrong)."""
    return parse_chat_request(raw)


async def responses_body(raw: RawBody) -> ChatCompletionRequest:
    """The chat completion a Responses API body stands for."""
    return api_adapters.chat_request(raw)


async def completions_body(raw: RawBody) -> ChatCompletionRequest:
    """The chat completion a completions API body stands for."""
    return api_adapters.completions_chat_request(raw)


async def client_gone(receive: Any) -> None:
    """Returns when the client disconnects. Once the body is read, the server's next
    ``receive()`` message is ``http.disconnect`` (waiting costs nothing until then)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def solve(
    request: Request,
    caller: str,
    body: ChatCompletionRequest,
    events: Callable[[AsyncIterator[str]], AsyncIterator[str]] | None = None,
    answer: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Response:
    """Answer a chat request: a stream of server-sent events, or one JSON object. A streamed
    answer's chat events go through ``events``, a finished chat completion (its JSON) through
    ``answer`` (None: as they are, the chat API's own)."""
    state = request.app.state
    serving = state.serving
    job = serving.prepare(body, request.state.request_id, caller)
    slot = state.gatekeeper.concurrency.acquire(caller)  # a slot only for a request that will run
    if body.stream:
        stream = serving.stream_chat_completion(job, request.state.received_at)
        return SlotStreamingResponse(
            events(stream) if events else stream,
            slot,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    with slot:
        response = await serving.chat_completion(job, client_gone(request.receive))
    if answer is None:
        return json_bytes(response.to_json_bytes())
    return JSONResponse(answer(response.to_json()))


# -- routes ---------------------------------------------------------------------------------------


@router.get(
    "/healthz",
    response_model=HealthStatus,
    response_description="The process is alive.",
    responses={200: with_request_id(), **errors(500)},
)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    response_model=ReadinessStatus,
    response_description="This replica can serve: started, not draining, and the Conductor "
    "answered within the cached window (the workers are not asked).",
    responses={
        200: with_request_id(),
        503: with_request_id(
            "Not ready (starting, draining, or the Conductor does not answer).",
            model=ReadinessStatus,
        ),
        **errors(500),
    },
)
async def readyz(request: Request) -> JSONResponse:
    serving = getattr(request.app.state, "serving", None)
    if serving is None:  # the lifespan has not started (or has ended)
        ready, checks = False, {"gateway": "starting"}
    else:
        ready, checks = await serving.readiness()
    status = "ready" if ready else "not_ready"
    return JSONResponse(
        status_code=200 if ready else 503, content={"status": status, "checks": checks}
    )


@router.get(
    "/metrics",
    response_class=PlainTextResponse,
    response_description="Prometheus text exposition.",
    responses={200: with_request_id(), **errors(500)},
)
async def prometheus_metrics(request: Request) -> Response:
    body, content_type = request.app.state.metrics.render()
    return Response(content=body, media_type=content_type)


@router.get(
    "/v1/models",
    response_model=ModelList,
    response_description="The one served model.",
    responses={200: with_request_id(), **errors(401, 429, 500)},
)
async def models(request: Request, caller: Caller) -> Response:
    return json_bytes(request.app.state.models)


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletionResponse,
    response_description="A chat.completion, or with `stream: true` server-sent "
    "chat.completion.chunk events ending with `data: [DONE]`.",
    responses=chat_responses(),
    openapi_extra=json_body(
        ChatCompletionRequest,
        {"model": "conductor", "messages": [{"role": "user", "content": QUESTION}]},
    ),
)
async def chat_completions(
    request: Request, caller: Caller, body: Annotated[ChatCompletionRequest, Depends(chat_body)]
) -> Response:
    return await solve(request, caller, body)


@router.post(
    "/v1/responses",
    response_model=ResponseObject,
    response_description="A response object (OpenAI's Responses API, text only), or with "
    "`stream: true` its server-sent events, from `response.created` to `response.completed` "
    "(`response.incomplete` when cut to `max_output_tokens`; `error` after a failure).",
    responses=chat_responses(),
    openapi_extra=json_body(ResponsesRequest, {"model": "conductor", "input": QUESTION}),
)
async def responses(
    request: Request,
    caller: Caller,
    body: Annotated[ChatCompletionRequest, Depends(responses_body)],
) -> Response:
    """OpenAI's Responses API, text only (:mod:`conductor_core.serve.api_adapters`)."""
    meta = api_adapters.new_meta(request.app.state.config.model_name)
    return await solve(
        request,
        caller,
        body,
        lambda stream: api_adapters.response_events(meta, stream),
        lambda completion: api_adapters.from_chat_completion(meta, completion),
    )


@router.post(
    "/v1/completions",
    response_model=TextCompletion,
    response_description="A text_completion, or with `stream: true` its server-sent chunks "
    "ending with `data: [DONE]`.",
    responses=chat_responses(),
    openapi_extra=json_body(CompletionsRequest, {"model": "conductor", "prompt": QUESTION}),
)
async def completions(
    request: Request,
    caller: Caller,
    body: Annotated[ChatCompletionRequest, Depends(completions_body)],
) -> Response:
    """The legacy completions API, text only: the prompt asked as a chat completion."""
    return await solve(
        request,
        caller,
        body,
        api_adapters.completion_events,
        api_adapters.completion_from_chat,
    )
