"""OpenAI's other text APIs over the chat completions path: the Responses API
(``POST /v1/responses``) and the legacy completions API (``POST /v1/completions``), text only.

The openai SDK's ``responses.create`` and the OpenAI Agents SDK default to the Responses API;
lm-eval's and older clients to completions. A Responses request is translated into a
chat-completions body (``instructions`` as a system message, ``input`` as the conversation,
``max_output_tokens`` as ``max_tokens``) and validated, limited and solved exactly as one; the
answer comes back as a ``response`` object, or streamed as the Responses API's events
(``response.created``, ``response.output_text.delta`` as the answer is written,
``response.completed`` with the whole response; ``error`` when the workflow fails). ``text.format``
(``json_object``, or ``json_schema`` with ``name``/``schema``/``strict`` at its top level) is the
chat path's ``response_format``, asked and checked alike. Tools and conversation state
(``previous_response_id``, ``prompt``) are refused by name: a Conductor calls no tools of the
client and keeps no responses. A completions request's
prompt is asked as the question, and the answer comes back as ``text_completion`` objects.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conductor_core.serve.protocol import (
    ChatCompletionRequest,
    RequestError,
    check_values,
    decode_body,
    unsupported_parameter,
    validate_chat_request,
)
from conductor_core.serve.sse import sse_data, sse_event

_REFUSED = {
    "tools": "the workflow calls no tools of the client",
    "previous_response_id": "responses are not stored; send the whole conversation as input",
    "prompt": "stored prompts are not supported; send the text as input",
}
"""Fields refused when they ask for anything, and why."""


@dataclass(frozen=True)
class ResponseMeta:
    """What the answer needs to know of the request: its id and the served model."""

    id: str
    model: str
    created_at: int


class _Part(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    type: Literal["input_text", "output_text"]
    text: str


class _Message(BaseModel):
    model_config = ConfigDict(strict=True, extra="allow")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[_Part]
    type: Literal["message"] = "message"


class ResponsesRequest(BaseModel):
    """OpenAI's Responses API, text only: solved as the chat completion it stands for
    (`instructions` a system message, `input` the conversation, `max_output_tokens` as
    max_tokens, `text.format` as response_format); other fields are kept and not applied, as the
    chat path keeps them. `tools`, `previous_response_id` and `prompt` are refused by name.
    (The gateway's OpenAPI description publishes this model's schema.)"""

    model_config = ConfigDict(strict=True, extra="allow")

    model: str = ""
    input: str | Annotated[list[_Message], Field(min_length=1)]
    instructions: str | None = None
    stream: bool | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)


def chat_request(raw: bytes | str) -> ChatCompletionRequest:
    """The chat-completions request a ``/v1/responses`` body stands for.

    Raises:
        RequestError: 400 when the body is not a JSON object, a field is invalid (``param``
            names the first), or a refused field asks for anything.
    """
    body = decode_body(raw)
    for param, why in _REFUSED.items():
        if body.get(param):
            raise unsupported_parameter(param, why)
    check_values(body)
    response_format = _response_format(body.get("text"))
    try:
        request = ResponsesRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"] if not str(p).startswith(("str", "list[")))
        raise RequestError(400, f"{where}: {first['msg']}", param=where or None) from None
    if isinstance(request.input, str):
        messages: list[dict[str, Any]] = [{"role": "user", "content": request.input}]
    else:
        messages = [
            {
                "role": m.role,
                "content": m.content
                if isinstance(m.content, str)
                else [{"type": "text", "text": p.text} for p in m.content],
            }
            for m in request.input
        ]
    if request.instructions:
        messages.insert(0, {"role": "system", "content": request.instructions})
    chat: dict[str, Any] = {"messages": messages}
    for ours, theirs in (
        ("model", "model"),
        ("stream", "stream"),
        ("max_output_tokens", "max_tokens"),
        ("temperature", "temperature"),
        ("top_p", "top_p"),
        ("user", "user"),
        ("metadata", "metadata"),
    ):
        if ours in body:
            chat[theirs] = body[ours]
    if request.stream:  # the usage goes into response.completed
        chat["stream_options"] = {"include_usage": True}
    if response_format is not None:
        chat["response_format"] = response_format
    return validate_chat_request(chat)


def _response_format(text: Any) -> dict[str, Any] | None:
    """The chat ``response_format`` of a Responses ``text`` field: its ``format``, with a
    ``json_schema``'s ``name``, ``schema``, ``description`` and ``strict`` moved under
    ``json_schema`` (the chat API's shape). None when it asks for free text.

    Raises:
        RequestError: 400 naming ``text.format`` (or its field) when it is not a format object
            of a known type, or a ``json_schema`` without a string ``name`` or object ``schema``.
    """
    if text is None:
        return None
    if not isinstance(text, dict):
        raise RequestError(400, "text: must be an object", param="text")
    fmt = text.get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict):
        raise RequestError(400, "text.format: must be an object", param="text.format")
    kind = fmt.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise RequestError(
            400,
            "text.format.type: must be 'text', 'json_object' or 'json_schema'",
            param="text.format.type",
        )
    if not isinstance(fmt.get("name"), str):
        raise RequestError(400, "text.format.name: must be a string", param="text.format.name")
    if not isinstance(fmt.get("schema"), dict):
        raise RequestError(
            400, "text.format.schema: must be a JSON Schema object", param="text.format.schema"
        )
    spec = {k: fmt[k] for k in ("name", "schema", "description", "strict") if k in fmt}
    return {"type": "json_schema", "json_schema": spec}


class ResponseObject(BaseModel):
    """A ``response`` object of the Responses API as ``/v1/responses`` answers it (text only):
    ``completed``, or ``incomplete`` when the answer was cut to ``max_output_tokens``; its one
    output item is the assistant message (:func:`response_object`; the fields listed are those
    a client reads, the others are sent as OpenAI sends them)."""

    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["response"]
    created_at: int
    status: Literal["completed", "incomplete"]
    model: str
    output: list[dict[str, Any]]
    usage: dict[str, Any] | None = None


def new_meta(model: str) -> ResponseMeta:
    """A fresh response id for a request to ``model``."""
    return ResponseMeta(f"resp_{secrets.token_hex(12)}", model, int(time.time()))


def _message(meta: ResponseMeta, text: str, status: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": f"msg_{meta.id.removeprefix('resp_')}",
        "status": status,
        "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def response_object(
    meta: ResponseMeta,
    text: str | None,
    *,
    finish: str | None,
    usage: dict[str, int] | None,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``response`` object: ``completed`` with its text, ``incomplete`` when the answer was cut
    to ``max_output_tokens`` (``finish`` ``length``), ``in_progress`` without text yet."""
    status = "completed" if finish != "length" else "incomplete"
    if text is None:
        status = "in_progress"
    out: dict[str, Any] = {
        "id": meta.id,
        "object": "response",
        "created_at": meta.created_at,
        "status": status,
        "model": meta.model,
        "output": [] if text is None else [_message(meta, text, status)],
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "error": None,
        "tools": [],
        "tool_choice": "none",
        "parallel_tool_calls": False,
        "usage": None,
    }
    if usage is not None:
        out["usage"] = {
            "input_tokens": usage.get("prompt_tokens", 0),
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": usage.get("completion_tokens", 0),
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.get("total_tokens", 0),
        }
    if extra:
        out["conductor"] = extra
    return out


def from_chat_completion(meta: ResponseMeta, completion: dict[str, Any]) -> dict[str, Any]:
    """The ``response`` object of a finished chat completion (its JSON)."""
    choice = completion["choices"][0]
    return response_object(
        meta,
        choice["message"]["content"] or "",
        finish=choice.get("finish_reason"),
        usage=completion.get("usage"),
        extra=completion.get("conductor"),
    )


async def response_events(meta: ResponseMeta, chat_sse: AsyncIterator[str]) -> AsyncIterator[str]:
    """The Responses API's events for a streamed chat completion's server-sent events (the
    chat stream is asked for its usage; an error in it ends the events with ``error``)."""
    seq = 0
    text = ""
    item_id = _message(meta, "", "in_progress")["id"]

    def event(kind: str, **fields: Any) -> str:
        nonlocal seq
        seq += 1
        return sse_event(kind, {"type": kind, "sequence_number": seq - 1, **fields})

    yield event("response.created", response=response_object(meta, None, finish=None, usage=None))
    yield event(
        "response.output_item.added",
        output_index=0,
        item={**_message(meta, "", "in_progress"), "content": []},
    )
    yield event(
        "response.content_part.added",
        item_id=item_id,
        output_index=0,
        content_index=0,
        part={"type": "output_text", "text": "", "annotations": []},
    )
    finish, usage, extra = None, None, None
    async for line in chat_sse:
        data = line.removeprefix("data: ").strip()
        if data == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            error = chunk["error"]
            yield event("error", code=error.get("code"), message=error.get("message"), param=None)
            return
        if chunk.get("usage"):
            usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                text += piece
                yield event(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=0,
                    content_index=0,
                    delta=piece,
                    logprobs=[],
                )
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
                extra = (chunk.get("conductor") or {}).get("data")
    done = response_object(meta, text, finish=finish, usage=usage, extra=extra)
    part = done["output"][0]["content"][0]
    yield event(
        "response.output_text.done",
        item_id=item_id,
        output_index=0,
        content_index=0,
        text=text,
        logprobs=[],
    )
    yield event(
        "response.content_part.done",
        item_id=item_id,
        output_index=0,
        content_index=0,
        part=part,
    )
    yield event("response.output_item.done", output_index=0, item=done["output"][0])
    kind = "response.completed" if done["status"] == "completed" else "response.incomplete"
    yield event(kind, response=done)


# -- the legacy completions API (POST /v1/completions) ------------------------------------------


class CompletionsRequest(BaseModel):
    """The legacy completions API, text only: the prompt is asked as the question of a chat
    completion (one prompt); `suffix`, `echo`, `logprobs` and `best_of` are refused by name."""

    model_config = ConfigDict(strict=True, extra="allow")

    model: str = ""
    prompt: str
    stream: bool | None = None
    max_tokens: int | None = Field(default=None, ge=1)


class TextCompletionChoice(BaseModel):
    """One choice of a ``text_completion``."""

    index: int
    text: str
    logprobs: None = None
    finish_reason: str | None


class TextCompletion(BaseModel):
    """A ``text_completion`` object as ``/v1/completions`` answers it
    (:func:`completion_from_chat`)."""

    id: str
    object: Literal["text_completion"]
    created: int
    model: str
    choices: list[TextCompletionChoice]
    usage: dict[str, int] | None = None


_COMPLETIONS_REFUSED = {
    "suffix": "the answer is not an insertion",
    "echo": "the prompt is not echoed",
    "logprobs": "the answer is written by several models; it has no log probabilities",
    "best_of": "one answer per request",
}


def completions_chat_request(raw: bytes | str) -> ChatCompletionRequest:
    """The chat-completions request a ``/v1/completions`` body stands for (the other fields are
    passed on, so that ``n``, ``stop`` and the rest are checked as there)."""
    body = decode_body(raw)
    for param, why in _COMPLETIONS_REFUSED.items():
        if body.get(param):
            raise unsupported_parameter(param, why)
    check_values(body)
    try:
        request = CompletionsRequest.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise RequestError(400, f"{where}: {first['msg']}", param=where or None) from None
    chat = {k: v for k, v in body.items() if k not in ("prompt", *_COMPLETIONS_REFUSED)}
    chat["messages"] = [{"role": "user", "content": request.prompt}]
    return validate_chat_request(chat)


def completion_from_chat(completion: dict[str, Any]) -> dict[str, Any]:
    """The ``text_completion`` object of a finished chat completion (its JSON)."""
    choice = completion["choices"][0]
    return {
        "id": completion["id"].replace("chatcmpl-", "cmpl-", 1),
        "object": "text_completion",
        "created": completion["created"],
        "model": completion["model"],
        "choices": [
            {
                "index": 0,
                "text": choice["message"]["content"] or "",
                "logprobs": None,
                "finish_reason": choice.get("finish_reason"),
            }
        ],
        "usage": completion.get("usage"),
    }


async def completion_events(chat_sse: AsyncIterator[str]) -> AsyncIterator[str]:
    """A streamed chat completion's events as ``text_completion`` chunks (errors and ``[DONE]``
    pass as they are; the workflow's own events, which carry no text, are left out)."""
    async for line in chat_sse:
        data = line.removeprefix("data: ").strip()
        if data == "[DONE]" or "error" in (chunk := json.loads(data)):
            yield line
            continue
        choices = [
            {
                "index": 0,
                "text": (c.get("delta") or {}).get("content") or "",
                "logprobs": None,
                "finish_reason": c.get("finish_reason"),
            }
            for c in chunk.get("choices") or ()
            if (c.get("delta") or {}).get("content") or c.get("finish_reason")
        ]
        if not choices and not chunk.get("usage"):
            continue
        out = {
            "id": chunk["id"].replace("chatcmpl-", "cmpl-", 1),
            "object": "text_completion",
            "created": chunk["created"],
            "model": chunk["model"],
            "choices": choices,
        }
        if chunk.get("usage"):
            out["usage"] = chunk["usage"]
        yield sse_data(out)
