"""The workflow world: a simulated pool where the subtasks, the steps and who reads what matter.

A generative model of one question and one worker call, written as the rules a simulated worker
follows (:class:`~conductor_core.workers.config.WorkflowRules` holds a worker's numbers):

* **A question** has a difficulty ``h`` (1, 2 or 3) and one, two or three *parts*, each in a
  domain (``math``, ``mcq``, ``freeform``) with its own answer. The answer to the question holds
  every part's answer, in part order (``The answer is 12, Q, olleh.``). The generator
  (:mod:`.workflow_problems`) makes harder questions look harder (more terms, more options,
  longer words).
* **A worker's skill.** The chance that a worker answers a part right is its skill in the
  part's domain minus ``difficulty_drop`` per level above the first (at least 0.02).
* **Subtasks are read.** A step's *scope* is part ``k`` when its subtask names it (``part 2``)
  and the question has that part, else the whole question. A single-part question has no parts
  to name: its scope is always the whole. A step *checks* when its subtask says ``check`` or
  ``verify``, else it *solves*. Nothing else in the subtask is read.
* **What a step can see** is the answers of the earlier steps in its access list (and the
  previous round's answer). An answer to part ``k`` is a line ``Part k: ...`` or, for a
  single-part question, the stated answer.
* **Solving.** For each part in its scope: if the step can see answers to it, it takes the most
  common one (a tie goes to the latest): a step that reads the parts' answers puts them
  together, and one that reads several attempts aggregates them. Otherwise it answers the part
  at its own skill.
* **Checking.** For each part in its scope, the latest answer it can see: a wrong one is found
  with ``check_skill`` (then the checker answers the part at its own skill) and otherwise kept; a
  right one is kept, except that with ``false_alarm`` the checker overturns it with a wrong one.
  A part with no answer in sight cannot be checked: the checker writes ``none`` for it.
* **Errors persist.** Within one run of a workflow a worker has its *own answer* to each part,
  right at its skill, drawn once (from the run's sample and the worker). Whenever it answers the
  part (solving, or re-answering a wrong answer it found), it gives its own answer with
  ``error_persistence`` and a fresh draw otherwise. At 1 a worker repeats its mistakes, as a
  real model does: checking itself it finds its wrong answer and writes it again, so a check
  fixes only what the checker itself gets right, and repeating a step buys nothing.
* **Output.** A step with the whole question in scope writes one ``Part k:`` line per part of a
  composite question, then the stated answer; a step scoped to part ``k`` writes only ``Part k:``
  (as a last step, that is not an answer to the question).

All draws come from the ``Random`` the caller passes (the simulated provider seeds it with the
request, so the same request gets the same answer), except the own answers, which come from
``own_key`` (the provider's is the worker, the question and the run's sample index). Wrong
answers are plausible: a nearby number, another option's letter, the word with two letters
swapped.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from random import Random
from typing import Any

from conductor_core.workers.config import SimulationProfile, WorkflowRules

__all__ = [
    "MIN_SKILL",
    "OPTION_LABELS",
    "WORLD_KEY",
    "Part",
    "StepRole",
    "WorldQuestion",
    "answer_text",
    "is_check",
    "names_part",
    "own_answer",
    "part_answers",
    "respond",
    "step_role",
    "world_question",
]

WORLD_KEY = "world"
"""The key of a workflow-world question's description in ``Problem.metadata``."""

MIN_SKILL = 0.02
"""The floor of a worker's chance of a right answer, however hard the question."""

OPTION_LABELS = "PQRSTU"
"""The labels of a multiple-choice part's options (not A, B, ...: free-form grading drops the
article "a", so an answer "A" would normalise to nothing)."""

NONE_ANSWER = "none"
"""What a checker writes for a part it had no answer to check."""

_PART_RE = re.compile(r"\bpart\s*(\d+)\b", re.IGNORECASE)
_CHECK_RE = re.compile(r"\b(check|checks|checking|verify|verifies|verification)\b", re.IGNORECASE)
_PART_LINE = re.compile(r"(?m)^Part (\d+): (.*?)\s*$")
_STATED = re.compile(r"(?m)^The answer is (.*?)\.?\s*$")


@dataclass(frozen=True)
class Part:
    """One part of a question: its domain, its text, its answer and (mcq) its option count."""

    domain: str
    question: str
    answer: str
    options: int = 0


@dataclass(frozen=True)
class WorldQuestion:
    """A workflow-world question as the simulator knows it."""

    difficulty: int
    parts: tuple[Part, ...]

    @property
    def composite(self) -> bool:
        """True when the question has more than one part."""
        return len(self.parts) > 1

    def reference(self) -> str:
        """The answer to the whole question: every part's answer, in order."""
        return ", ".join(p.answer for p in self.parts)

    def to_metadata(self) -> dict[str, Any]:
        """The description stored under :data:`WORLD_KEY` in ``Problem.metadata``."""
        return {
            "difficulty": self.difficulty,
            "parts": [
                {
                    "domain": p.domain,
                    "question": p.question,
                    "answer": p.answer,
                    "options": p.options,
                }
                for p in self.parts
            ],
        }


def world_question(metadata: dict[str, Any]) -> WorldQuestion | None:
    """The workflow-world question a problem's ``metadata`` describes, or None (another world)."""
    spec = metadata.get(WORLD_KEY)
    if not isinstance(spec, dict):
        return None
    parts = tuple(
        Part(
            domain=str(p["domain"]),
            question=str(p["question"]),
            answer=str(p["answer"]),
            options=int(p.get("options") or 0),
        )
        for p in spec.get("parts", [])
    )
    if not parts:
        return None
    return WorldQuestion(difficulty=int(spec.get("difficulty", 1)), parts=parts)


@dataclass(frozen=True)
class StepRole:
    """What a step does, read from its subtask: its scope (a part index, 0-based, or None for
    the whole question) and whether it checks."""

    part: int | None
    checks: bool


def names_part(subtask: str) -> bool:
    """True when ``subtask`` names a part (``part 2``), whatever the question."""
    return _PART_RE.search(subtask) is not None


def is_check(subtask: str) -> bool:
    """True when ``subtask`` asks for a check (``check``, ``verify``)."""
    return _CHECK_RE.search(subtask) is not None


def step_role(subtask: str, question: WorldQuestion) -> StepRole:
    """The role of a step with ``subtask`` on ``question`` (the rules of the module doc)."""
    part: int | None = None
    if question.composite:
        named = _PART_RE.search(subtask)
        if named is not None and 1 <= int(named.group(1)) <= len(question.parts):
            part = int(named.group(1)) - 1
    return StepRole(part=part, checks=is_check(subtask))


def part_answers(text: str, question: WorldQuestion) -> dict[int, str]:
    """The parts' answers a response states (0-based part index -> answer)."""
    found = {
        int(k) - 1: a for k, a in _PART_LINE.findall(text) if 1 <= int(k) <= len(question.parts)
    }
    if not question.composite and 0 not in found:
        stated = _STATED.findall(text)
        if stated:
            found[0] = stated[-1]
    return {k: a for k, a in found.items() if a != NONE_ANSWER}


def skill(profile: SimulationProfile, rules: WorkflowRules, domain: str, difficulty: int) -> float:
    """A worker's chance of answering a part of ``domain`` right at ``difficulty``."""
    base = profile.skills.get(domain, profile.default_skill)
    return max(MIN_SKILL, base - rules.difficulty_drop * (difficulty - 1))


def wrong_answer(part: Part, rng: Random) -> str:
    """A plausible wrong answer to ``part``."""
    if part.domain == "math":
        value = int(part.answer)
        return str(value + rng.choice((-10, -2, -1, 1, 2, 10)))
    if part.domain == "mcq":
        labels = OPTION_LABELS[: max(part.options, 2)]
        return rng.choice([c for c in labels if c != part.answer])
    word = part.answer
    if len(set(word)) < 2:
        return word + "x"
    while True:
        i = rng.randrange(len(word) - 1)
        swapped = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
        if swapped != word:
            return swapped


def _solve(part: Part, p_right: float, rng: Random) -> str:
    return part.answer if rng.random() < p_right else wrong_answer(part, rng)


def own_answer(part: Part, p_right: float, own_key: object, index: int) -> str:
    """A worker's own answer to part ``index`` in one run: the same for the same ``own_key``."""
    return _solve(part, p_right, Random(f"own:{own_key}:{index}"))


def _most_common(answers: Sequence[str]) -> str:
    counts = Counter(answers)
    top = max(counts.values())
    return next(a for a in reversed(answers) if counts[a] == top)  # a tie goes to the latest


def respond(
    question: WorldQuestion,
    profile: SimulationProfile,
    rules: WorkflowRules,
    subtask: str,
    visible: Sequence[str],
    rng: Random,
    own_key: object = None,
) -> str:
    """What a worker with ``profile`` and ``rules`` writes for one step (the module's rules).

    ``visible`` holds the responses the step can see, earliest first. ``own_key`` names the
    worker's run (:func:`own_answer`); None, or ``rules.error_persistence`` 0, draws every
    answer afresh.
    """

    def answer(k: int, part: Part, p_right: float) -> str:
        persist = rules.error_persistence
        if own_key is not None and persist > 0 and (persist >= 1 or rng.random() < persist):
            return own_answer(part, p_right, own_key, k)
        return _solve(part, p_right, rng)

    role = step_role(subtask, question)
    scope = range(len(question.parts)) if role.part is None else (role.part,)
    seen = [part_answers(text, question) for text in visible]
    answers: dict[int, str] = {}
    for k in scope:
        part = question.parts[k]
        p_right = skill(profile, rules, part.domain, question.difficulty)
        shown = [found[k] for found in seen if k in found]
        if role.checks:
            if not shown:
                answers[k] = NONE_ANSWER
            elif shown[-1] == part.answer:
                overturn = rng.random() < rules.false_alarm
                answers[k] = wrong_answer(part, rng) if overturn else part.answer
            elif rng.random() < rules.check_skill:
                answers[k] = answer(k, part, p_right)
            else:
                answers[k] = shown[-1]
        elif shown:
            answers[k] = _most_common(shown)
        else:
            answers[k] = answer(k, part, p_right)
    return answer_text(question, answers, whole=role.part is None)


def answer_text(question: WorldQuestion, answers: dict[int, str], *, whole: bool) -> str:
    """A response: ``Part k:`` lines (composite questions), then the stated answer (``whole``)."""
    lines = []
    if question.composite:
        lines = [f"Part {k + 1}: {a}" for k, a in sorted(answers.items())]
    if whole:
        lines.append(f"The answer is {', '.join(answers[k] for k in sorted(answers))}.")
    return "\n".join(lines)
