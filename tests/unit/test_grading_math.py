"""Math grading: extraction shapes, quick equality, math-verify off the main thread."""

from __future__ import annotations

import threading
import time

import pytest

from conductor_core.tasks.answers import extract_final_answer, find_boxed_all, last_boxed
from conductor_core.tasks.grading import grade
from conductor_core.tasks.grading import math as gmath
from conductor_core.tasks.problem import Problem


def _p(ref: str) -> Problem:
    return Problem(id="m1", source="test", domain="math", question="q", reference=ref)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("so the result is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
        ("\\boxed{1} then later \\boxed{\\sqrt{2}+\\frac{a}{b}}", "\\sqrt{2}+\\frac{a}{b}"),
        ("\\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("\\fbox{7}", "7"),
        ("thus \\boxed 5 is it", "5"),
        ("The answer is 42.", "42"),
        ("**Final Answer:** $x = 3$", "x = 3"),
        ("The answer is: $\\boxed{12}$", "12"),
        ("We get 3 apples, then 4, then 1,250 total", "1250"),
        ("The answer is $\\frac{1}{2}$, which is half.", "\\frac{1}{2}"),
        ("So the answer is 3, since 1+2=3", "3"),
        ("no numbers here", None),
        ("", None),
    ],
)
def test_extraction_shapes(text: str, want: str | None) -> None:
    assert extract_final_answer(text) == want


def test_unbalanced_boxed_is_skipped() -> None:
    assert find_boxed_all("\\boxed{1} and \\boxed{2") == ["1"]
    assert last_boxed("nothing") is None


@pytest.mark.parametrize(
    ("ref", "answer"),
    [
        ("55", "The sum is \\boxed{55}."),
        ("\\frac{3}{4}", "\\boxed{\\dfrac{3}{4}}"),
        ("\\frac{3}{4}", "The answer is 0.75"),
        ("2400", "#### so the answer is 2,400"),
        ("10", "\\boxed{10^\\circ}"),
        ("-\\frac{1}{2}", "\\boxed{-0.5}"),
        ("\\text{(C)}", "\\boxed{\\text{(C)}}"),
    ],
)
def test_quick_or_verified_equal(ref: str, answer: str) -> None:
    v = grade(_p(ref), answer)
    assert v.correct, v.reason


@pytest.mark.parametrize(
    ("ref", "answer"),
    [
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3, \\pi/2)}"),
        ("\\sqrt{2}", "\\boxed{\\frac{2}{\\sqrt{2}}}"),
        ("x^2+2x+1", "\\boxed{(x+1)^2}"),
        ("\\frac{\\pi}{3}", "The final answer is $\\boxed{\\pi/3}$"),
    ],
)
def test_symbolic_equivalence_via_math_verify(ref: str, answer: str) -> None:
    v = grade(_p(ref), answer)
    assert v.correct, v.reason
    assert "math-verify" in v.reason


@pytest.mark.parametrize(
    ("ref", "answer"),
    [
        ("55", "\\boxed{56}"),
        ("\\frac{3}{4}", "\\boxed{\\frac{4}{3}}"),
        ("\\sqrt{2}", "\\boxed{2}"),
        ("7", "I am not sure."),
    ],
)
def test_wrong_answers(ref: str, answer: str) -> None:
    v = grade(_p(ref), answer)
    assert not v.correct
    assert v.reason


def test_no_answer_and_none() -> None:
    assert grade(_p("1"), None).reason == "no answer"
    assert not grade(_p("1"), "   ").correct


def test_math_verify_runs_off_the_main_thread() -> None:
    """math-verify with its own signal timeouts would fail here; ours must not."""
    out: list[bool] = []

    def worker() -> None:
        out.append(grade(_p("\\sqrt{2}"), "\\boxed{\\frac{2}{\\sqrt{2}}}").correct)

    t = threading.Thread(target=worker)
    t.start()
    t.join(60)
    assert out == [True]


def test_timeout_is_enforced(monkeypatch: pytest.MonkeyPatch) -> None:
    def slow(reference: str, candidate: str, full_text: str, out: dict) -> None:
        time.sleep(2)
        out["ok"] = True

    monkeypatch.setattr(gmath, "_verify_worker", slow)
    start = time.monotonic()
    equal, note = gmath.math_verify_equal("1", "2", timeout_s=0.2)
    assert equal is None and "timeout" in note
    assert time.monotonic() - start < 1.5
    v = grade(_p("\\sqrt{3}"), "\\boxed{\\sqrt{5}}", timeout_s=0.2)
    assert not v.correct and "timeout" in v.reason


def test_math_verify_error_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(reference: str, candidate: str, full_text: str, out: dict) -> None:
        out["error"] = "ValueError: bad"

    monkeypatch.setattr(gmath, "_verify_worker", boom)
    equal, note = gmath.math_verify_equal("1", "2")
    assert equal is None and "bad" in note


def test_quick_equal_normalisation() -> None:
    assert gmath.quick_equal("1,000", "1000")
    assert gmath.quick_equal("\\frac12", "0.5")
    assert gmath.quick_equal("\\$5", "5")
    assert not gmath.quick_equal("1,2", "12")
