"""Parse raw Conductor output into a :class:`~conductor_core.workflow.model.Workflow`.

The Conductor reasons freely and then writes three lists::

    model_id = [2, 0]
    subtasks = ["Solve the problem.", "Check the solution above and fix any error."]
    access_list = [[], ["all"]]

:func:`parse_plan` turns such text into a workflow or raises :class:`PlanFormatError` with a
stable reason code; it never raises anything else, whatever the input. What it accepts:

* reasoning in ``<think>...</think>`` blocks is ignored (also a ``</think>`` without an opening
  tag, which means everything before it was reasoning, and an unclosed ``<think>`` block, which
  runs to the end of the text); code fences around the lists are ignored;
* the LAST complete occurrence of each list counts, so reasoning that mentions the format before
  the real plan does not fool it; keys may be written ``model_id = [...]``, ``model_id: [...]``
  or JSON-style ``"model_id": [...]``;
* list literals are read with a small tokenizer that respects string literals (a ``]`` inside a
  subtask does not end the list), accepts smart quotes and apostrophes in single-quoted strings,
  then evaluated with :func:`ast.literal_eval` only (never ``eval``); trailing commas are fine.

Inputs are capped (the last :data:`MAX_SCAN_CHARS` characters are read, lists nest at most
:data:`MAX_DEPTH` deep), so adversarial text cannot make parsing slow or recurse deeply.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from collections.abc import Collection, Iterator
from dataclasses import dataclass

from conductor_core.workflow.errors import FormatErrorCode, PlanFormatError
from conductor_core.workflow.model import (
    ALL,
    AccessMode,
    OfferedWorkers,
    Step,
    Workflow,
    describe_ids,
    offered_ids,
)

__all__ = [
    "KEYS",
    "MAX_DEPTH",
    "MAX_SCAN_CHARS",
    "check_offered",
    "parse_plan",
    "strip_reasoning",
    "try_parse_plan",
]

MAX_SCAN_CHARS = 200_000
"""Only the last this-many characters of the output are read (the plan comes last)."""

MAX_DEPTH = 32
"""Deepest bracket nesting accepted inside one list."""

MAX_CANDIDATES = 64
"""How many occurrences of one key are tried, from the last one backwards."""

SCAN_BUDGET = 400_000
"""Most tokens read while looking for one key's list (all its occurrences together)."""

_SQ_WINDOW = 2_000
"""How far ahead a single-quoted string looks for a closing quote followed by ``,`` or ``]``."""

KEYS: tuple[str, str, str] = ("model_id", "subtasks", "access_list")

_OPEN_THINK = re.compile(r"<\s*think\s*>", re.IGNORECASE)
_CLOSE_THINK = re.compile(r"<\s*/\s*think\s*>", re.IGNORECASE)
_FENCE_LINE = re.compile(r"^[ \t]*(?:```|~~~)[^\n`]*$", re.MULTILINE)
_QUOTE_CHARS = "\"'“”‘’`*"
_KEY_RE = re.compile(
    r"(?<![\w$])["
    + _QUOTE_CHARS
    + r"]{0,3}(model_id|subtasks|access_list)["
    + _QUOTE_CHARS
    + r"]{0,3}"
    r"(?:[ \t]*:[ \t]*(?:list|List)\[[^\]\n]{0,40}\])?"
    r"\s*[:=]\s*(?=\[)"
)
# One token of a list literal: a run of plain characters, a bracket, a quote or a comment.
_PLAIN_RUN = re.compile(r"[^\[\]\(\)\{\}\"'“”‘’#\\]+")
_DQ_BODY = re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.DOTALL)
_SQ_STRICT_BODY = re.compile(r"[^'\\]*(?:\\.[^'\\]*)*", re.DOTALL)
_SQ_CLOSER = re.compile(r"'(?=\s*[,\]\)}:#])")
_RSQ_CLOSER = re.compile(r"’(?=\s*[,\]\)}:#])")
_RDQ_CLOSER = re.compile(r'[”"]')
_ANY_SQ_CLOSER = re.compile(r"[’']")
_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|x[0-9a-fA-F]{2}|.)", re.DOTALL)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "0": "\0"}


def strip_reasoning(text: str) -> str:
    """Remove ``<think>`` reasoning and code-fence lines from Conductor output.

    Complete ``<think>...</think>`` blocks are removed; a ``</think>`` without a matching opening
    tag drops everything before it; an unclosed ``<think>`` drops everything after it. Only the
    last :data:`MAX_SCAN_CHARS` characters are kept.
    """
    if len(text) > MAX_SCAN_CHARS:
        text = text[-MAX_SCAN_CHARS:]
    opens = [(m.start(), m.end()) for m in _OPEN_THINK.finditer(text)]
    closes = [(m.start(), m.end()) for m in _CLOSE_THINK.finditer(text)]
    pieces: list[str] = []
    pos = i = j = 0
    while True:
        while i < len(opens) and opens[i][0] < pos:
            i += 1
        while j < len(closes) and closes[j][0] < pos:
            j += 1
        opening = opens[i] if i < len(opens) else None
        closing = closes[j] if j < len(closes) else None
        if closing is not None and (opening is None or closing[0] < opening[0]):
            # A stray closing tag: everything before it was reasoning.
            pieces.clear()
            pos = closing[1]
            continue
        if opening is None:
            pieces.append(text[pos:])
            break
        pieces.append(text[pos : opening[0]])
        while j < len(closes) and closes[j][0] < opening[1]:
            j += 1
        if j == len(closes):
            break  # an unclosed think block runs to the end of the text
        pos = closes[j][1]
    return _FENCE_LINE.sub("", "".join(pieces))


# ---------------------------------------------------------------------------------------------
# Finding and reading the lists


@dataclass(frozen=True)
class _Span:
    """One complete list literal: where its key starts, where the list starts and ends."""

    key_start: int
    start: int
    end: int
    too_deep: bool = False


class _TooDeep(Exception):
    """The list nests deeper than MAX_DEPTH."""


class _OutOfBudget(Exception):
    """Scanning used up its token budget (adversarial input)."""


def _decode_escapes(body: str) -> str:
    """Undo backslash escapes in a string body that Python's own parser rejected."""

    def repl(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc[0] in "ux" and len(esc) > 1:
            return chr(int(esc[1:], 16))
        return _SIMPLE_ESCAPES.get(esc, esc)

    return _ESCAPE.sub(repl, body)


def _string_value(quote: str, body: str) -> str:
    """The value of a string literal with delimiter ``quote`` and raw ``body``."""
    if quote in "\"'":
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = ast.literal_eval(quote + body + quote)
            if isinstance(value, str):
                return value
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            pass
    return _decode_escapes(body)


def _read_string(text: str, pos: int, lenient: bool, build: bool) -> tuple[str | None, int] | None:
    """Read the string literal whose opening quote is at ``pos``.

    Returns (value, position after the closing quote), the value only when ``build``; ``None``
    when the string is not closed before the end of the text.
    """
    end = len(text)
    quote = text[pos]
    start = pos + 1
    if quote in "\"'":
        if quote == "'" and lenient:
            # Lenient: the first quote followed by , or ] closes (so "Don't" may appear inside).
            m = _SQ_CLOSER.search(text, start, min(end, start + _SQ_WINDOW))
            if m is not None:
                body = text[start : m.start()]
                return (_string_value("'", body) if build else None), m.end()
        body_re = _DQ_BODY if quote == '"' else _SQ_STRICT_BODY
        m = body_re.match(text, start)
        close = m.end() if m else start
        if close >= end or text[close] != quote:
            return None
        body = text[start:close]
        return (_string_value(quote, body) if build else None), close + 1
    if quote in "“”":
        m = _RDQ_CLOSER.search(text, start)
    else:
        # Smart single quotes: an apostrophe inside is usually the same character as the closer.
        m = _RSQ_CLOSER.search(text, start, min(end, start + _SQ_WINDOW))
        if m is None:
            m = _ANY_SQ_CLOSER.search(text, start)
    if m is None:
        return None
    body = text[start : m.start()]
    return (_decode_escapes(body) if build else None), m.end()


def _scan_list(
    text: str, start: int, *, lenient: bool, build: bool, budget: list[int]
) -> tuple[int, str] | None:
    """Scan the list literal opening at ``text[start] == "["``.

    Returns (end position, canonical source) or ``None`` when the list is not closed. With
    ``build`` the source has every string literal rewritten as a JSON string (valid Python) and
    comments dropped; it is ``""`` for mismatched brackets. Raises :class:`_TooDeep` past
    :data:`MAX_DEPTH` and :class:`_OutOfBudget` when ``budget[0]`` tokens are used up.
    """
    end = len(text)
    out: list[str] = []
    depth = 0
    pos = start
    while pos < end:
        budget[0] -= 1
        if budget[0] < 0:
            raise _OutOfBudget
        ch = text[pos]
        if ch in "[({":
            depth += 1
            if depth > MAX_DEPTH:
                raise _TooDeep
            out.append(ch)
            pos += 1
        elif ch in "])}":
            depth -= 1
            out.append(ch)
            pos += 1
            if depth <= 0:
                return pos, "".join(out) if ch == "]" and depth == 0 and build else ""
        elif ch in "\"'“”‘’":
            read = _read_string(text, pos, lenient, build)
            if read is None:
                return None
            value, pos = read
            if build:
                out.append(json.dumps(value, ensure_ascii=False))
        elif ch == "#":
            newline = text.find("\n", pos)
            pos = end if newline == -1 else newline
        elif ch == "\\":
            out.append(" ")  # a stray backslash (line continuation) is not part of a literal
            pos += 1
        else:
            m = _PLAIN_RUN.match(text, pos)
            run_end = m.end() if m else pos + 1
            if build:
                out.append(text[pos:run_end])
            pos = run_end
    return None


def _candidates(text: str, key: str) -> list[tuple[int, int]]:
    """(key start, list start) of every occurrence of ``key``, last first, capped."""
    found = [(m.start(), m.end()) for m in _KEY_RE.finditer(text) if m.group(1) == key]
    return found[::-1][:MAX_CANDIDATES]


def _complete_spans(text: str, key: str) -> Iterator[_Span]:
    """Complete occurrences of ``key``'s list, last first."""
    budget = [SCAN_BUDGET]
    for key_start, start in _candidates(text, key):
        scanned = None
        try:
            for lenient in (False, True):
                scanned = _scan_list(text, start, lenient=lenient, build=False, budget=budget)
                if scanned is not None:
                    break
        except _TooDeep:
            yield _Span(key_start, start, start + 1, too_deep=True)
            continue
        except _OutOfBudget:
            return
        if scanned is not None:
            yield _Span(key_start, start, scanned[0])


def _evaluate(text: str, span: _Span, key: str, budget: list[int] | None = None) -> list:
    """The Python value of the list at ``span``; :class:`PlanFormatError` when unreadable.

    ``budget`` (tokens, shared between calls) bounds the work; by default each call gets
    :data:`SCAN_BUDGET` per reading.
    """
    if span.too_deep:
        raise PlanFormatError(
            FormatErrorCode.UNPARSABLE_LITERAL,
            f"the {key} list nests more than {MAX_DEPTH} levels deep; write it like "
            f"{_example(key)}",
        )
    sources: list[str] = []
    for lenient in (False, True):
        try:
            scanned = _scan_list(
                text,
                span.start,
                lenient=lenient,
                build=True,
                budget=budget if budget is not None else [SCAN_BUDGET],
            )
        except (_TooDeep, _OutOfBudget):
            continue
        if scanned is not None and scanned[1] and scanned[1] not in sources:
            sources.append(scanned[1])
    for source in sources:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                value = ast.literal_eval(source)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
        if isinstance(value, list):
            return value
    snippet = text[span.start : min(span.end, span.start + 60)].replace("\n", " ")
    raise PlanFormatError(
        FormatErrorCode.UNPARSABLE_LITERAL,
        f"the {key} list is not a valid Python/JSON literal ({snippet!r}); write it like "
        f"{_example(key)}",
    )


def _example(key: str) -> str:
    return {
        "model_id": "model_id = [0, 2]",
        "subtasks": 'subtasks = ["Solve it.", "Check the answer above."]',
        "access_list": 'access_list = [[], ["all"]]',
    }[key]


def _locate(text: str) -> dict[str, _Span]:
    """The chosen (last complete) occurrence of each list that exists.

    An occurrence whose key lies inside another chosen list (for example ``model_id = [1]``
    quoted inside a subtask) is skipped in favour of an earlier one, and so is one quoted
    inside a readable earlier list of the same key (``subtasks = [...]`` inside a subtask).
    """
    options = {key: _drop_quoted(text, key, list(_complete_spans(text, key))) for key in KEYS}
    chosen = {key: 0 for key in KEYS if options[key]}
    for _ in range(len(KEYS) * MAX_CANDIDATES):
        changed = False
        for key in list(chosen):
            span = options[key][chosen[key]]
            inside = any(
                other != key and _contains(options[other][idx], span.key_start)
                for other, idx in chosen.items()
            )
            if inside:
                if chosen[key] + 1 < len(options[key]):
                    chosen[key] += 1
                else:
                    del chosen[key]
                changed = True
                break
        if not changed:
            break
    return {key: options[key][idx] for key, idx in chosen.items()}


def _drop_quoted(text: str, key: str, spans: list[_Span]) -> list[_Span]:
    """Drop the occurrences (last first) that sit inside an earlier readable one of ``key``."""
    budget = [SCAN_BUDGET]
    readable: dict[int, bool] = {}

    def is_readable(span: _Span) -> bool:
        if span.start not in readable:
            try:
                _evaluate(text, span, key, budget)
                readable[span.start] = True
            except PlanFormatError:
                readable[span.start] = False
        return readable[span.start]

    kept: list[_Span] = []
    for n, span in enumerate(spans):
        enclosing = [e for e in spans[n + 1 :] if _contains(e, span.key_start)]
        if any(is_readable(e) for e in enclosing[:4]):
            continue
        kept.append(span)
    return kept


def _contains(span: _Span, position: int) -> bool:
    return span.start < position < span.end


def _extract(text: str) -> dict[str, list]:
    spans = _locate(text)
    missing = [key for key in KEYS if key not in spans]
    if missing:
        names = ", ".join(missing[:-1]) + " and " + missing[-1] if len(missing) > 1 else missing[0]
        plural = "s" if len(missing) > 1 else ""
        hint = ""
        if not text.strip():
            hint = " (no text is left outside <think> reasoning)"
        raise PlanFormatError(
            FormatErrorCode.MISSING_LIST,
            f"no complete {names} list{plural} found{hint}; end the output with the three lists "
            f"model_id = [...], subtasks = [...], access_list = [...]",
        )
    return {key: _evaluate(text, spans[key], key) for key in KEYS}


# ---------------------------------------------------------------------------------------------
# Validation


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_worker(i: int, value: object, offered: Collection[int] | None) -> int:
    if not _is_int(value):
        raise PlanFormatError(
            FormatErrorCode.BAD_WORKER_ID,
            f"step {i} has model id {_short(value)}, which is not an integer; write model numbers "
            f"like model_id = [0, 2]",
        )
    assert isinstance(value, int)
    if value < 0:
        raise PlanFormatError(
            FormatErrorCode.UNKNOWN_WORKER,
            f"step {i} uses model {value}; model numbers start at 0",
        )
    if offered is not None and value not in offered:
        available = (
            f"the only offered model is {next(iter(offered))}"
            if len(offered) == 1
            else f"the offered models are {describe_ids(offered)}"
        )
        raise PlanFormatError(
            FormatErrorCode.UNKNOWN_WORKER,
            f"step {i} uses model {value}, which is not offered; {available}",
        )
    return value


def check_offered(workflow: Workflow, workers: OfferedWorkers) -> None:
    """Raise the parser's ``PlanFormatError`` (``unknown_worker``) for the first step of
    ``workflow`` that names a worker ``workers`` does not offer: the same check and words as
    :func:`parse_plan`, for plans built without parsing (scripted and fixed plan sources)."""
    offered = frozenset(offered_ids(workers))
    for i, worker in enumerate(workflow.worker_ids()):
        _check_worker(i, worker, offered)


def _check_subtask(i: int, value: object) -> str:
    if not isinstance(value, str):
        raise PlanFormatError(
            FormatErrorCode.BAD_SUBTASK,
            f"step {i} has subtask {_short(value)}, which is not a string; write each subtask as "
            f"a quoted instruction",
        )
    if not value.strip():
        raise PlanFormatError(
            FormatErrorCode.BAD_SUBTASK,
            f"step {i} has an empty subtask; tell the model what to do in that step",
        )
    return value


def _is_all(value: object) -> bool:
    return isinstance(value, str) and value.strip().lower() == ALL


def _check_access(i: int, value: object, mode: AccessMode) -> str | tuple[int, ...]:
    if not isinstance(value, list | tuple):
        raise PlanFormatError(
            FormatErrorCode.BAD_ACCESS_ENTRY,
            f'step {i} has access {_short(value)}, which is not a list; write ["all"] or []',
        )
    entries = list(value)
    if len(entries) == 1 and _is_all(entries[0]):
        return ALL
    if mode is AccessMode.BINARY:
        if not entries:
            return ()
        raise PlanFormatError(
            FormatErrorCode.BAD_ACCESS_ENTRY,
            f'step {i} has access {_short(value)}; in binary access mode each entry is ["all"] '
            f"(sees every earlier step) or [] (sees none)",
        )
    for entry in entries:
        if _is_all(entry):
            raise PlanFormatError(
                FormatErrorCode.BAD_ACCESS_ENTRY,
                f'step {i} mixes "all" with step numbers; write ["all"] alone or list steps',
            )
        if not _is_int(entry) or entry < 0:
            raise PlanFormatError(
                FormatErrorCode.BAD_ACCESS_ENTRY,
                f"step {i} has access entry {_short(entry)}; list earlier step numbers "
                f'(0-based integers) like [0, 1], or write ["all"] or []',
            )
        if entry == i:
            raise PlanFormatError(
                FormatErrorCode.SELF_REFERENCE,
                f"step {i} refers to itself; a step may only read earlier steps",
            )
        if entry > i:
            raise PlanFormatError(
                FormatErrorCode.FORWARD_REFERENCE,
                f"step {i} refers to step {entry}, which comes later; a step may only read "
                f"earlier steps",
            )
    return tuple(entries)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _validate(
    lists: dict[str, list],
    *,
    offered: Collection[int] | None,
    max_steps: int,
    access_mode: AccessMode,
    allow_empty: bool,
) -> Workflow:
    ids, subtasks, access = lists["model_id"], lists["subtasks"], lists["access_list"]
    if not len(ids) == len(subtasks) == len(access):
        raise PlanFormatError(
            FormatErrorCode.UNEQUAL_LENGTHS,
            f"model_id has {len(ids)} entries, subtasks {len(subtasks)} and access_list "
            f"{len(access)}; the three lists need one entry per step",
        )
    if not ids:
        if allow_empty:
            return Workflow(steps=(), access_mode=access_mode)
        raise PlanFormatError(
            FormatErrorCode.EMPTY_PLAN,
            "the plan has no steps; give at least one model, subtask and access entry",
        )
    if len(ids) > max_steps:
        raise PlanFormatError(
            FormatErrorCode.TOO_MANY_STEPS,
            f"the plan has {len(ids)} steps but at most {max_steps} are allowed; merge or drop "
            f"steps",
        )
    steps = []
    for i, (worker, subtask, entry) in enumerate(zip(ids, subtasks, access, strict=True)):
        steps.append(
            Step(
                worker=_check_worker(i, worker, offered),
                subtask=_check_subtask(i, subtask),
                access=_check_access(i, entry, access_mode),
            )
        )
    return Workflow(steps=tuple(steps), access_mode=access_mode)


# ---------------------------------------------------------------------------------------------
# Public API


def parse_plan(
    text: str,
    *,
    workers: OfferedWorkers | None,
    max_steps: int = 5,
    access_mode: AccessMode = AccessMode.BINARY,
    allow_empty: bool = False,
) -> Workflow:
    """Parse raw Conductor output into a workflow.

    Args:
        text: the Conductor's whole completion (reasoning and lists).
        workers: the workers offered to the Conductor, as pool ids: ``n`` for the whole pool of
            ``n`` (ids ``0..n-1``), or the offered ids (``[1, 3]``, or objects with an ``id``
            such as ``WorkerInfo``). Every model id of the plan must be one of them; ``None``
            skips that check. A malformed ``workers`` raises ``ValueError``.
        max_steps: most steps allowed.
        access_mode: ``binary`` (``["all"]`` or ``[]`` per step) or ``index`` (earlier step
            numbers, or ``["all"]``).
        allow_empty: accept three empty lists as the "keep the previous answer" plan (recursion
            rounds); the result is then ``Workflow(steps=())``.

    Raises:
        PlanFormatError: for any input that is not a valid plan (and never anything else).
    """
    if not isinstance(text, str):
        raise PlanFormatError(
            FormatErrorCode.MISSING_LIST,
            f"expected the Conductor's output as text, got {type(text).__name__}",
        )
    mode = AccessMode(access_mode)
    offered = frozenset(offered_ids(workers)) if workers is not None else None
    try:
        body = strip_reasoning(text)
        lists = _extract(body)
        return _validate(
            lists,
            offered=offered,
            max_steps=max_steps,
            access_mode=mode,
            allow_empty=allow_empty,
        )
    except PlanFormatError:
        raise
    except (RecursionError, MemoryError, OverflowError) as exc:
        raise PlanFormatError(
            FormatErrorCode.UNPARSABLE_LITERAL,
            f"the plan could not be read ({type(exc).__name__}); write three flat lists",
        ) from None


def try_parse_plan(
    text: str,
    *,
    workers: OfferedWorkers | None,
    max_steps: int = 5,
    access_mode: AccessMode = AccessMode.BINARY,
    allow_empty: bool = False,
) -> tuple[Workflow | None, PlanFormatError | None]:
    """Like :func:`parse_plan`, but return ``(workflow, None)`` or ``(None, error)``."""
    try:
        workflow = parse_plan(
            text,
            workers=workers,
            max_steps=max_steps,
            access_mode=access_mode,
            allow_empty=allow_empty,
        )
    except PlanFormatError as exc:
        return None, exc
    return workflow, None
