"""Loaders for answer-checked benchmarks: MATH, MATH500, AIME 2024/2025, GSM8K and RLPR."""

from __future__ import annotations

import json
from typing import Any

from conductor_core.tasks.answers import gsm8k_answer, last_boxed
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

MATH_HUB = HubRef("DigitalLearningGmbH/MATH-lighteval", "default", "test")
MATH500_HUB = HubRef("HuggingFaceH4/MATH-500", None, "test")
AIME2024_HUB = HubRef("Maxwell-Jia/AIME_2024", None, "train")
AIME2025_HUB = HubRef("yentinglin/aime_2025", None, "train")
GSM8K_HUB = HubRef("openai/gsm8k", "main", "test")
RLPR_HUB = HubRef("openbmb/RLPR-train-dataset", None, "train")


def load_math(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """MATH (Hendrycks): columns problem, solution, level, type; reference = last boxed answer."""
    hub = hub_override(MATH_HUB, options)
    rows = load_rows("math", path=path, hub=hub, split=split, required=["problem", "solution"])
    out = []
    for row in rows:
        solution = str(row["solution"])
        ref = last_boxed(solution)
        if ref is None:
            continue  # a handful of MATH solutions have no boxed answer: not verifiable
        question = str(row["problem"])
        out.append(
            Problem(
                id=f"math/{stable_id(question)}",
                source="math",
                domain=Domain.MATH,
                question=question,
                reference=ref,
                metadata={
                    "level": row.get("level"),
                    "subject": row.get("type"),
                    "difficulty": row.get("level"),
                    "solution": solution,
                    "split": split or hub.split,
                },
            )
        )
    return out


MATH500_SUBSETS = {"paper100": "math500_paper100.txt"}
"""Named id lists of MATH500 shipped in ``conductor_core/resources/eval``."""


def math500_subset_ids(subset: str) -> list[str]:
    """The ``unique_id`` list of a named MATH500 subset (``paper100``) or of an id file (one per
    line, ``#`` comments)."""
    from importlib import resources

    if subset in MATH500_SUBSETS:
        text = (
            resources.files("conductor_core.resources") / "eval" / MATH500_SUBSETS[subset]
        ).read_text(encoding="utf-8")
    else:
        from pathlib import Path

        f = Path(subset).expanduser()
        if not f.is_file():
            raise BenchmarkSourceError(
                f"math500: options 'subset' and 'exclude' take one of "
                f"{', '.join(MATH500_SUBSETS)} or a file of unique_ids, got {subset!r}"
            )
        text = f.read_text(encoding="utf-8")
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def load_math500(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """MATH500: columns problem, solution, answer, subject, level, unique_id.

    Option ``subset``: ``paper100`` (the fixed 100-question split of the paper's evaluation,
    shipped in resources/eval/math500_paper100.txt) or a file of ``unique_id``s: only those. Option
    ``exclude``: the same kind of list, left out (``exclude: paper100`` is the other side of the
    paper's re-split, the 400 questions its MATH training data come from). Every listed id must be
    present in the data, so that a partial copy cannot pass for the split.
    """
    subset = options.pop("subset", None)
    exclude = options.pop("exclude", None)
    hub = hub_override(MATH500_HUB, options)
    rows = load_rows(
        "math500", path=path, hub=hub, split=split, required=["problem", "answer", "unique_id"]
    )
    by_id = {str(r["unique_id"]): r for r in rows}

    def listed(option: str, name: Any) -> list[str]:
        ids = math500_subset_ids(str(name))
        absent = [i for i in ids if i not in by_id]
        if absent:
            raise BenchmarkSourceError(
                f"math500: {len(absent)} id(s) of {option} '{name}' are not in the data "
                f"(e.g. {absent[0]}); give the full MATH-500 test split"
            )
        return ids

    if subset is not None:
        rows = [by_id[i] for i in listed("subset", subset)]
    if exclude is not None:
        left_out = set(listed("exclude", exclude))
        rows = [r for r in rows if str(r["unique_id"]) not in left_out]
    return [
        Problem(
            id=f"math500/{row['unique_id']}",
            source="math500",
            domain=Domain.MATH,
            question=str(row["problem"]),
            reference=str(row["answer"]),
            metadata={
                "subject": row.get("subject"),
                "level": row.get("level"),
                "difficulty": row.get("level"),
                "solution": row.get("solution"),
                "split": split or hub.split,
            },
        )
        for row in rows
    ]


def _load_aime(
    bench: str, hub: HubRef, path: str | None, split: str | None, year: int
) -> list[Problem]:
    rows = load_rows(
        bench,
        path=path,
        hub=hub,
        split=split,
        required=[("problem", "Problem", "question"), ("answer", "Answer")],
    )
    out = []
    for row in rows:
        question = str(column(row, "problem", "Problem", "question"))
        rid = column(row, "ID", "id")
        answer = column(row, "answer", "Answer")
        out.append(
            Problem(
                id=f"{bench}/{rid if rid is not None else stable_id(question)}",
                source=bench,
                domain=Domain.MATH,
                question=question,
                reference=str(answer).strip(),
                metadata={
                    "year": column(row, "Year", "year", default=year),
                    "solution": column(row, "Solution", "solution"),
                    "split": split or hub.split,
                },
            )
        )
    return out


def load_aime2024(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """AIME 2024 (Maxwell-Jia/AIME_2024): columns ID, Problem, Solution, Answer."""
    return _load_aime("aime2024", hub_override(AIME2024_HUB, options), path, split, 2024)


def load_aime2025(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """AIME 2025: columns id/problem/answer (ID/Problem/Answer and question are accepted too)."""
    return _load_aime("aime2025", hub_override(AIME2025_HUB, options), path, split, 2025)


def load_gsm8k(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """GSM8K (openai/gsm8k, config main): columns question, answer (final answer after ####)."""
    hub = hub_override(GSM8K_HUB, options)
    rows = load_rows("gsm8k", path=path, hub=hub, split=split, required=["question", "answer"])
    return [
        Problem(
            id=f"gsm8k/{stable_id(str(row['question']))}",
            source="gsm8k",
            domain=Domain.MATH,
            question=str(row["question"]),
            reference=gsm8k_answer(str(row["answer"])),
            metadata={"solution": row["answer"], "split": split or hub.split},
        )
        for row in rows
    ]


def _rlpr_question(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, dict)]
        user_only = [
            m.get("content", "") for m in prompt if isinstance(m, dict) and m.get("role") == "user"
        ]
        chosen = user_only or users
        if chosen:
            return str(chosen[-1])
    raise BenchmarkSourceError(
        "benchmark 'rlpr': column 'prompt' must be a string or a list of {role, content} messages"
    )


def load_rlpr(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """RLPR (openbmb/RLPR-train-dataset, verl layout).

    Columns: ``prompt`` (chat messages; the last user message is the question; a plain string
    is accepted), ``reward_model`` (``{"ground_truth": ..., "style": ...}``; the reference),
    optional ``data_source``, ``ability`` and ``extra_info`` (``index`` becomes the id).
    Graded as free-form. Option ``part`` (``train`` / ``heldout``, with ``heldout_fraction``,
    default 0.1) keeps one side of a fixed hash partition of the ids: the paper's RLPR test
    questions are held out of the same dataset.
    """
    part = options.pop("part", None)
    fraction = options.pop("heldout_fraction", None)
    hub = hub_override(RLPR_HUB, options)
    rows = load_rows("rlpr", path=path, hub=hub, split=split, required=["prompt", "reward_model"])
    out = []
    for row in rows:
        question = _rlpr_question(row["prompt"])
        rm = row["reward_model"]
        if isinstance(rm, str):
            rm = json.loads(rm)
        if not isinstance(rm, dict) or "ground_truth" not in rm:
            raise BenchmarkSourceError(
                "benchmark 'rlpr': column 'reward_model' must be a mapping with 'ground_truth'"
            )
        extra = row.get("extra_info") or {}
        index = extra.get("index") if isinstance(extra, dict) else None
        pid = f"rlpr/{index if index is not None else stable_id(question)}"
        if not in_part(pid, part, fraction):
            continue
        out.append(
            Problem(
                id=pid,
                source="rlpr",
                domain=Domain.FREEFORM,
                question=question,
                reference=str(rm["ground_truth"]),
                metadata={
                    "data_source": row.get("data_source"),
                    "ability": row.get("ability"),
                    "split": split or hub.split,
                    "part": part,
                },
            )
        )
    return out
