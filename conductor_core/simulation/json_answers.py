"""What a simulated worker writes when it is asked for JSON (an :class:`OutputFormat`): its
answer put into a JSON value that the format accepts, drawn from the ``Random`` the caller
passes, so the same request gives the same JSON.

``json_object`` gives ``{"answer": <the answer text>}``. ``json_schema`` gives a value built from
the schema: every property of an object (required or not), ``minItems`` items of an array (at
least one), the answer text in each string (cut or padded to ``minLength``/``maxLength``), a
number within ``minimum``/``maximum``, the first choice of ``enum``/``const``, the first
non-null branch of ``anyOf``/``oneOf``, the branches of ``allOf`` merged, ``$ref`` into the
schema's own ``$defs``/``definitions`` (what pydantic's model schemas hold). Keywords it does not
know (``pattern``, ``format``, ``not``, ...) are not honoured: such a schema may get a value that
fails it, as a real model's reply may, and the gateway's check says so.
"""

from __future__ import annotations

import json
from random import Random
from typing import Any

from conductor_core.workers.types import OutputFormat

__all__ = ["json_answer", "value_for_schema"]

_MAX_DEPTH = 8
"""Below this depth only what the schema requires is built (recursive schemas end)."""

_TYPE_ORDER = ("object", "array", "string", "integer", "number", "boolean", "null")


def json_answer(output_format: OutputFormat, text: str, rng: Random) -> str:
    """``text`` (the simulated answer) as JSON in ``output_format``."""
    if output_format.type == "json_object":
        value: Any = {"answer": text}
    else:
        schema = output_format.schema or {}
        value = _Builder(schema, text, rng).build(schema, 0)
    return json.dumps(value, ensure_ascii=False)


def value_for_schema(schema: dict[str, Any], text: str, rng: Random) -> Any:
    """A JSON value for ``schema`` with ``text`` in its strings (see the module doc)."""
    return _Builder(schema, text, rng).build(schema, 0)


class _Builder:
    def __init__(self, root: dict[str, Any], text: str, rng: Random) -> None:
        self.root = root
        self.text = text.strip() or "answer"
        self.rng = rng

    def _resolve(self, ref: str) -> dict[str, Any]:
        if not ref.startswith("#"):
            return {}
        node: Any = self.root
        for part in ref.lstrip("#").strip("/").split("/"):
            if not part:
                continue
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                return {}
            node = node[part]
        return node if isinstance(node, dict) else {}

    def build(self, schema: Any, depth: int) -> Any:
        if schema is True or not isinstance(schema, dict):
            return self.text
        if "$ref" in schema and isinstance(schema["$ref"], str) and depth < 4 * _MAX_DEPTH:
            here = {k: v for k, v in schema.items() if k != "$ref"}
            merged = {**self._resolve(schema["$ref"]), **here}
            return self.build(merged, depth + 1)
        if "const" in schema:
            return schema["const"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return schema["enum"][0]
        for key in ("anyOf", "oneOf"):
            branches = schema.get(key)
            if isinstance(branches, list) and branches:
                chosen = next(
                    (b for b in branches if not (isinstance(b, dict) and b.get("type") == "null")),
                    branches[0],
                )
                rest = {k: v for k, v in schema.items() if k != key}
                if isinstance(chosen, dict):
                    rest = {**rest, **chosen}
                return self.build(rest, depth + 1)
        if isinstance(schema.get("allOf"), list):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                if isinstance(part, dict):
                    if "$ref" in part:
                        part = self._resolve(part["$ref"])
                    props = {**merged.get("properties", {}), **part.get("properties", {})}
                    required = [*merged.get("required", []), *part.get("required", [])]
                    merged = {**merged, **part, "properties": props, "required": required}
            return self.build(merged, depth + 1)
        kind = schema.get("type")
        if isinstance(kind, list):
            kinds = [k for k in _TYPE_ORDER if k in kind and k != "null"]
            kind = kinds[0] if kinds else "null"
        if kind is None:
            if "properties" in schema or "required" in schema:
                kind = "object"
            elif "items" in schema or "prefixItems" in schema:
                kind = "array"
            elif depth == 0:
                kind = "object"
            else:
                kind = "string"
        build = {
            "object": self._object,
            "array": self._array,
            "integer": self._integer,
            "number": self._number,
            "boolean": self._boolean,
            "null": self._null,
        }.get(kind, self._string)
        return build(schema, depth)

    def _object(self, schema: dict[str, Any], depth: int) -> dict[str, Any]:
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        names = list(props) if depth < _MAX_DEPTH else [n for n in props if n in required]
        out = {name: self.build(props[name], depth + 1) for name in names}
        for name in required:
            if isinstance(name, str) and name not in out:
                out[name] = self.text
        if not out and not props and depth == 0 and schema.get("additionalProperties") is not False:
            out["answer"] = self.text
        return out

    def _array(self, schema: dict[str, Any], depth: int) -> list[Any]:
        prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
        low = schema.get("minItems", 0) if isinstance(schema.get("minItems"), int) else 0
        high = schema.get("maxItems") if isinstance(schema.get("maxItems"), int) else None
        count = max(low, len(prefix), 1 if depth < _MAX_DEPTH else 0)
        if high is not None:
            count = min(count, high)
        items = schema.get("items", {})
        return [
            self.build(prefix[i] if i < len(prefix) else items, depth + 1) for i in range(count)
        ]

    def _string(self, schema: dict[str, Any], depth: int) -> str:
        text = self.text
        low = schema.get("minLength") if isinstance(schema.get("minLength"), int) else 0
        high = schema.get("maxLength") if isinstance(schema.get("maxLength"), int) else None
        if len(text) < low:
            text = text + "." * (low - len(text))
        if high is not None:
            text = text[:high]
        return text

    def _bounds(self, schema: dict[str, Any], default: tuple[float, float]) -> tuple[float, float]:
        low, high = default
        for key, exclusive in (("minimum", False), ("exclusiveMinimum", True)):
            v = schema.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool):
                low = v + (1 if exclusive else 0)
                high = max(high, low)
        for key, exclusive in (("maximum", False), ("exclusiveMaximum", True)):
            v = schema.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool):
                high = v - (1 if exclusive else 0)
                low = min(low, high)
        return low, high

    def _integer(self, schema: dict[str, Any], depth: int) -> int:
        import math

        low, high = self._bounds(schema, (0, 100))
        lo, hi = math.ceil(low), math.floor(high)
        return self.rng.randint(lo, hi) if lo <= hi else lo

    def _number(self, schema: dict[str, Any], depth: int) -> float | int:
        low, high = self._bounds(schema, (0, 100))
        value = round(low + (high - low) * self.rng.random(), 2)
        return min(max(value, low), high)

    def _boolean(self, schema: dict[str, Any], depth: int) -> bool:
        return self.rng.random() < 0.5

    def _null(self, schema: dict[str, Any], depth: int) -> None:
        return None
