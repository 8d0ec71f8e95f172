"""Free-form grading: normalised exact match, numeric tolerance, and an optional judge.

Candidates compared with the reference: the stated answer (last ``\\boxed{}``, "the answer is
...", "final answer: ..."), then ``<answer>...</answer>`` content, then the whole answer when it
is short. A candidate matches when, after normalisation (case, punctuation, the articles a/an/the,
whitespace), it equals the reference, or when both are numbers within the tolerance
(``math.isclose`` with ``rel_tol`` 1e-6 and ``abs_tol`` 1e-9 by default).

The judge is an optional ``async judge(question, reference, answer) -> bool`` consulted only when
no rule matched. Any pool worker can back it (build the callable in the module that owns the
pool: send a prompt asking whether the answer matches the reference and parse yes/no). A judge
that raises is an infrastructure failure (``Verdict.infra_error``), not a wrong answer.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Awaitable, Callable

from conductor_core.tasks.answers import answer_is, last_boxed, strip_markup

Judge = Callable[[str, str, str], Awaitable[bool]]

REL_TOL = 1e-6
ABS_TOL = 1e-9
_SHORT = 200

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation.replace(".", "").replace("-", ""))
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_NUM = re.compile(r"^[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?$")


def normalize_text(s: str) -> str:
    """Lower-case; drop punctuation (keeping decimal points and minus signs inside tokens),
    the articles a/an/the and extra whitespace."""
    s = strip_markup(s).lower()
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    s = s.translate(_PUNCT)
    s = re.sub(r"(?<!\d)\.|\.(?!\d)", " ", s)  # periods that are not decimal points
    s = re.sub(r"(?<![\w])-(?![\d\w])", " ", s)  # dashes that are not signs or hyphens
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def parse_number(s: str) -> float | None:
    """``s`` as a float when it is a plain number (commas, $, % and units of one word aside)."""
    t = strip_markup(s).replace(",", "").replace("$", "").replace("\\%", "").rstrip("%").strip()
    parts = t.split()
    if len(parts) == 2 and _NUM.match(parts[0]) and parts[1].isalpha():
        t = parts[0]
    if _NUM.match(t):
        try:
            return float(t)
        except ValueError:
            return None
    m = re.fullmatch(r"([-+]?\d+)\s*/\s*(\d+)", t)
    if m and int(m.group(2)) != 0:
        return int(m.group(1)) / int(m.group(2))
    return None


def candidates(answer: str) -> list[str]:
    """The strings of an answer that are compared with the reference, strongest first."""
    out: list[str] = []
    for c in (last_boxed(answer), answer_is(answer)):
        if c:
            out.append(c)
    out += [m.strip() for m in _ANSWER_TAG.findall(answer)][-1:]
    if len(answer.strip()) <= _SHORT:
        out.append(answer.strip())
        lines = [ln for ln in answer.strip().splitlines() if ln.strip()]
        if lines:
            out.append(lines[-1])
    return list(dict.fromkeys(c for c in out if c.strip()))


def rule_match(
    reference: str, answer: str, *, rel_tol: float = REL_TOL, abs_tol: float = ABS_TOL
) -> tuple[bool, str, str | None]:
    """Rule-based comparison. Returns ``(matched, reason, candidate)``."""
    ref_norm = normalize_text(reference)
    ref_num = parse_number(reference)
    cands = candidates(answer)
    for cand in cands:
        if ref_norm and normalize_text(cand) == ref_norm:
            return True, "exact match after normalisation", cand
        if ref_num is not None:
            num = parse_number(cand)
            if num is not None and math.isclose(num, ref_num, rel_tol=rel_tol, abs_tol=abs_tol):
                return True, f"numeric match within rel {rel_tol:g} / abs {abs_tol:g}", cand
    if not cands:
        return False, "no answer found", None
    return False, "does not match the reference", cands[0]
