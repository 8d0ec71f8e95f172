"""Answer keys for majority voting: two answers vote together when their keys are equal."""

from __future__ import annotations

import re

from conductor_core.tasks.answers import extract_code, extract_final_answer, strip_markup
from conductor_core.tasks.grading.mcq import extract_choice
from conductor_core.tasks.problem import Domain, Problem

_SPACES = re.compile(r"\s+")


def vote_key(problem: Problem, answer: str) -> str | None:
    """A normalised key of ``answer`` for ``problem``'s domain, or ``None`` when nothing is there.

    math: the extracted final answer without spaces; mcq: the letter the grader would extract
    (``None`` if ambiguous); code: the extracted program with whitespace collapsed; freeform:
    lower-cased collapsed text.
    """
    if not answer or not answer.strip():
        return None
    if problem.domain is Domain.MATH:
        final = extract_final_answer(answer)
        return None if final is None else _SPACES.sub("", strip_markup(final))
    if problem.domain is Domain.MCQ:
        return extract_choice(answer, choices=problem.choices)[0]
    if problem.domain is Domain.CODE:
        code = extract_code(answer)
        return None if code is None else _SPACES.sub(" ", code).strip()
    return _SPACES.sub(" ", strip_markup(answer)).strip().lower()
