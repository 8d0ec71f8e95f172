"""The routing world's questions: a synthetic training set with clear surface cues per domain,
for the simulated pool.

Three domains, each with a recognisable question shape, so that a tiny Conductor can learn to
route each domain to its best simulated worker from reward alone:

* ``math``: "Calculate: ... = ?" arithmetic with an integer answer;
* ``mcq``: "Which of these numbers ...?" ending with four lettered options;
* ``freeform``: "Write the word ... backwards, letter by letter.", answered by the reversed word.

Each shape differs at its start and at its end (the compact prompt puts the question last).

The bundled copy lives in ``conductor_core/resources/train/problems.jsonl`` (with its pool,
``pool.yaml``: :func:`~conductor_core.workers.bundled.bundled_train_problems_path` and
:func:`~conductor_core.workers.bundled.bundled_train_pool_path`); :func:`synthetic_problems`
regenerates it (same seed, same problems).
"""

from __future__ import annotations

import string
from random import Random

from conductor_core.tasks.problem import Domain, Problem

__all__ = ["synthetic_problems"]

_WORDS: tuple[str, ...] = (
    "planet",
    "river",
    "garden",
    "window",
    "silver",
    "forest",
    "candle",
    "market",
    "bottle",
    "pencil",
    "rocket",
    "castle",
    "dragon",
    "island",
    "jacket",
    "ladder",
    "mirror",
    "needle",
    "orange",
    "pepper",
    "rabbit",
    "saddle",
    "ticket",
    "velvet",
    "wizard",
    "anchor",
    "basket",
    "cactus",
    "donkey",
    "engine",
    "falcon",
    "guitar",
    "hammer",
    "insect",
    "jungle",
    "kettle",
    "lemon",
    "magnet",
    "napkin",
    "oyster",
    "parrot",
    "quartz",
    "ribbon",
    "spider",
    "tomato",
    "umbrella",
    "violin",
    "walnut",
    "yogurt",
    "zipper",
)


def _math(rng: Random, i: int) -> Problem:
    a, b, c = rng.randint(2, 60), rng.randint(2, 40), rng.randint(1, 30)
    kind = rng.randrange(3)
    if kind == 0:
        question, value = f"Calculate: {a} + {b} * {c} = ?", a + b * c
    elif kind == 1:
        question, value = f"Calculate: ({a} + {b}) * {c} = ?", (a + b) * c
    else:
        question, value = f"Calculate: {a} * {b} - {c} = ?", a * b - c
    return Problem(
        id=f"train-math-{i:04d}",
        source="synthetic",
        domain=Domain.MATH,
        question=question,
        reference=str(value),
    )


def _mcq(rng: Random, i: int) -> Problem:
    values = rng.sample(range(2, 100), 4)
    largest = rng.random() < 0.5
    target = max(values) if largest else min(values)
    word = "largest" if largest else "smallest"
    options = " ".join(f"{string.ascii_uppercase[k]}) {v}" for k, v in enumerate(values))
    return Problem(
        id=f"train-mcq-{i:04d}",
        source="synthetic",
        domain=Domain.MCQ,
        question=f"Which of these numbers is the {word}? {options}",
        reference=string.ascii_uppercase[values.index(target)],
        choices=[str(v) for v in values],
    )


def _freeform(rng: Random, i: int) -> Problem:
    word = rng.choice(_WORDS)
    suffix = rng.randint(1, 9)
    token = f"{word}{suffix}"
    return Problem(
        id=f"train-freeform-{i:04d}",
        source="synthetic",
        domain=Domain.FREEFORM,
        question=f"Write the word '{token}' backwards, letter by letter.",
        reference=token[::-1],
    )


def synthetic_problems(per_domain: int = 200, *, test_fraction: float = 0.2, seed: int = 0):
    """``per_domain`` problems of each domain; ``metadata.split`` is ``train`` or ``test``.

    Questions are unique within the set (a duplicate draw is redrawn).
    """
    rng = Random(seed)
    makers = (_math, _mcq, _freeform)
    problems: list[Problem] = []
    seen: set[str] = set()
    for make in makers:
        made = 0
        attempts = 0
        while made < per_domain and attempts < per_domain * 50:
            attempts += 1
            p = make(rng, made)
            if p.question in seen:
                continue
            seen.add(p.question)
            split = "test" if made < round(per_domain * test_fraction) else "train"
            problems.append(p.model_copy(update={"metadata": {"split": split}}))
            made += 1
    return problems
