"""Answer keys for majority voting: two answers vote together when their keys are equal."""

from __future__ import annotations

import re

from conductor_core.tasks.answers import extract_code, extract_final_answer, strip_markup
from conductor_core.tasks.problem import Domain, Problem

_SPACES = re.compile(r"\s+")
_LETTER = re.compile(r"(?:answer\s*(?:is)?\s*[:=]?\s*|\(|\b)([A-J])\b\)?", re.IGNORECASE)


def vote_key(problem: Problem, answer: str) -> str | None:
    """A normalised key of ``answer`` for ``problem``'s domain, or ``None`` when nothing is there.

    math: the extracted final answer without spaces; mcq: the last asserted choice letter; code:
    the extracted program with whitespace collapsed; freeform: lower-cased collapsed text.
    """
    if not answer or not answer.strip():
        return None
    if problem.domain is Domain.MATH:
        final = extract_final_answer(answer)
        return None if final is None else _SPACES.sub("", strip_markup(final))
    if problem.domain is Domain.MCQ:
        letters = [m.group(1).upper() for m in _LETTER.finditer(answer)]
        valid = [x for x in letters if ord(x) - 65 < max(1, len(problem.choices))]
        return valid[-1] if valid else None
    if problem.domain is Domain.CODE:
        code = extract_code(answer)
        return None if code is None else _SPACES.sub(" ", code).strip()
    return _SPACES.sub(" ", strip_markup(answer)).strip().lower()
