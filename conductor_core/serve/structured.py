"""Structured output: a request's ``response_format`` as the :class:`OutputFormat` asked of the
last step's worker, and the check of the workflow's answer against it.

``json_object``: the answer must be one JSON object. ``json_schema``: one JSON value valid
against the schema (``jsonschema``, the draft the schema names, else 2020-12; ``format`` is not
checked, as JSON Schema leaves it an annotation). Before the check the answer loses the
whitespace around it and a Markdown code fence around the whole of it (what a model asked in
words often writes); the client gets that JSON text. An answer that fails the check is a 502
``response_format_unmet``, never a 200 with text that is not the asked form: the worker (the
deployment), not the request, failed.

``jsonschema`` (in the ``serve`` extra) is imported on first use. In an install without it, a
``json_schema`` format is refused with 400 ``unsupported_parameter`` saying so, and
``json_object`` still works.
"""

from __future__ import annotations

import json
import re
from typing import Any

from conductor_core.serve.protocol import UNSUPPORTED_CODE, RequestError, ResponseFormat
from conductor_core.workers.types import OutputFormat

UNMET_CODE = "response_format_unmet"
"""Error code of an answer that is not in the requested ``response_format``."""

_FENCE = re.compile(r"^```[A-Za-z0-9_-]*[ \t]*\n(.*?)\n?```$", re.DOTALL)
_MAX_DETAIL = 300


def output_format_of(response_format: ResponseFormat | None) -> OutputFormat | None:
    """The format asked of the last step's worker; None for free text (absent, ``text``).

    Raises:
        RequestError: 400 naming ``response_format.json_schema.schema`` when the schema is not
            a valid JSON Schema (a check could never pass, or pass anything).
    """
    if response_format is None or response_format.type == "text":
        return None
    if response_format.type == "json_object":
        return OutputFormat(type="json_object")
    spec = response_format.json_schema
    assert spec is not None  # the model requires it for json_schema
    if spec.schema_ is not None:
        _validator_class(spec.schema_, check=True)
    return OutputFormat(
        type="json_schema",
        schema=spec.schema_,
        name=spec.name,
        strict=spec.strict,
        description=spec.description,
    )


def _validator_class(schema: dict[str, Any], *, check: bool = False) -> Any:
    try:
        import jsonschema
    except ImportError:
        raise RequestError(
            400,
            "response_format: json_schema is not supported by this server (the gateway has no "
            "jsonschema package to check the answer with; pip install jsonschema); "
            "json_object works",
            param="response_format",
            code=UNSUPPORTED_CODE,
        ) from None

    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if check:
        try:
            cls.check_schema(schema)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(p) for p in exc.absolute_path)
            at = f" (at {where})" if where else ""
            raise RequestError(
                400,
                f"response_format.json_schema.schema: not a valid JSON Schema{at}: "
                f"{_cut(exc.message)}",
                param="response_format.json_schema.schema",
            ) from None
    return cls


def unfenced(text: str) -> str:
    """``text`` without the whitespace around it and a Markdown code fence around all of it."""
    stripped = text.strip()
    match = _FENCE.match(stripped)
    return match.group(1).strip() if match else stripped


def _cut(text: str) -> str:
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


def check_answer(text: str, output_format: OutputFormat, writer: str | None = None) -> None:
    """Check the answer ``text`` (already :func:`unfenced`) against ``output_format``.

    Raises:
        RequestError: 502 ``response_format_unmet`` (``param`` ``response_format``) saying why,
            and naming the worker that wrote it when ``writer`` is given.
    """
    problem = answer_problem(text, output_format)
    if problem is None:
        return
    by = f" written by worker {writer}" if writer else ""
    raise RequestError(
        502,
        f"the answer{by} does not match response_format ({_describe(output_format)}): "
        f"{problem}; nothing else is sent in its place",
        "server_error",
        param="response_format",
        code=UNMET_CODE,
    )


def answer_problem(text: str, output_format: OutputFormat) -> str | None:
    """Why ``text`` is not in ``output_format``; None when it is."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:
        return f"it is not JSON ({_cut(str(exc))})"
    if output_format.type == "json_object":
        return None if isinstance(value, dict) else f"it is JSON but not an object ({_kind(value)})"
    if output_format.schema is None:
        return None
    from jsonschema.exceptions import best_match

    validator = _validator_class(output_format.schema)(output_format.schema)
    try:
        error = best_match(validator.iter_errors(value))
    except Exception as exc:  # e.g. a $ref the schema cannot resolve
        return f"the schema could not be applied ({type(exc).__name__}: {_cut(str(exc))})"
    if error is None:
        return None
    where = "/".join(str(p) for p in error.absolute_path) or "(root)"
    return f"at {where}: {_cut(error.message)}"


def _kind(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _describe(output_format: OutputFormat) -> str:
    if output_format.type == "json_object":
        return "json_object"
    return f"json_schema {output_format.name!r}"
