"""Loaders for multiple-choice benchmarks: MMLU and GPQA-Diamond."""

from __future__ import annotations

import random
from typing import Any

from conductor_core.tasks.problem import Domain, Problem
from conductor_core.tasks.sources._io import (
    BenchmarkSourceError,
    HubRef,
    column,
    hub_override,
    load_rows,
    stable_id,
)
from conductor_core.tasks.sources.local import in_part

MMLU_HUB = HubRef("cais/mmlu", "all", "test")
GPQA_HUB = HubRef("Idavidrein/gpqa", "gpqa_diamond", "train", gated=True)

LETTERS = "ABCDEFGHIJ"


def format_mcq(question: str, choices: list[str]) -> str:
    """The question followed by its lettered options, one per line."""
    lines = [question.strip(), ""]
    lines += [f"{LETTERS[i]}. {str(c).strip()}" for i, c in enumerate(choices)]
    return "\n".join(lines)


def load_mmlu(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """MMLU (cais/mmlu, config all): columns question, subject, choices (list), answer (int 0-3).

    An ``answer`` given as a letter is accepted too. Option ``subject`` keeps one subject;
    ``part`` (``train`` or ``heldout``, with ``heldout_fraction``, default 0.1) keeps one side of
    a fixed hash partition of the ids (see :func:`~conductor_core.tasks.sources.local.in_part`),
    so training and evaluation can share one split without sharing a question.
    """
    hub = hub_override(MMLU_HUB, options)
    only_subject = options.pop("subject", None)
    part = options.pop("part", None)
    fraction = options.pop("heldout_fraction", None)
    rows = load_rows(
        "mmlu", path=path, hub=hub, split=split, required=["question", "choices", "answer"]
    )
    out = []
    for i, row in enumerate(rows):
        subject = row.get("subject")
        if only_subject and subject != only_subject:
            continue
        choices = [str(c) for c in list(row["choices"])]
        answer = row["answer"]
        if isinstance(answer, str) and answer.strip().upper() in LETTERS[: len(choices)]:
            idx = LETTERS.index(answer.strip().upper())
        else:
            try:
                idx = int(answer)
            except (TypeError, ValueError) as exc:
                raise BenchmarkSourceError(
                    f"benchmark 'mmlu': row {i}: 'answer' must be an index 0-{len(choices) - 1} "
                    f"or a letter, got {answer!r}"
                ) from exc
        if not 0 <= idx < len(choices):
            raise BenchmarkSourceError(
                f"benchmark 'mmlu': row {i}: answer index {idx} out of range for "
                f"{len(choices)} choices"
            )
        question = str(row["question"])
        pid = f"mmlu/{subject or 'all'}/{stable_id(question, *choices)}"
        if not in_part(pid, part, fraction):
            continue
        out.append(
            Problem(
                id=pid,
                source="mmlu",
                domain=Domain.MCQ,
                question=format_mcq(question, choices),
                reference=LETTERS[idx],
                choices=choices,
                metadata={"subject": subject, "split": split or hub.split, "part": part},
            )
        )
    return out


def shuffle_seed(problem_id: str) -> int:
    """The deterministic shuffle seed of a problem: the first 8 bytes of sha256(id)."""
    return int(stable_id(problem_id, n=16), 16)


def load_gpqa_diamond(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """GPQA-Diamond (Idavidrein/gpqa, config gpqa_diamond; gated).

    Columns: Question, Correct Answer, Incorrect Answer 1..3, optional Record ID, Subdomain,
    High-level domain. The four options are shuffled with a seed derived from the problem id, so
    the order (and the reference letter, which follows the correct answer) is the same on every
    machine and every run.
    """
    hub = hub_override(GPQA_HUB, options)
    required = [
        "Question",
        "Correct Answer",
        "Incorrect Answer 1",
        "Incorrect Answer 2",
        "Incorrect Answer 3",
    ]
    rows = load_rows("gpqa_diamond", path=path, hub=hub, split=split, required=required)
    out = []
    for row in rows:
        question = str(row["Question"]).strip()
        rid = column(row, "Record ID", "record_id")
        pid = f"gpqa_diamond/{rid if rid else stable_id(question)}"
        correct = str(row["Correct Answer"]).strip()
        options_ = [correct] + [str(row[f"Incorrect Answer {k}"]).strip() for k in (1, 2, 3)]
        order = list(range(4))
        random.Random(shuffle_seed(pid)).shuffle(order)
        choices = [options_[k] for k in order]
        out.append(
            Problem(
                id=pid,
                source="gpqa_diamond",
                domain=Domain.MCQ,
                question=format_mcq(question, choices),
                reference=LETTERS[order.index(0)],
                choices=choices,
                metadata={
                    "subject": row.get("Subdomain"),
                    "domain": row.get("High-level domain"),
                    "split": split or hub.split,
                },
            )
        )
    return out
