"""Validation reports a person can read: Markdown and a self-contained HTML page."""

from __future__ import annotations

import html
import json
from typing import Any

from conductor_core.data.expectations import CheckResult, ValidationOutcome


def _example_text(examples: list[dict[str, Any]]) -> str:
    parts = []
    for e in examples:
        extra = []
        if "value" in e:
            extra.append(f"value {json.dumps(e['value'], ensure_ascii=False, default=str)}")
        if "reference" in e:
            extra.append(f"reference {json.dumps(e['reference'], ensure_ascii=False)}")
        parts.append(f"{e['id']} ({'; '.join(extra)})" if extra else str(e["id"]))
    return ", ".join(parts)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(
    outcome: ValidationOutcome, *, title: str, stats: dict[str, Any] | None = None
) -> str:
    """The report as Markdown: verdict, one table row per expectation, then stats if given."""
    verdict = "PASSED" if outcome.success else "FAILED"
    passed = sum(c.success for c in outcome.checks)
    lines = [
        f"# {title}",
        "",
        f"**Validation {verdict}**: {passed}/{len(outcome.checks)} expectations passed "
        f"on {outcome.rows} problems.",
        "",
    ]
    if not outcome.success:
        lines += ["## Failing expectations", ""]
        for c in outcome.failing:
            lines.append(f"- **[{c.suite}] {c.label}**: {c.observed}")
            if c.examples:
                lines.append(f"  - examples: {_examples_md(c)}")
        lines.append("")
    lines += [
        "## All expectations",
        "",
        "| suite | expectation | result | observed | failing examples |",
        "|---|---|---|---|---|",
    ]
    for c in outcome.checks:
        result = "pass" if c.success else "**FAIL**"
        lines.append(
            f"| {c.suite} | {_md_cell(c.label)} (`{c.expectation}`) | {result} | "
            f"{_md_cell(c.observed)} | {_examples_md(c)} |"
        )
    if stats:
        lines += ["", "## Stats", "", "```json", json.dumps(stats, indent=2), "```"]
    return "\n".join(lines) + "\n"


def _examples_md(c: CheckResult) -> str:
    return _md_cell(_example_text(c.examples)) if c.examples else ""


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:70em;color:#222}
table{border-collapse:collapse;width:100%}th,td{border:1px solid #ccc;padding:.3em .5em;
text-align:left;vertical-align:top}th{background:#f3f3f3}.pass{color:#176f2c}
.fail{color:#b00020;font-weight:bold}code{font-size:.9em}pre{background:#f7f7f7;padding:1em}
"""


def render_html(
    outcome: ValidationOutcome, *, title: str, stats: dict[str, Any] | None = None
) -> str:
    """The report as one self-contained HTML page (no scripts, inline CSS)."""
    esc = html.escape
    verdict = "PASSED" if outcome.success else "FAILED"
    cls = "pass" if outcome.success else "fail"
    passed = sum(c.success for c in outcome.checks)
    rows = []
    for c in outcome.checks:
        res = '<span class="pass">pass</span>' if c.success else '<span class="fail">FAIL</span>'
        rows.append(
            f"<tr><td>{esc(c.suite)}</td><td>{esc(c.label)}<br><code>{esc(c.expectation)}"
            f"</code></td><td>{res}</td><td>{esc(c.observed)}</td>"
            f"<td>{esc(_example_text(c.examples))}</td></tr>"
        )
    parts = [
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>',
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{esc(title)}</h1>",
        f'<p class="{cls}">Validation {verdict}: {passed}/{len(outcome.checks)} expectations '
        f"passed on {outcome.rows} problems.</p>",
    ]
    if not outcome.success:
        parts.append("<h2>Failing expectations</h2><ul>")
        for c in outcome.failing:
            ex = f"<br>examples: {esc(_example_text(c.examples))}" if c.examples else ""
            parts.append(f"<li><b>[{esc(c.suite)}] {esc(c.label)}</b>: {esc(c.observed)}{ex}</li>")
        parts.append("</ul>")
    parts += [
        "<h2>All expectations</h2><table><tr><th>suite</th><th>expectation</th><th>result</th>"
        "<th>observed</th><th>failing examples</th></tr>",
        *rows,
        "</table>",
    ]
    if stats:
        parts.append(f"<h2>Stats</h2><pre>{esc(json.dumps(stats, indent=2))}</pre>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
