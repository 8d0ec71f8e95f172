"""Server-sent events as the gateway writes them: each event's data is one JSON value encoded by
``json.dumps`` from real objects (never spliced together as text), so any text an answer holds
(quotes, backslashes, newlines, control characters, ``"content": "`` itself) is escaped by the
encoder and every ``data:`` line parses.

Two escapes beyond the encoder's defaults, both inside JSON strings (the only place such
characters can occur in JSON text), so the value decoded is the same:

* the characters that some clients' line splitting treats as line breaks (U+2028, U+2029 and
  U+0085, which ``str.splitlines`` splits on) are written as ``\\uXXXX``, so an event's data
  stays on one line whatever reads it;
* a string that cannot be written as UTF-8 (a lone UTF-16 surrogate, which a worker's JSON reply
  may carry as ``"\\ud800"``) is sent escaped rather than breaking the stream: the response is
  encoded as UTF-8 after this module, where a surrogate would raise mid-stream.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["DONE", "sse_data", "sse_event"]

DONE = "data: [DONE]\n\n"
"""The event that ends a chat or completions stream (OpenAI's)."""


_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}
"""Characters some line splitters break lines at, and their JSON escapes."""


def _json(payload: Any) -> str:
    """``payload`` as JSON text on one line that can be encoded as UTF-8."""
    text = json.dumps(payload, ensure_ascii=False)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate: every non-ASCII character escaped
        return json.dumps(payload)
    for char, escaped in _LINE_BREAKS.items():
        if char in text:
            text = text.replace(char, escaped)
    return text


def sse_data(payload: Any) -> str:
    """One event whose data is ``payload`` (a JSON-ready object) as JSON."""
    return f"data: {_json(payload)}\n\n"


def sse_event(kind: str, payload: Any) -> str:
    """One named event (``event: kind``) whose data is ``payload`` as JSON."""
    return f"event: {kind}\ndata: {_json(payload)}\n\n"
