"""Request and response models of the OpenAI-compatible servers (gateway and worker simulator).

The models follow OpenAI's chat-completions schema closely enough for the official ``openai``
client, with two documented extensions:

* request ``conductor`` (:class:`ConductorOptions`, gateway only): per-request solve options;
* request ``sample_index`` (both servers): which sample of a prompt to draw (else ``seed``);
* response and chunk ``conductor`` (gateway only): a summary of the workflow, its trace when asked
  for, or one streamed workflow event (:class:`ConductorEvent`).

Unknown top-level request fields are accepted and ignored (clients send many optional OpenAI
sampling parameters); unknown fields inside ``conductor`` are rejected, so a typo is a 400 naming
it. ``response_format`` (text, a JSON object, a JSON schema) is declared with its OpenAI shape
(:class:`ResponseFormat`). The OpenAI parameters that ask for something a Conductor cannot do
(tools, log probabilities, audio) are declared with their OpenAI types, so that the
gateway can refuse them by name (:data:`UNSUPPORTED_PARAMETERS`) rather than ignore them. The
fields declared are validated strictly (no coercion of ``"true"`` to a boolean or ``"5"`` to a
number), every string of the body must be encodable as UTF-8 (no lone surrogate) and every number
finite, so a request is accepted exactly when it matches the published JSON schema.

:func:`parse_chat_request` turns raw body bytes into a :class:`ChatCompletionRequest` or raises
:class:`RequestError`, which carries the HTTP status and the OpenAI error body
``{"error": {"message", "type", "param", "code"}}``. Nothing here imports a web framework.
"""

from __future__ import annotations

import json
import math
import re
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

MAX_SAMPLE_INDEX = 2**62
MAX_STOP_SEQUENCES = 4
"""OpenAI's limit on ``stop``."""
_STOP_SCHEMA = {
    "anyOf": [
        {"type": "string", "minLength": 1},
        {
            "type": "array",
            "items": {"type": "string", "minLength": 1},
            "maxItems": MAX_STOP_SEQUENCES,
        },
        {"type": "null"},
    ],
    "description": f"Up to {MAX_STOP_SEQUENCES} non-empty stop sequences.",
}
MAX_TOKENS_LIMIT = 2**31

SHOULD_RETRY_HEADER = "x-should-retry"
"""Response header of the OpenAI API that tells its SDKs whether to retry (``"false"``: don't)."""

RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""The 4xx statuses that a retry of the same request can turn into a success."""

SANE_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
"""A client's ``X-Request-ID`` the gateway echoes; any other is replaced by a fresh id."""


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
        retryable: whether sending the same request again can succeed. Default: only for the
            statuses a client retries (408, 409, 429, 5xx). A request that cannot succeed is
            answered with ``x-should-retry: false``, which the OpenAI SDKs obey, so a client does
            not pay again for an answer it cannot get.
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
        retryable: bool | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.headers = dict(headers or {})
        if retryable is None:
            retryable = status in RETRYABLE_STATUSES or status >= 500
        self.retryable = retryable
        if not retryable:
            self.headers.setdefault(SHOULD_RETRY_HEADER, "false")

    def body(self) -> dict[str, Any]:
        """The OpenAI error body of this error."""
        return error_body(self.message, self.type, param=self.param, code=self.code)


# -- requests -------------------------------------------------------------------------------------


TEXT_PART_SEPARATOR = "\n"
"""What joins the text parts of one message's content (as vLLM's OpenAI server joins them)."""

NON_TEXT_PARTS = frozenset({"image_url", "input_audio", "file", "refusal"})
"""Content-part types of OpenAI's API that carry no text this gateway can read."""

UNSUPPORTED_CODE = "unsupported_parameter"
"""Error code of a request that asks for something the server does not do."""


class FieldValueError(ValueError):
    """A validator's error that names a place below the field it validates (``suffix``, e.g. the
    part of a content list) and optionally an error ``code``; :func:`parse_chat_request` adds
    both to the error it raises."""

    def __init__(
        self, message: str, *, suffix: tuple[str | int, ...] = (), code: str | None = None
    ) -> None:
        super().__init__(message)
        self.suffix = suffix
        self.code = code


def _short(value: Any, limit: int = 40) -> str:
    """A client's value for an error message: a string's repr cut to ``limit`` characters, else
    its JSON type (never the repr of a structure, which may be huge or deeply nested)."""
    if isinstance(value, str):
        text = repr(value)
        return text if len(text) <= limit else text[: limit - 3] + "..."
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "a number", float: "a number", list: "an array"}
    return names.get(type(value), "an object")


def flatten_content(content: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content parts
    (``{"type": "text", "text": ...}``) joined with :data:`TEXT_PART_SEPARATOR`.

    Raises:
        FieldValueError: the content is neither; a part is not an object, has no ``type``
            ``"text"`` or no string ``text`` (``suffix`` names the part); a part of a non-text
            type of OpenAI's API (an image, audio, a file) has the code ``unsupported_parameter``:
            refused, since ignoring it would answer another question than the one asked.
    """
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise FieldValueError("must be a string or a list of content parts")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise FieldValueError(
                "a content part must be an object {'type': 'text', 'text': ...}", suffix=(j,)
            )
        kind = part.get("type")
        if kind != "text":
            if isinstance(kind, str) and kind in NON_TEXT_PARTS:  # a dict is not hashable
                raise FieldValueError(
                    f"content parts of type {kind!r} are not supported: the Conductor reads "
                    "text only; send the content as text parts",
                    suffix=(j, "type"),
                    code=UNSUPPORTED_CODE,
                )
            raise FieldValueError(f"must be 'text', got {_short(kind)}", suffix=(j, "type"))
        text = part.get("text")
        if not isinstance(text, str):
            raise FieldValueError("must be a string", suffix=(j, "text"))
        texts.append(text)
    return TEXT_PART_SEPARATOR.join(texts)


_CONTENT_SCHEMA = {
    "anyOf": [
        {"type": "string"},
        {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"type": {"const": "text"}, "text": {"type": "string"}},
                "required": ["type", "text"],
            },
        },
    ],
    "description": "A string or a list of text parts (joined with a newline).",
}


Role = Literal["system", "developer", "user", "assistant", "tool", "function"]
"""The roles of OpenAI's chat messages (another role is a 400 naming the message)."""


def _assistant_content_may_be_null(schema: dict[str, Any]) -> None:
    """The published schema of a message: content null only in an assistant turn."""
    content = schema["properties"]["content"]
    content["anyOf"] = [*content.get("anyOf", []), _NULL]
    schema["if"] = {"properties": {"content": _NULL}, "required": ["content"]}
    schema["then"] = {"properties": {"role": {"const": "assistant"}}}


_NULL = {"type": "null"}


class ChatMessage(OpenAIBaseModel):
    """One chat message; list-of-parts content is flattened to its text."""

    role: Role = Field(description="system, developer, user, assistant, tool or function.")
    content: Annotated[str, WithJsonSchema(_CONTENT_SCHEMA, mode="validation")] = Field(
        description="The text (the text parts of a content-part list, joined with a newline); "
        "an assistant turn may send null (read as empty), as OpenAI's API allows."
    )

    model_config = ConfigDict(json_schema_extra=_assistant_content_may_be_null)

    @field_validator("content", mode="before")
    @classmethod
    def _flatten(cls, value: Any, info: ValidationInfo) -> str:
        # OpenAI's API lets an assistant turn carry content null; clients replaying a history
        # send it so. Any other role still needs its text.
        if value is None and info.data.get("role") == "assistant":
            return ""
        return flatten_content(value)


class StreamOptions(OpenAIBaseModel):
    """OpenAI ``stream_options``."""

    model_config = ConfigDict(strict=True)

    include_usage: bool = Field(
        default=False, description="Send a last chunk with the usage and no choices."
    )


class BudgetOptions(BaseModel):
    """Per-request budget (each field optional; unset = the server's default). A value may only
    lower the server's limit: the gateway refuses one above it (400 naming the field)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_tokens: int | None = Field(
        default=None, ge=1, description="Worker tokens (input + output) for the whole question."
    )
    max_cost: float | None = Field(
        default=None, gt=0, allow_inf_nan=False, description="Dollars of worker calls."
    )
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Wall-clock seconds; steps not started by then are skipped.",
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
        default=None,
        ge=1,
        description="Conductor rounds (2+ = recursive refinement); at most the server's "
        "max_rounds_limit.",
    )
    max_steps: int | None = Field(
        default=None, ge=1, le=20, description="Steps per plan; at most the server's max_steps."
    )
    budget: BudgetOptions | None = Field(default=None, description="Tokens, dollars, seconds.")
    return_trace: bool = Field(
        default=False, description="Include the full solve trace in the response's conductor."
    )


SCHEMA_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
"""OpenAI's rule for ``response_format.json_schema.name``."""


class JsonSchemaFormat(OpenAIBaseModel):
    """The ``json_schema`` of a ``response_format`` of type ``json_schema``."""

    model_config = ConfigDict(strict=True, populate_by_name=True)

    name: str = Field(
        pattern=SCHEMA_NAME.pattern,
        description="The schema's name: letters, digits, '_' and '-', at most 64.",
    )
    description: str | None = Field(default=None, description="What the answer is (for the model).")
    schema_: dict[str, Any] | None = Field(
        default=None,
        alias="schema",
        description="A JSON Schema (draft 2020-12 unless it says otherwise); the answer must be "
        "valid against it. Absent: any JSON value.",
    )
    strict: bool | None = Field(
        default=None,
        description="Passed on to the workers that take it; the answer is checked against the "
        "schema either way.",
    )


def _json_schema_required(schema: dict[str, Any]) -> None:
    """The published schema of a response format: ``json_schema`` is required (non-null) when
    the type is ``json_schema``."""
    schema["if"] = {"properties": {"type": {"const": "json_schema"}}, "required": ["type"]}
    schema["then"] = {
        "required": ["json_schema"],
        "properties": {"json_schema": {"type": "object"}},
    }


class ResponseFormat(OpenAIBaseModel):
    """OpenAI ``response_format``: ``{"type": "text" | "json_object" | "json_schema", ...}``
    (``json_schema`` required with the type ``json_schema``)."""

    model_config = ConfigDict(strict=True, json_schema_extra=_json_schema_required)

    type: Literal["text", "json_object", "json_schema"] = Field(
        description="text (free text), json_object (one JSON object) or json_schema (one JSON "
        "value valid against json_schema.schema)."
    )
    json_schema: JsonSchemaFormat | None = Field(
        default=None, validate_default=True, description="Required with the type json_schema."
    )

    @field_validator("json_schema")
    @classmethod
    def _given_for_json_schema(
        cls, value: JsonSchemaFormat | None, info: ValidationInfo
    ) -> JsonSchemaFormat | None:
        if value is None and info.data.get("type") == "json_schema":
            raise ValueError("required when type is 'json_schema'")
        return value


class ChatCompletionRequest(OpenAIBaseModel):
    """A ``POST /v1/chat/completions`` body (the fields these servers read; others are kept).

    Validated strictly, as OpenAI's API does: ``"stream": "yes"`` or ``"n": "1"`` is a 400 naming
    the field, not silently coerced."""

    model_config = ConfigDict(strict=True)

    model: str | None = Field(default=None, description="The served model id.")
    messages: list[ChatMessage] = Field(min_length=1, description="The conversation.")
    stream: bool | None = Field(
        default=False, description="Answer as server-sent events (null: false)."
    )
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=1, ge=1, le=128, description="Number of choices (null: 1).")
    seed: int | None = Field(default=None, ge=0, le=MAX_SAMPLE_INDEX)
    sample_index: int | None = Field(
        default=None,
        ge=0,
        le=MAX_SAMPLE_INDEX,
        description="Extension: which sample of this prompt to draw (else seed, else 0).",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_TOKENS_LIMIT,
        description="Most tokens of the answer, counted as whitespace-separated words (an "
        "approximation); a longer answer is cut, with finish_reason 'length'.",
    )
    max_completion_tokens: int | None = Field(
        default=None, ge=1, le=MAX_TOKENS_LIMIT, description="Like max_tokens (its new name)."
    )
    # OpenAI parameters that ask for something the gateway does not do: declared with their
    # OpenAI types so that a wrong type is a 400 like any other, and refused by name by the
    # gateway (UNSUPPORTED_PARAMETERS) when they ask for anything.
    tools: list[dict[str, Any]] | None = Field(default=None, description="Not supported.")
    tool_choice: str | dict[str, Any] | None = Field(
        default=None, description="Only 'none' or 'auto' (no tools)."
    )
    functions: list[dict[str, Any]] | None = Field(default=None, description="Not supported.")
    function_call: str | dict[str, Any] | None = Field(
        default=None, description="Only 'none' or 'auto' (no functions)."
    )
    response_format: ResponseFormat | None = Field(
        default=None,
        description="The answer's form: text (default), a JSON object, or JSON valid against a "
        "schema (asked of the last step's worker, then checked: an answer that fails the check "
        "is a 502 response_format_unmet).",
    )
    logprobs: bool | None = Field(default=None, description="Only false.")
    top_logprobs: int | None = Field(default=None, ge=0, le=20, description="Not supported.")
    stop: Annotated[str | list[str] | None, WithJsonSchema(_STOP_SCHEMA, mode="validation")] = (
        Field(
            default=None,
            description="Up to 4 stop sequences: the answer ends before the first it holds "
            "(applied to the workflow's answer, streamed or not; the workers are not asked).",
        )
    )
    audio: dict[str, Any] | None = Field(default=None, description="Not supported.")
    modalities: list[Literal["text", "audio"]] | None = Field(
        default=None, description="Only 'text'."
    )
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

    @field_validator("stop")
    @classmethod
    def _stops(cls, value: str | list[str] | None) -> str | list[str] | None:
        stops = [value] if isinstance(value, str) else value or []
        if len(stops) > MAX_STOP_SEQUENCES or any(not stop for stop in stops):
            raise ValueError(f"give at most {MAX_STOP_SEQUENCES} non-empty stop sequences")
        return value

    @property
    def stop_sequences(self) -> tuple[str, ...]:
        """The request's stop sequences (none: an empty tuple)."""
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    @property
    def token_limit(self) -> int | None:
        """``max_tokens``, else ``max_completion_tokens``."""
        return self.max_tokens if self.max_tokens is not None else self.max_completion_tokens


@dataclass(frozen=True)
class UnsupportedParameter:
    """An OpenAI request parameter that the gateway refuses when it asks for anything.

    Attributes:
        name: the request field.
        allowed: whether a value asks for nothing the gateway does not do (None, false, 1, ...).
        schema: the JSON schema of those values (the gateway's OpenAPI description narrows the
            field to it, so a fuzzer's valid requests are exactly the accepted ones).
        reason: why it is refused, for the error message.
    """

    name: str
    allowed: Callable[[Any], bool]
    schema: dict[str, Any]
    reason: str


def _none_or(*values: Any) -> Callable[[Any], bool]:
    return lambda value: value is None or any(value == v and type(value) is type(v) for v in values)


_EMPTY_OR_NULL = {"anyOf": [{"type": "array", "maxItems": 0}, _NULL]}


UNSUPPORTED_PARAMETERS: tuple[UnsupportedParameter, ...] = (
    UnsupportedParameter(
        "n",
        _none_or(1),
        {"anyOf": [{"type": "integer", "minimum": 1, "maximum": 1}, _NULL]},
        "one answer per request",
    ),
    UnsupportedParameter(
        "tools", _none_or([]), _EMPTY_OR_NULL, "the workflow calls no tools of the client"
    ),
    UnsupportedParameter(
        "tool_choice",
        _none_or("none", "auto"),
        {"anyOf": [{"enum": ["none", "auto"]}, _NULL]},
        "the workflow calls no tools of the client",
    ),
    UnsupportedParameter(
        "functions",
        _none_or([]),  # [] is what LangChain and lm-eval send for "no tools"
        _EMPTY_OR_NULL,
        "the workflow calls no functions of the client",
    ),
    UnsupportedParameter(
        "function_call",
        _none_or("none", "auto"),
        {"anyOf": [{"enum": ["none", "auto"]}, _NULL]},
        "the workflow calls no functions of the client",
    ),
    UnsupportedParameter(
        "logprobs",
        _none_or(False),
        {"anyOf": [{"const": False}, _NULL]},
        "the answer is written by several models; it has no log probabilities",
    ),
    UnsupportedParameter(
        "top_logprobs",
        _none_or(),
        _NULL,
        "the answer is written by several models; it has no log probabilities",
    ),
    UnsupportedParameter("audio", _none_or(), _NULL, "the answer is text"),
    UnsupportedParameter(
        "modalities",
        lambda v: v is None or all(m == "text" for m in v),
        {"anyOf": [{"type": "array", "items": {"const": "text"}}, _NULL]},
        "the answer is text",
    ),
)
"""The parameters :func:`refuse_unsupported` checks, in the order it checks them."""


def unsupported_parameter(param: str, why: str) -> RequestError:
    """The 400 ``unsupported_parameter`` refusing ``param``, saying ``why``."""
    return RequestError(
        400,
        f"{param}: not supported by this server ({why}); omit it",
        param=param,
        code=UNSUPPORTED_CODE,
    )


def refuse_unsupported(request: ChatCompletionRequest) -> None:
    """Refuse a request that asks for an OpenAI feature the gateway does not provide, rather than
    answer it as if the parameter had not been sent.

    Raises:
        RequestError: 400 ``unsupported_parameter`` naming the first such parameter.
    """
    for item in UNSUPPORTED_PARAMETERS:
        if not item.allowed(getattr(request, item.name)):
            raise unsupported_parameter(item.name, item.reason)


def _printable(part: Any) -> str:
    """A location part as encodable text (a key holding a lone surrogate is escaped)."""
    return str(part).encode("utf-8", "backslashreplace").decode("utf-8")


def _loc(loc: tuple[Any, ...]) -> str:
    return ".".join(_printable(part) for part in loc)


def _unencodable(text: str) -> bool:
    """True when ``text`` holds a lone surrogate (it cannot be written as UTF-8)."""
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def check_values(body: Any) -> None:
    """Refuse a decoded JSON body holding a string that is not valid Unicode (a lone surrogate
    such as ``"\\ud800"``, which JSON escapes allow) or a number that is not finite
    (``Infinity``, ``NaN``, ``1e999``, which Python's parser allows), in a key or a value at any
    depth: every part of an accepted request can then be encoded, hashed and logged anywhere.

    Raises:
        RequestError: 400 naming the first such place (breadth first).
    """
    queue: deque[tuple[tuple[Any, ...], Any]] = deque([((), body)])
    while queue:
        loc, value = queue.popleft()
        problem = None
        if isinstance(value, str):
            if _unencodable(value):
                problem = "is not valid Unicode text (it holds a lone UTF-16 surrogate)"
        elif isinstance(value, float):
            if not math.isfinite(value):
                problem = "must be a finite number"
        elif isinstance(value, dict):
            for key, item in value.items():
                if _unencodable(key):
                    where = _loc((*loc, key))
                    raise RequestError(
                        400,
                        f"{where}: the field name is not valid Unicode text",
                        param=where,
                    )
                queue.append(((*loc, key), item))
        elif isinstance(value, list):
            queue.extend(((*loc, i), item) for i, item in enumerate(value))
        if problem is not None:
            where = _loc(loc) or "(body)"
            raise RequestError(400, f"{where}: {problem}", param=_loc(loc) or None)


def decode_body(raw: bytes | str) -> dict[str, Any]:
    """A request body as a JSON object.

    Raises:
        RequestError: 400 when it is not JSON (``invalid_json``) or not an object.
    """
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise RequestError(400, "request body is not valid JSON", code="invalid_json") from None
    if not isinstance(body, dict):
        raise RequestError(400, "request body must be a JSON object")
    return body


def parse_chat_request(raw: bytes | str) -> ChatCompletionRequest:
    """Validate a chat-completions body.

    Raises:
        RequestError: 400 when the body is not JSON, not an object, holds a string that is not
            valid Unicode or a number that is not finite (:func:`check_values`), or a field is
            invalid (:func:`validate_chat_request`).
    """
    body = decode_body(raw)
    check_values(body)
    return validate_chat_request(body)


def validate_chat_request(body: dict[str, Any]) -> ChatCompletionRequest:
    """A decoded chat-completions body, validated (its values already checked by
    :func:`check_values`, as :func:`parse_chat_request` and the adapted APIs do).

    Raises:
        RequestError: 400 naming every invalid field and ``param`` the first.
    """
    try:
        return ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        parts = []
        params: list[str | None] = []
        codes: list[str | None] = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            msg = str(err["msg"]).removeprefix("Value error, ")
            cause = (err.get("ctx") or {}).get("error")
            code = None
            if isinstance(cause, FieldValueError):
                loc += cause.suffix
                code = cause.code
            if err["type"] == "extra_forbidden":
                msg = "unknown field; remove it or check its spelling"
            parts.append(f"{_loc(loc) or '(body)'}: {msg}")
            params.append(_loc(loc) or None)
            codes.append(code)
        raise RequestError(
            400,
            "; ".join(parts),
            param=params[0] if params else None,
            code=codes[0] if codes else None,
        ) from None


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


class ServedModel(BaseModel):
    """The gateway's extension of its ``/v1/models`` entry: what it serves."""

    model_config = ConfigDict(json_schema_serialization_defaults_required=True)

    model_version: str | None = Field(
        default=None,
        description="The version of the Conductor model behind this id ($CONDUCTOR_MODEL_VERSION; "
        "the Helm chart sets it to the pinned source, e.g. models:/conductor/7); null when the "
        "deployment does not say.",
    )


class ModelCard(OpenAIBaseModel):
    """One entry of ``GET /v1/models``; ``conductor`` is the gateway's extension (omitted if
    None, as the worker simulator's entries have it)."""

    omit_if_none: ClassVar[frozenset[str]] = frozenset({"conductor"})

    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "conductor"
    conductor: ServedModel | None = None


class ModelList(OpenAIBaseModel):
    """The ``GET /v1/models`` body."""

    object: Literal["list"] = "list"
    data: list[ModelCard] = Field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The wire dict (the cards without their None extension)."""
        data = super().to_json()
        data["data"] = [card.to_json() for card in self.data]
        return data


# -- probes ---------------------------------------------------------------------------------------


class HealthStatus(BaseModel):
    """The ``GET /healthz`` body: the process is alive."""

    status: Literal["ok"]


class ReadinessStatus(BaseModel):
    """The ``GET /readyz`` body (200 ready, 503 not)."""

    status: Literal["ready", "not_ready"]
    checks: dict[str, str] = Field(
        description="Each check (gateway, conductor) and its result: ok..., or why not "
        "(starting, draining, unreachable (ConnectError), HTTP 503, ...)."
    )
