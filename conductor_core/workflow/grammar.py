"""The plan grammar as a regular expression, for constrained decoding of a Conductor.

:func:`plan_regex` gives a regex that matches exactly the plans in the simplest canonical form
(what :meth:`~conductor_core.workflow.model.Workflow.render` writes, without reasoning)::

    model_id = [2, 0]
    subtasks = ["Solve the problem.", "Check the solution above and fix any error."]
    access_list = [[], ["all"]]

for the offered workers, most steps and access mode. Every string it matches is accepted by
:func:`~conductor_core.workflow.parser.parse_plan` with the same arguments (checked by property
tests): the three lists have equal length (one alternative per plan length), worker ids are the
offered pool ids (``0..n-1`` for a whole pool of ``n``, exactly ``1`` and ``3`` when those two are
offered), subtasks are non-blank double-quoted strings, and every access entry
is ``[]`` or ``["all"]`` (binary) or, in index mode, ``["all"]``, ``[]`` or strictly increasing
earlier step numbers. vLLM takes it as ``{"structured_outputs": {"regex": ...}}`` in the request
body, so that a served Conductor cannot write a malformed plan (only one cut short by
``max_tokens``).

The regex uses only what every structured-output backend understands (literals, classes,
alternation, groups, ``*``/``?``/``{m,n}``): no lookarounds, no backreferences, no ``\\s``/``\\w``
shorthands (whose meaning differs between engines). Subtask text is restricted so that it cannot
change how the rest of the output is read: no ``"`` or backslash (no escapes to get wrong), no
control characters (no newlines), no unicode surrogates, and ``<`` only when followed by a
character that cannot start a ``<think>``/``</think>`` tag (``x<3``, ``a <= b`` are fine, ``x < 3``
is not).

Engines that match UTF-8 bytes (llguidance and outlines-core, in Rust's regex syntax) reject
surrogate code points, even inside a negated class: ``utf8=True`` gives them the same grammar
without that range, which changes nothing on text they can produce (a surrogate has no UTF-8
encoding). The local transformers Conductor decodes under that form
(:mod:`conductor_core.policy.plan_mask`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from functools import lru_cache

from conductor_core.workflow.model import AccessMode, OfferedWorkers, offered_ids

__all__ = ["DEFAULT_MAX_SUBTASK_CHARS", "plan_regex", "subtask_regex"]

DEFAULT_MAX_SUBTASK_CHARS: int | None = None
"""Longest subtask (in characters) the grammar allows by default: ``None`` is unbounded."""


def _ranges(codepoints: list[int]) -> str:
    """A character-class body for sorted ``codepoints`` (as ``\\uXXXX`` escapes and ranges)."""
    out: list[str] = []
    i = 0
    while i < len(codepoints):
        j = i
        while j + 1 < len(codepoints) and codepoints[j + 1] == codepoints[j] + 1:
            j += 1
        lo, hi = codepoints[i], codepoints[j]
        out.append(_esc(lo) if lo == hi else f"{_esc(lo)}-{_esc(hi)}")
        i = j + 1
    return "".join(out)


def _esc(cp: int) -> str:
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


# Characters never allowed in a subtask: quote, backslash, '<' (handled apart), control characters
# (C0, DEL, C1 - newlines would split the plan), and the surrogate block.
_FORBIDDEN = sorted({ord('"'), ord("\\"), ord("<"), *range(0x20), *range(0x7F, 0xA0)})
_SURROGATES = "\\ud800-\\udfff"
# Whitespace by str.isspace() (what the parser's blank-subtask check uses), besides the control
# characters already forbidden: a subtask may not start with one.
_SPACES = sorted(
    cp
    for cp in range(0x10000)
    if chr(cp).isspace() and cp not in _FORBIDDEN and not 0xD800 <= cp <= 0xDFFF
)
# '<' is allowed only before a character that cannot begin a think tag (whitespace, '/', 't', 'T'
# and '<' itself may: <\s*/?\s*think\s*>), and never as the last character.
_NOT_AFTER_LT = sorted({*_FORBIDDEN, *_SPACES, ord("/"), ord("t"), ord("T")})


def _classes(utf8: bool) -> tuple[str, str, str]:
    """A subtask's first character, any later character, and ``<`` with the character after it;
    ``utf8`` leaves the surrogate range out (see the module docstring)."""
    surrogates = "" if utf8 else _SURROGATES
    first = f"[^{_ranges(sorted({*_FORBIDDEN, *_SPACES}))}{surrogates}]"
    body = f"[^{_ranges(_FORBIDDEN)}{surrogates}]"
    return first, body, f"<[^{_ranges(_NOT_AFTER_LT)}{surrogates}]"


def subtask_regex(max_chars: int | None = DEFAULT_MAX_SUBTASK_CHARS, *, utf8: bool = False) -> str:
    """A double-quoted, non-blank subtask: no leading whitespace, at most ``max_chars`` units
    (a unit is one character, or ``<`` with the character after it)."""
    if max_chars is not None and max_chars < 1:
        raise ValueError(f"max_subtask_chars must be at least 1 or None, got {max_chars}")
    first_class, body_class, lt = _classes(utf8)
    first = f"(?:{first_class}|{lt})"
    body = f"(?:{body_class}|{lt})"
    rest = "*" if max_chars is None else f"{{0,{max_chars - 1}}}"
    return f'"{first}{body}{rest}"'


def _number(values: Iterable[int]) -> str:
    """An alternation of the decimal numbers in ``values`` (longest first)."""
    items = sorted((str(v) for v in values), key=lambda s: (-len(s), s))
    return items[0] if len(items) == 1 else "(?:" + "|".join(items) + ")"


def _increasing(count: int) -> str:
    """Strictly increasing, comma-separated numbers from ``0..count-1`` (at least one)."""
    branches = []
    for first in range(count):
        tail = "".join(f"(?:, {v})?" for v in range(first + 1, count))
        branches.append(f"{first}{tail}")
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


def _access_entry(index: int, mode: AccessMode) -> str:
    """The access entry of step ``index`` (0-based)."""
    choices = [r"\[\]", r'\["all"\]']
    if mode is AccessMode.INDEX and index > 0:
        choices.append(r"\[" + _increasing(index) + r"\]")
    return "(?:" + "|".join(choices) + ")"


def _repeat(item: str, n: int) -> str:
    """``n`` copies of ``item`` separated by ``", "`` (a counted repetition, not n copies)."""
    if n == 1:
        return item
    if n == 2:
        return f"{item}, {item}"
    return f"{item}(?:, {item}){{{n - 1}}}"


def _plan_of_length(n: int, worker: str, subtask: str, mode: AccessMode) -> str:
    ids = _repeat(worker, n)
    subtasks = _repeat(subtask, n)
    if mode is AccessMode.BINARY:
        access = _repeat(_access_entry(0, mode), n)
    else:
        access = ", ".join(_access_entry(i, mode) for i in range(n))
    return rf"model_id = \[{ids}\]\nsubtasks = \[{subtasks}\]\naccess_list = \[{access}\]"


def plan_regex(
    workers: OfferedWorkers,
    max_steps: int = 5,
    access_mode: AccessMode | str = AccessMode.BINARY,
    *,
    allow_empty: bool = False,
    max_subtask_chars: int | None = DEFAULT_MAX_SUBTASK_CHARS,
    utf8: bool = False,
) -> str:
    """The regex (Python syntax, for a full match) of canonical plans.

    Args:
        workers: the offered workers as pool ids: ``n`` for the whole pool of ``n`` (ids
            ``0..n-1``), or the offered ids (``[1, 3]``, or objects with an ``id``).
        max_steps: most steps (1..``max_steps`` per plan).
        access_mode: ``binary`` or ``index``.
        allow_empty: also match three empty lists (the "keep" answer of a recursion round).
        max_subtask_chars: longest subtask, or None for unbounded. A bound guarantees that a plan
            ends within a known length (a constrained model otherwise may run into ``max_tokens``
            inside a string), at the cost of a larger automaton.
        utf8: the form for engines that match UTF-8 bytes (no surrogate range; the same plans).

    The parser is called with the same ``workers``, ``max_steps``, ``access_mode`` and
    ``allow_empty``. A malformed ``workers`` (none, a negative or repeated id) raises
    ``ValueError``.
    """
    return _plan_regex(
        tuple(sorted(offered_ids(workers))),
        int(max_steps),
        AccessMode(access_mode),
        bool(allow_empty),
        max_subtask_chars,
        bool(utf8),
    )


@lru_cache(maxsize=128)
def _plan_regex(
    ids: tuple[int, ...],
    max_steps: int,
    mode: AccessMode,
    allow_empty: bool,
    max_subtask_chars: int | None,
    utf8: bool,
) -> str:
    if max_steps < 1:
        raise ValueError(f"max_steps must be at least 1, got {max_steps}")
    worker = _number(ids)
    subtask = subtask_regex(max_subtask_chars, utf8=utf8)
    branches = [_plan_of_length(n, worker, subtask, mode) for n in range(1, max_steps + 1)]
    if allow_empty:
        branches.insert(0, r"model_id = \[\]\nsubtasks = \[\]\naccess_list = \[\]")
    pattern = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    re.compile(pattern)  # fail here, not at the server, if it were ever malformed
    return pattern


if __name__ == "__main__":  # pragma: no cover - a quick look: python -m ...grammar 3 2
    args = [int(a) for a in sys.argv[1:3]] or [3, 2]
    print(plan_regex(*args))
