"""Request and response models of the OpenAI-compatible servers (gateway and worker simulator).

The models follow OpenAI's chat-completions schema closely enough for the official ``openai``
client, with two documented extensions:

* request ``conductor`` (:class:`ConductorOptions`, gateway only): per-request solve options;
* request ``sample_index`` (both servers): which sample of a prompt to draw (else ``seed``);
* response and chunk ``conductor`` (gateway only): a summary of the workflow, its trace when asked
  for, or one streamed workflow event (:class:`ConductorEvent`).

Unknown top-level request fields are accepted and ignored (clients send many optional OpenAI
parameters); unknown fields inside ``conductor`` are rejected, so a typo is a 400 naming it.
The fields read are validated strictly (no coercion of ``"true"`` to a boolean or ``"5"`` to a
number), so a request is accepted exactly when it matches the published JSON schema.

:func:`parse_chat_request` turns raw body bytes into a :class:`ChatCompletionRequest` or raises
:class:`RequestError`, which carries the HTTP status and the OpenAI error body
``{"error": {"message", "type", "param", "code"}}``. Nothing here imports a web framework.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    field_validator,
)

MAX_SAMPLE_INDEX = 2**62
MAX_TOKENS_LIMIT = 2**31


def _omitted_not_required(schema: dict[str, Any], cls: type) -> None:
    """JSON-schema hook: keys that ``to_json()`` may drop (``omit_if_none``) are not required."""
    omitted = getattr(cls, "omit_if_none", frozenset())
    if omitted and "required" in schema:
        schema["required"] = [k for k in schema["required"] if k not in omitted]
        if not schema["required"]:
            del schema["required"]


class OpenAIBaseModel(BaseModel):
    """Base of the wire models: unknown fields are kept, not rejected (OpenAI clients send many
    optional parameters). ``to_json()`` drops the keys of ``omit_if_none`` whose value is None.

    In the serialization JSON schema (the responses of the OpenAPI description) every field is
    required except those of ``omit_if_none``: that is what ``to_json()`` sends."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_serialization_defaults_required=True,
        json_schema_extra=_omitted_not_required,
    )
    omit_if_none: ClassVar[frozenset[str]] = frozenset()

    def to_json(self) -> dict[str, Any]:
        """The JSON-ready dict sent on the wire."""
        data = self.model_dump(mode="json")
        for key in self.omit_if_none:
            if data.get(key) is None:
                data.pop(key, None)
        return data

    def to_json_bytes(self) -> bytes:
        """``to_json()`` encoded as compact UTF-8 JSON, by pydantic's serializer in one pass (no
        intermediate dict; several times faster than ``json.dumps(self.to_json())``)."""
        if type(self).to_json is not OpenAIBaseModel.to_json:  # nested keys to omit
            return json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":")).encode()
        omit = {key for key in self.omit_if_none if getattr(self, key, None) is None}
        return self.__pydantic_serializer__.to_json(self, exclude=omit or None)


# -- errors ---------------------------------------------------------------------------------------


class ErrorInfo(BaseModel):
    """The ``error`` object of an OpenAI error response (all four keys are always sent)."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    message: str = Field(description="What went wrong and how to fix it.")
    type: str = Field(description="Error class, e.g. invalid_request_error, rate_limit_error.")
    param: str | None = Field(default=None, description="The request field at fault, if any.")
    code: str | None = Field(default=None, description="A machine-readable code, if any.")


class ErrorResponse(BaseModel):
    """An OpenAI error response body."""

    error: ErrorInfo


def error_body(
    message: str, type_: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """The OpenAI error body ``{"error": {"message", "type", "param", "code"}}`` as a dict."""
    info = ErrorInfo(message=message, type=type_, param=param, code=code)
    return ErrorResponse(error=info).model_dump(mode="json")


class RequestError(Exception):
    """A request that gets an OpenAI-format error response.

    Args:
        status: the HTTP status code.
        message: the human-readable message (names the field and the fix).
        type_: the OpenAI error type (``invalid_request_error``, ``authentication_error``, ...).
        param: the request field at fault.
        code: a machine-readable code.
        headers: extra response headers (for example ``Retry-After``).
    """

    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The OpenAI error body of this error."""
        return error_body(self.message, self.type, param=self.param, code=self.code)


# -- requests -------------------------------------------------------------------------------------


def flatten_content(content: Any) -> str | None:
    """Message content as text: a string, or the joined text parts of a list of content-part
    objects (parts without text, e.g. images, count as empty). None for anything else,
    including a part that is not an object or whose ``text`` is not a string."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict):
                return None
            text = part.get("text", "")
            if not isinstance(text, str):
                return None
            texts.append(text)
        return "".join(texts)
    return None


_CONTENT_SCHEMA = {
    "anyOf": [
        {"type": "string"},
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"text": {"type": "string"}},
            },
        },
    ],
    "description": "A string or a list of content parts (their text parts are joined).",
}


Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
"""The roles of OpenAI's chat messages (another role is a 400 naming the message)."""


class ChatMessage(OpenAIBaseModel):
    """One chat message; list-of-parts content is flattened to its text."""

    role: Role = Field(description="system, developer, user, assistant, tool or function.")
    content: Annotated[str, WithJsonSchema(_CONTENT_SCHEMA, mode="validation")] = Field(
        description="The text (text parts of a content-part list are joined)."
    )

    @field_validator("content", mode="before")
    @classmethod
    def _flatten(cls, value: Any) -> str:
        text = flatten_content(value)
        if text is None:
            raise ValueError("must be a string or a list of content-part objects with text")
        return text


class StreamOptions(OpenAIBaseModel):
    """OpenAI ``stream_options``."""

    model_config = ConfigDict(strict=True)

    include_usage: bool = Field(
        default=False, description="Send a last chunk with the usage and no choices."
    )


class BudgetOptions(BaseModel):
    """Per-request budget (each field optional; unset = the server's default)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_tokens: int | None = Field(
        default=None, ge=1, description="Worker tokens (input + output) for the whole question."
    )
    max_cost: float | None = Field(default=None, gt=0, description="Dollars of worker calls.")
    deadline_s: float | None = Field(
        default=None, gt=0, description="Wall-clock seconds; steps not started by then are skipped."
    )


def _worker_ref(value: Any) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise ValueError("must be a pool id (integer) or a worker name or model (string)")
    return value


WorkerRef = Annotated[int | str, BeforeValidator(_worker_ref)]
"""A worker named in a request: its pool id, or its name or model."""


class ConductorOptions(BaseModel):
    """The ``conductor`` extension of a chat-completions request: per-request solve options."""

    model_config = ConfigDict(extra="forbid", strict=True)

    workers: list[WorkerRef] | None = Field(
        default=None,
        min_length=1,
        description="Workers offered to the Conductor: pool ids or worker names/models "
        "(default: the whole pool).",
    )
    max_rounds: int | None = Field(
        default=None, ge=1, description="Conductor rounds (2+ = recursive refinement)."
    )
    max_steps: int | None = Field(default=None, ge=1, le=20, description="Steps per plan.")
    budget: BudgetOptions | None = Field(default=None, description="Tokens, dollars, seconds.")
    return_trace: bool = Field(
        default=False, description="Include the full solve trace in the response's conductor."
    )


class ChatCompletionRequest(OpenAIBaseModel):
    """A ``POST /v1/chat/completions`` body (the fields these servers read; others are kept).

    Validated strictly, as OpenAI's API does: ``"stream": "yes"`` or ``"n": "1"`` is a 400 naming
    the field, not silently coerced."""

    model_config = ConfigDict(strict=True)

    model: str | None = Field(default=None, description="The served model id.")
    messages: list[ChatMessage] = Field(min_length=1, description="The conversation.")
    stream: bool = Field(default=False, description="Answer as server-sent events.")
    stream_options: StreamOptions | None = None
    n: int = Field(default=1, ge=1, le=128, description="Number of choices.")
    seed: int | None = Field(default=None, ge=0, le=MAX_SAMPLE_INDEX)
    sample_index: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SAMPLE_INDEX,
        description="Extension: which sample of this prompt to draw (else seed, else 0).",
    )
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    conductor: ConductorOptions | None = Field(
        default=None, description="Extension (gateway): per-request solve options."
    )

    @property
    def sample(self) -> int:
        """The sample index: ``sample_index``, else ``seed``, else 0."""
        if self.sample_index is not None:
            return self.sample_index
        return self.seed if self.seed is not None else 0

    @property
    def sample_given(self) -> bool:
        """True when the request names a sample (``sample_index`` or ``seed``)."""
        return self.sample_index is not None or self.seed is not None

    @property
    def token_limit(self) -> int | None:
        """``max_tokens``, else ``max_completion_tokens``."""
        return self.max_tokens if self.max_tokens is not None else self.max_completion_tokens


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc)


def parse_chat_request(raw: bytes | str) -> ChatCompletionRequest:
    """Validate a chat-completions body.

    Raises:
        RequestError: 400 when the body is not JSON, not an object, or a field is invalid; the
            message names every invalid field and ``param`` the first.
    """
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise RequestError(400, "request body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        errors = exc.errors()
        parts = []
        for err in errors:
            msg = str(err["msg"]).removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                msg = "unknown field; remove it or check its spelling"
            parts.append(f"{_loc(err['loc']) or '(body)'}: {msg}")
        param = (_loc(errors[0]["loc"]) or None) if errors else None
        raise RequestError(400, "; ".join(parts), param=param) from None


# -- responses ------------------------------------------------------------------------------------


def completion_id() -> str:
    """A fresh ``chatcmpl-...`` id."""
    return f"chatcmpl-{uuid.uuid4().hex[:24]}"


class UsageInfo(OpenAIBaseModel):
    """Token usage of a completion."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    @classmethod
    def of(cls, prompt_tokens: int, completion_tokens: int) -> UsageInfo:
        """Usage with the total filled in."""
        return cls(
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
        )


class AssistantMessage(OpenAIBaseModel):
    """The message of a response choice."""

    role: Literal["assistant"] = "assistant"
    content: str | None = None


class ChatCompletionChoice(OpenAIBaseModel):
    """One choice of a chat completion."""

    index: int
    message: AssistantMessage
    finish_reason: str | None = "stop"
    logprobs: Any = None


class ChatCompletionResponse(OpenAIBaseModel):
    """A ``chat.completion`` object; ``conductor`` is the gateway's extension (omitted if None)."""

    omit_if_none: ClassVar[frozenset[str]] = frozenset({"conductor"})

    id: str = Field(default_factory=completion_id)
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatCompletionChoice]
    usage: UsageInfo
    conductor: dict[str, Any] | None = Field(
        default=None, description="Gateway extension: workflow summary (and trace if asked)."
    )


class DeltaMessage(OpenAIBaseModel):
    """The delta of a streamed choice."""

    omit_if_none: ClassVar[frozenset[str]] = frozenset({"role", "content"})

    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatCompletionStreamChoice(OpenAIBaseModel):
    """One choice of a streamed chunk."""

    index: int = 0
    delta: DeltaMessage = Field(default_factory=DeltaMessage)
    finish_reason: str | None = None
    logprobs: Any = None

    def to_json(self) -> dict[str, Any]:
        """The wire dict (the delta without its None keys)."""
        data = super().to_json()
        data["delta"] = self.delta.to_json()
        return data


class ConductorEvent(BaseModel):
    """The gateway's streamed workflow event (the ``conductor`` field of a chunk).

    ``type`` is one of ``plan_start`` (round), ``plan`` (round, plan, raw, error),
    ``step_start`` (index, worker, model, visible), ``step_end`` (index, worker, model, response,
    tokens, cost, latency, error), ``step_skipped`` (index, reason) and ``workflow_end`` (round
    answered, stopped); ``data`` carries those fields.
    """

    type: str
    round: int = 0
    data: dict[str, Any] = Field(default_factory=dict)


class ChatCompletionChunk(OpenAIBaseModel):
    """A ``chat.completion.chunk``; ``conductor`` is the gateway's event extension."""

    omit_if_none: ClassVar[frozenset[str]] = frozenset({"conductor", "usage"})

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatCompletionStreamChoice] = Field(default_factory=list)
    usage: UsageInfo | None = None
    conductor: ConductorEvent | None = None

    def to_json(self) -> dict[str, Any]:
        """The wire dict (choices' deltas without their None keys)."""
        data = super().to_json()
        data["choices"] = [c.to_json() for c in self.choices]
        return data


class ModelCard(OpenAIBaseModel):
    """One entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "conductor"


class ModelList(OpenAIBaseModel):
    """The ``GET /v1/models`` body."""

    object: Literal["list"] = "list"
    data: list[ModelCard] = Field(default_factory=list)
