"""Write the values table of each chart's README from its values.yaml comments and its
values.schema.json, or check that the README is up to date.

    .venv/bin/python scripts/chart_readme.py            # rewrite charts/*/README.md's table
    .venv/bin/python scripts/chart_readme.py --check    # exit 1 naming the READMEs out of date

A README keeps its own text; only the part between the markers :data:`BEGIN` and :data:`END` is
generated (a README without them gets them appended). One row per value: its key (dotted path),
its type (from the schema, else from the default), its default (values.yaml, as JSON) and its
description (the comment lines right above the key in values.yaml).

Which keys get a row: every top-level key, and the children of a mapping when one of them has a
comment of its own (``gateway.config.max_tokens``); a mapping whose children carry no comments
(a Kubernetes object such as ``gateway.resources``) is one row whose default is the whole
object. A mapping whose children have rows gets a row of its own (without a default) only when
it has a description. A key without a comment takes the schema's ``description``; a row left
without any description is an error (the test of the README names it). ``# ---- Name ----``
banners at the top level start a section of the table. Commented-out examples
(``#  - name: ...``, ``# - item``) are not descriptions.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHARTS = ("charts/conductor", "charts/conductor-training-rbac")
BEGIN = "<!-- BEGIN values (scripts/chart_readme.py writes this part: edit values.yaml) -->"
END = "<!-- END values -->"

_KEY = re.compile(r"^(\s*)([A-Za-z][\w.-]*):(\s|$)")
_BANNER = re.compile(r"^#\s*-{3,}\s*(.*?)\s*-*\s*$")
_EXAMPLE = re.compile(r"^#(\s{2,}|\s*-\s)")  # commented-out YAML: "#  key: v", "# - item"


@dataclass
class Value:
    """One key of values.yaml as read from its lines."""

    path: tuple[str, ...]
    line: int
    comment: str
    section: str
    children: list[Value] = field(default_factory=list)


def _comment_above(lines: list[str], index: int, indent: int) -> str:
    """The comment block right above ``lines[index]`` at ``indent``, its lines joined."""
    block: list[str] = []
    i = index - 1
    while i >= 0:
        raw = lines[i]
        stripped = raw.strip()
        if not stripped.startswith("#") or len(raw) - len(raw.lstrip()) != indent:
            break
        text = stripped
        if _BANNER.match(text) or _EXAMPLE.match(text):
            break
        block.append(text[1:].strip())
        i -= 1
    return " ".join(reversed(block))


def parse_values(text: str) -> list[Value]:
    """The keys of a values.yaml (``text``) as a tree, keys inside lists left out."""
    data = yaml.safe_load(text) or {}
    lines = text.splitlines()
    roots: list[Value] = []
    stack: list[tuple[int, Value]] = []
    section = ""
    for index, line in enumerate(lines):
        banner = _BANNER.match(line)
        if banner and banner.group(1):
            section = banner.group(1)
            continue
        match = _KEY.match(line)
        if not match:
            continue
        indent = len(match.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(stack[-1][1].path if stack else ()), match.group(2))
        node: Any = data
        for part in path[:-1]:
            node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict) or path[-1] not in node:
            continue  # a key of a list item (a Kubernetes object inside a default list)
        value = Value(path, index, _comment_above(lines, index, indent), section)
        (stack[-1][1].children if stack else roots).append(value)
        stack.append((indent, value))
    return roots


def _resolve(schema: dict[str, Any], node: dict[str, Any] | None) -> dict[str, Any] | None:
    while node is not None and "$ref" in node:
        ref = node["$ref"]
        target: Any = schema
        for part in ref.removeprefix("#/").split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        node = target
    return node


def schema_at(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    """The schema node of the value at ``path`` (``$ref`` followed), or None."""
    node = _resolve(schema, schema)
    for part in path:
        if node is None:
            return None
        props = node.get("properties", {})
        if part in props:
            node = _resolve(schema, props[part])
        elif isinstance(node.get("additionalProperties"), dict):
            node = _resolve(schema, node["additionalProperties"])
        else:
            return None
    return node


_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string", list: "array"}


def type_of(node: dict[str, Any] | None, default: Any) -> str:
    """The type column: the schema's type(s), its enum, else the default's JSON type."""
    if node:
        if "enum" in node:
            return "one of " + ", ".join(json.dumps(v) for v in node["enum"])
        kinds = node.get("type")
        if kinds is None:
            kinds = [
                k
                for option in node.get("oneOf", []) + node.get("anyOf", [])
                for k in ([option["type"]] if isinstance(option.get("type"), str) else [])
                + (option.get("type") if isinstance(option.get("type"), list) else [])
            ]
        if isinstance(kinds, str):
            return kinds
        if kinds:
            return " or ".join(dict.fromkeys(kinds))
    if default is None:
        return "null"
    if isinstance(default, dict):
        return "object"
    return _JSON_TYPES.get(type(default), "string")


def _markdown(text: str) -> str:
    """``text`` safe in a table cell: pipes escaped, and outside `code` spans the characters
    Markdown would read as HTML or emphasis (``_`` inside words is not)."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = (
            parts[i]
            .replace("&", "&amp;")
            .replace("<", "&lt;")
            .replace(">", "&gt;")
            .replace("*", "\\*")
        )
    return "`".join(parts).replace("|", "\\|")


def _default(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return "`" + text.replace("|", "\\|") + "`"


@dataclass
class Row:
    key: str
    type: str
    default: str
    description: str
    section: str


def rows(values_text: str, schema: dict[str, Any]) -> list[Row]:
    """The table rows of a values.yaml, in file order; raises ValueError naming the keys that
    have no description at all."""
    data = yaml.safe_load(values_text) or {}
    out: list[Row] = []
    missing: list[str] = []

    def default_of(path: tuple[str, ...]) -> Any:
        node: Any = data
        for part in path:
            node = node[part]
        return node

    def visit(siblings: list[Value]) -> None:
        for value in siblings:
            node = schema_at(schema, value.path)
            description = value.comment or (node or {}).get("description", "")
            default = default_of(value.path)
            expand = any(child.comment for child in value.children)
            if expand and not description:
                visit(value.children)  # a group without words of its own: its keys say it
                continue
            if not description:
                missing.append(".".join(value.path))
            out.append(
                Row(
                    key=".".join(value.path),
                    type=type_of(node, default),
                    default="" if expand else _default(default),
                    description=description,
                    section=value.section,
                )
            )
            if expand:
                visit(value.children)

    visit(parse_values(values_text))
    if missing:
        raise ValueError(f"values without a description: {', '.join(missing)}")
    return out


def table(chart: Path) -> str:
    """The generated part of ``chart``'s README (between the markers, markers included)."""
    values_text = (chart / "values.yaml").read_text(encoding="utf-8")
    schema_file = chart / "values.schema.json"
    schema = json.loads(schema_file.read_text(encoding="utf-8")) if schema_file.is_file() else {}
    lines = [
        BEGIN,
        "",
        "## Values",
        "",
        "Every value, from `values.yaml` (defaults and descriptions) and `values.schema.json`",
        "(types; the schema refuses unknown keys). A row without a default is a group: its keys",
        "follow.",
    ]
    section = None
    for row in rows(values_text, schema):
        if row.section != section:
            section = row.section
            lines += ["", f"### {section or 'General'}", ""]
            lines += ["| Key | Type | Default | Description |", "|---|---|---|---|"]
        lines.append(
            f"| `{row.key}` | {_markdown(row.type)} | {row.default} | "
            f"{_markdown(row.description)} |"
        )
    lines += ["", END]
    return "\n".join(lines) + "\n"


def readme(chart: Path) -> str:
    """The README of ``chart`` with its generated part rewritten."""
    path = chart / "README.md"
    current = path.read_text(encoding="utf-8") if path.is_file() else f"# {chart.name}\n"
    generated = table(chart)
    if BEGIN in current and END in current:
        head, rest = current.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        return head + generated + (("\n" + tail) if tail else "")
    return current.rstrip("\n") + "\n\n" + generated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("charts", nargs="*", default=list(CHARTS), help="chart folders")
    args = parser.parse_args(argv)
    stale = []
    for name in args.charts:
        chart = (ROOT / name) if not Path(name).is_absolute() else Path(name)
        path = chart / "README.md"
        wanted = readme(chart)
        if path.is_file() and path.read_text(encoding="utf-8") == wanted:
            continue
        if args.check:
            stale.append(str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path))
        else:
            path.write_text(wanted, encoding="utf-8")
            print(f"wrote {path}")
    if stale:
        print(
            f"out of date: {', '.join(stale)}; run .venv/bin/python scripts/chart_readme.py",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
