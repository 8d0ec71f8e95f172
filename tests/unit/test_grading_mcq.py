"""Multiple-choice grading: many real-world answer shapes, ambiguity, option text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor_core.tasks.grading import grade
from conductor_core.tasks.grading.mcq import extract_choice
from conductor_core.tasks.problem import Problem

CHOICES = ["Berlin", "Paris", "Rome", "Madrid"]


def _p(ref: str = "C", choices: list[str] | None = None) -> Problem:
    return Problem(
        id="q1",
        source="test",
        domain="mcq",
        question="Capital of Italy?",
        reference=ref,
        choices=CHOICES if choices is None else choices,
    )


@pytest.mark.parametrize(
    "answer",
    [
        "Answer: C",
        "ANSWER: C",
        "The answer is (C).",
        "**C**",
        "(C)",
        "C)",
        "C.",
        "C",
        "the correct option is C",
        "The correct answer is: **C) Rome**",
        "\\boxed{C}",
        "$\\boxed{\\text{C}}$",
        "After comparing the options...\n\nFinal Answer: C",
        "Option A is wrong, B is wrong. The answer is C.",
        "C) Rome",
        "Rome",
        "The answer is Rome.",
        "I choose C because Rome is the capital.",
        "**Answer:** (C)",
        "Let me think. Berlin is in Germany.\n\nAnswer: C\n",
        "The answer is A... wait, no. Final answer: C",
        "The best option is [C]",
    ],
)
def test_correct_shapes(answer: str) -> None:
    v = grade(_p(), answer)
    assert v.correct, (answer, v.reason)
    assert v.extracted == "C"


@pytest.mark.parametrize(
    "answer",
    [
        "Answer: A or C",
        "The answer is A. Actually the answer is C.",
        "\\boxed{A} \\boxed{C}",
        "\\boxed{A, C}",
        "Answer: (A) and (C)",
    ],
)
def test_two_letters_asserted_is_ambiguous_and_wrong(answer: str) -> None:
    v = grade(_p(), answer)
    assert not v.correct
    assert v.reason.startswith("ambiguous"), v.reason
    assert v.extracted is None


@pytest.mark.parametrize(
    ("answer", "letter"),
    [
        ("Answer: B", "B"),
        ("Paris", "B"),
        ("\\boxed{D}", "D"),
    ],
)
def test_wrong_choice_reports_both_letters(answer: str, letter: str) -> None:
    v = grade(_p(), answer)
    assert not v.correct and v.extracted == letter
    assert f"chose {letter}" in v.reason and "reference C" in v.reason


@pytest.mark.parametrize(
    "answer",
    [
        "I don't know.",
        "the answer is a city in Europe",
        "Answer: Avogadro",
        "Answer: E",  # out of range for 4 choices
    ],
)
def test_nothing_found(answer: str) -> None:
    v = grade(_p(), answer)
    assert not v.correct and v.extracted is None


def test_ten_choice_and_no_choice_lists() -> None:
    ten = [f"opt{i}" for i in range(10)]
    assert grade(_p("J", ten), "Answer: J").correct
    assert extract_choice("Answer: E", n_choices=4)[0] is None
    no_choices = _p("B", [])
    assert grade(no_choices, "The answer is B").correct


def test_reference_given_as_option_text() -> None:
    assert grade(_p("Rome"), "Answer: C").correct


def test_similar_option_texts_do_not_collide() -> None:
    choices = ["5", "15", "50", "none of these"]
    assert grade(_p("B", choices), "15").correct
    assert grade(_p("A", choices), "5").correct
    assert grade(_p("D", choices), "The answer is none of these.").correct


# --- the answer-shape corpus: realistic model answers with a person's verdict ---------------

CORPUS_PATH = Path(__file__).resolve().parents[1] / "fixtures" / "grading" / "mcq_answers.jsonl"


def _load_corpus() -> list[dict]:
    with CORPUS_PATH.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


CORPUS = _load_corpus()


def test_corpus_is_well_formed() -> None:
    assert len(CORPUS) >= 40
    ids = [item["id"] for item in CORPUS]
    assert len(set(ids)) == len(ids)
    for item in CORPUS:
        assert set(item) >= {"id", "question", "choices", "reference", "answer", "verdict", "note"}
        assert len(item["choices"]) in (4, 10), item["id"]
        assert item["reference"] in "ABCDEFGHIJ"[: len(item["choices"])], item["id"]
        assert item["verdict"] in ("correct", "incorrect"), item["id"]
        if item["verdict"] == "correct":
            assert item["extracted"] == item["reference"], item["id"]
    verdicts = {item["verdict"] for item in CORPUS}
    assert verdicts == {"correct", "incorrect"}
    assert any(len(item["choices"]) == 10 for item in CORPUS)


@pytest.mark.parametrize("item", CORPUS, ids=[item["id"] for item in CORPUS])
def test_corpus_verdicts(item: dict) -> None:
    problem = Problem(
        id=item["id"],
        source="corpus",
        domain="mcq",
        question=item["question"],
        reference=item["reference"],
        choices=item["choices"],
    )
    v = grade(problem, item["answer"])
    assert ("correct" if v.correct else "incorrect") == item["verdict"], (item["note"], v.reason)
    assert v.extracted == item["extracted"], (item["note"], v.reason)
