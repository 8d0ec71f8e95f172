"""The table the expectations run on: one row per problem, plus derived check columns.

Derived columns turn per-domain rules into plain column checks:

* ``n_choices``, ``reference_in_choices`` (mcq: the reference is a letter A.. naming a choice),
* ``n_tests`` (code: how many tests the problem carries),
* ``reference_parses`` (math: the math grader's parser reads the reference),
* ``question_length``, ``reference_length``.
"""

from __future__ import annotations

import json
import logging
import string
from collections.abc import Sequence
from typing import Any

from conductor_core.tasks.grading.math import as_number, math_verify_equal
from conductor_core.tasks.problem import Domain, Problem

COLUMNS = [
    "id",
    "source",
    "domain",
    "question",
    "reference",
    "choices",
    "tests",
    "metadata",
    "question_length",
    "reference_length",
    "n_choices",
    "reference_in_choices",
    "n_tests",
    "reference_parses",
]
"""Columns of the validation frame, in order."""


def count_tests(tests: Any) -> int:
    """Number of tests in a problem's ``tests`` field, whatever its shape.

    Lists count their items (``inputs``/``outputs`` pairs count once: the longer list of the two);
    a non-empty string (e.g. a HumanEval ``check`` function) counts as one; nested mappings are
    summed. Keys that only describe tests (``entry_point``, ``func_name``, ``prompt``, ...) do not
    count.
    """
    if isinstance(tests, str):
        return 1 if tests.strip() else 0
    if isinstance(tests, list | tuple):
        return len(tests)
    if not isinstance(tests, dict):
        return 0
    descriptive = {"entry_point", "fn_name", "func_name", "kind", "type", "prompt", "timeout"}
    total = 0
    if "inputs" in tests or "outputs" in tests:
        total += max(count_tests(tests.get("inputs", [])), count_tests(tests.get("outputs", [])))
    for key, value in tests.items():
        if key in descriptive or key in ("inputs", "outputs"):
            continue
        total += count_tests(value)
    return total


def reference_in_choices(problem: Problem) -> bool:
    """True when the reference is a letter (A, B, ...) that names one of the choices."""
    ref = problem.reference.strip().upper()
    letters = string.ascii_uppercase[: len(problem.choices)]
    return len(ref) == 1 and ref in letters


def math_reference_parses(reference: str, *, timeout_s: float = 5.0) -> bool:
    """True when the math grader can read ``reference``: an exact number for its fast path, or
    an expression that its math-verify parser reads (checked by grading it against itself)."""
    if not reference.strip():
        return False
    if as_number(reference) is not None:
        return True
    quiet = logging.getLogger("math_verify")
    if quiet.level == logging.NOTSET:  # it warns about its disabled timeouts on every process
        quiet.setLevel(logging.ERROR)
    equal, _ = math_verify_equal(reference, reference, timeout_s=timeout_s)
    return bool(equal)


def problem_row(p: Problem) -> dict[str, Any]:
    """One row of the validation frame (derived columns are None where they do not apply)."""
    return {
        "id": p.id,
        "source": p.source,
        "domain": p.domain.value,
        "question": p.question,
        "reference": p.reference,
        "choices": json.dumps(p.choices, ensure_ascii=False),
        "tests": json.dumps(p.tests, ensure_ascii=False, sort_keys=True),
        "metadata": json.dumps(p.metadata, ensure_ascii=False, sort_keys=True, default=str),
        "question_length": len(p.question),
        "reference_length": len(p.reference),
        "n_choices": len(p.choices),
        "reference_in_choices": reference_in_choices(p) if p.domain == Domain.MCQ else None,
        "n_tests": count_tests(p.tests),
        "reference_parses": (
            math_reference_parses(p.reference) if p.domain == Domain.MATH else None
        ),
    }


def problems_frame(problems: Sequence[Problem]):  # -> pandas.DataFrame
    """The validation frame of ``problems`` (a pandas DataFrame with :data:`COLUMNS`)."""
    import pandas as pd

    return pd.DataFrame([problem_row(p) for p in problems], columns=COLUMNS)
