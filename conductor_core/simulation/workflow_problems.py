"""Questions of the workflow world (:mod:`.workflow_world`): difficulty you can see, and composite
questions whose parts lie in different domains.

A part is one of three shapes, each harder to look at as its difficulty ``h`` grows:

* ``math``: ``Calculate: ... = ?`` with 2, 3 or 4 integer terms;
* ``mcq``: ``Which of these numbers is the largest|smallest? P) .. Q) ..`` with 3, 4 or 6 options;
* ``freeform``: ``Write the word '...' backwards, letter by letter.`` with a word, a word and a
  digit, or two words and a digit.

A question is one part (its text alone) or two or three parts in different domains
(``Answer every part. Part 1: ... Part 2: ...``). Every part of a question has the question's
difficulty. Questions are graded as free-form: the stated answer must equal every part's answer,
in order (``12, Q, olleh``).
"""

from __future__ import annotations

from random import Random

from conductor_core.simulation.workflow_world import OPTION_LABELS, WORLD_KEY, Part, WorldQuestion
from conductor_core.tasks.problem import Domain, Problem

__all__ = ["DOMAINS", "SPLITS", "make_part", "workflow_problems"]

DOMAINS: tuple[str, ...] = ("math", "mcq", "freeform")
"""The domains a part can be in."""

SPLITS: tuple[str, ...] = ("train", "validation", "test")
"""The splits of a generated set, in ``metadata.split``."""

_WORDS: tuple[str, ...] = (
    "cat", "sun", "map", "pen", "cup", "owl", "fig", "jar", "kite", "lamp",
    "planet", "river", "garden", "window", "silver", "forest", "candle", "market",
    "rocket", "castle", "dragon", "island", "jacket", "ladder", "mirror", "pepper",
)  # fmt: skip


def _math(rng: Random, h: int) -> Part:
    terms = [rng.randint(2, 9 if h == 1 else 30) for _ in range(h + 1)]
    ops = [rng.choice("+-*") for _ in range(h)]
    text = " ".join([str(terms[0])] + [f"{op} {t}" for op, t in zip(ops, terms[1:], strict=True)])
    return Part("math", f"Calculate: {text} = ?", str(_value(terms, ops)))


def _value(terms: list[int], ops: list[str]) -> int:
    """``terms`` joined by ``ops`` (``+ - *``), products first."""
    sums = [terms[0]]
    signs = [1]
    for op, t in zip(ops, terms[1:], strict=True):
        if op == "*":
            sums[-1] *= t
        else:
            sums.append(t)
            signs.append(1 if op == "+" else -1)
    return sum(s * v for s, v in zip(signs, sums, strict=True))


def _mcq(rng: Random, h: int) -> Part:
    n = (3, 4, 6)[h - 1]
    values = rng.sample(range(2, 100), n)
    largest = rng.random() < 0.5
    target = max(values) if largest else min(values)
    options = " ".join(f"{OPTION_LABELS[k]}) {v}" for k, v in enumerate(values))
    word = "largest" if largest else "smallest"
    return Part(
        "mcq",
        f"Which of these numbers is the {word}? {options}",
        OPTION_LABELS[values.index(target)],
        options=n,
    )


def _freeform(rng: Random, h: int) -> Part:
    word = rng.choice(_WORDS[:10] if h == 1 else _WORDS)
    if h >= 2:
        word += str(rng.randint(1, 9))
    if h == 3:
        word += rng.choice(_WORDS[10:])
    return Part("freeform", f"Write the word '{word}' backwards, letter by letter.", word[::-1])


_MAKERS = {"math": _math, "mcq": _mcq, "freeform": _freeform}


def make_part(domain: str, difficulty: int, rng: Random) -> Part:
    """One part of ``domain`` at ``difficulty`` (1..3)."""
    return _MAKERS[domain](rng, difficulty)


def _question_text(parts: tuple[Part, ...]) -> str:
    if len(parts) == 1:
        return parts[0].question
    body = " ".join(f"Part {k + 1}: {p.question}" for k, p in enumerate(parts))
    return f"Answer every part. {body}"


def workflow_problems(
    n: int = 1200,
    *,
    composite_fraction: float = 0.5,
    three_part_fraction: float = 0.4,
    split_fractions: tuple[float, float, float] = (0.6, 0.2, 0.2),
    seed: int = 0,
) -> list[Problem]:
    """``n`` distinct questions of the workflow world, difficulty uniform over 1..3.

    ``composite_fraction`` of them have parts (three parts for ``three_part_fraction`` of
    those, else two), in different domains drawn uniformly. ``metadata.split`` is ``train``,
    ``validation`` or ``test`` in ``split_fractions`` (in generation order, so a split's share
    of each kind of question is the same in expectation); ``metadata.world`` describes the
    question for the simulator (:func:`~.workflow_world.world_question`).
    """
    rng = Random(seed)
    problems: list[Problem] = []
    seen: set[str] = set()
    edges = (split_fractions[0] * n, (split_fractions[0] + split_fractions[1]) * n)
    while len(problems) < n:
        difficulty = rng.randint(1, 3)
        k = 1
        if rng.random() < composite_fraction:
            k = 3 if rng.random() < three_part_fraction else 2
        domains = rng.sample(DOMAINS, k)
        parts = tuple(make_part(d, difficulty, rng) for d in domains)
        question = WorldQuestion(difficulty=difficulty, parts=parts)
        text = _question_text(parts)
        if text in seen:
            continue
        seen.add(text)
        i = len(problems)
        split = SPLITS[0] if i < edges[0] else SPLITS[1] if i < edges[1] else SPLITS[2]
        problems.append(
            Problem(
                id=f"workflow-{i:04d}",
                source="workflow-world",
                domain=Domain.FREEFORM,
                question=text,
                reference=question.reference(),
                metadata={
                    "split": split,
                    "difficulty": difficulty,
                    "parts": k,
                    WORLD_KEY: question.to_metadata(),
                },
            )
        )
    return problems
