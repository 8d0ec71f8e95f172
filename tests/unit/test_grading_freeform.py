"""Free-form grading: normalisation, numeric tolerance, the optional judge."""

from __future__ import annotations

import asyncio

import pytest

from conductor_core.tasks.grading import agrade, grade
from conductor_core.tasks.grading.freeform import normalize_text, parse_number, rule_match
from conductor_core.tasks.problem import Problem


def _p(ref: str) -> Problem:
    return Problem(id="f1", source="test", domain="freeform", question="Who?", reference=ref)


@pytest.mark.parametrize(
    ("ref", "answer"),
    [
        ("William Shakespeare", "william shakespeare"),
        ("William Shakespeare", "The answer is William Shakespeare."),
        ("William Shakespeare", "**William Shakespeare**"),
        ("Na", "<answer>Na</answer>"),
        ("the Pacific Ocean", "Pacific ocean"),
        ("New York", "  New   York! "),
        ("300000", "300,000 km"),
        ("3.14159", "\\boxed{3.14159}"),
        ("1e-3", "0.001"),
        ("0.5", "1/2"),
        ("42", "Reasoning...\nFinal answer: 42"),
        ("50%", "50"),
    ],
)
def test_matches(ref: str, answer: str) -> None:
    v = grade(_p(ref), answer)
    assert v.correct, (ref, answer, v.reason)


@pytest.mark.parametrize(
    ("ref", "answer"),
    [
        ("William Shakespeare", "Christopher Marlowe"),
        ("300000", "300001"),
        ("1.0", "1.01"),
        ("Na", "K"),
    ],
)
def test_mismatches(ref: str, answer: str) -> None:
    assert not grade(_p(ref), answer).correct


def test_tolerances_are_configurable() -> None:
    assert rule_match("1.0", "1.0000001")[0]
    assert not rule_match("1.0", "1.001")[0]
    assert rule_match("1.0", "1.001", rel_tol=1e-2)[0]
    assert rule_match("0", "1e-12")[0]
    assert not rule_match("0", "1e-12", abs_tol=0)[0]


def test_normalisation_helpers() -> None:
    assert normalize_text("The  Quick, brown fox.") == "quick brown fox"
    assert normalize_text("-3.5") == "-3.5"
    assert parse_number("$1,234.5") == 1234.5
    assert parse_number("12 apples") == 12
    assert parse_number("twelve") is None


def test_long_answer_without_statement_is_not_matched_by_substring() -> None:
    text = "Shakespeare " + "blah " * 100
    assert not grade(_p("Shakespeare"), text).correct


def test_judge_is_asked_only_when_rules_fail() -> None:
    calls: list[tuple[str, str, str]] = []

    async def judge(question: str, reference: str, answer: str) -> bool:
        calls.append((question, reference, answer))
        return "Bard of Avon" in answer

    assert grade(_p("William Shakespeare"), "William Shakespeare", judge=judge).correct
    assert calls == []
    v = grade(_p("William Shakespeare"), "The Bard of Avon", judge=judge)
    assert v.correct and v.reason.startswith("judge") and v.details["judged"]
    assert calls == [("Who?", "William Shakespeare", "The Bard of Avon")]
    v = asyncio.run(agrade(_p("William Shakespeare"), "Marlowe", judge=judge))
    assert not v.correct and "judge" in v.reason


def test_failing_judge_is_an_infrastructure_error() -> None:
    async def judge(question: str, reference: str, answer: str) -> bool:
        raise TimeoutError("worker timed out")

    v = grade(_p("Shakespeare"), "Marlowe", judge=judge)
    assert not v.correct and v.infra_error and "worker timed out" in v.reason


def test_sync_grade_with_judge_inside_loop_points_to_agrade() -> None:
    async def judge(question: str, reference: str, answer: str) -> bool:
        return True

    async def inside() -> None:
        with pytest.raises(RuntimeError, match="agrade"):
            grade(_p("x"), "y", judge=judge)

    asyncio.run(inside())
