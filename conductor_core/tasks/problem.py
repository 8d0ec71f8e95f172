"""The Problem schema shared by loaders, graders, curation, training and evaluation."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conductor_core.errors import ConductorError


class Domain(StrEnum):
    """How a problem is graded."""

    MATH = "math"
    MCQ = "mcq"
    CODE = "code"
    FREEFORM = "freeform"


class Problem(BaseModel):
    """One verifiable problem.

    ``reference`` is the reference answer: a math expression, a choice letter (``mcq``), the
    canonical solution (``code``, may be empty) or a free-form string. ``choices`` holds the option
    texts of a multiple-choice problem in letter order (A, B, ...). ``tests`` holds a code problem's
    tests (see :mod:`conductor_core.tasks.grading.code` for the accepted shapes).
    ``metadata`` holds release date, difficulty, subject, split and anything source-specific.
    """

    model_config = ConfigDict(extra="forbid")

    id: str = Field(min_length=1)
    source: str = Field(min_length=1)
    domain: Domain
    question: str = Field(min_length=1)
    reference: str = ""
    choices: list[str] = Field(default_factory=list)
    tests: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


class ProblemFileError(ConductorError):
    """A problem file is unreadable or a record does not match the schema."""


def write_jsonl(problems: Iterable[Problem], path: str | Path) -> int:
    """Write problems as JSONL (atomically: a temp file renamed into place). Returns the count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    n = 0
    with tmp.open("w", encoding="utf-8") as fh:
        for p in problems:
            fh.write(p.model_dump_json() + "\n")
            n += 1
    tmp.replace(path)
    return n


def iter_jsonl(path: str | Path) -> Iterator[Problem]:
    """Read problems from JSONL; a bad record raises :class:`ProblemFileError` with its line."""
    path = Path(path)
    if not path.exists():
        raise ProblemFileError(f"problem file not found: {path}")
    with path.open(encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                yield Problem.model_validate(json.loads(line))
            except (json.JSONDecodeError, ValidationError) as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise ProblemFileError(f"{path}:{lineno}: not a valid Problem ({first})") from exc


def read_jsonl(path: str | Path) -> list[Problem]:
    """Read all problems of a JSONL file."""
    return list(iter_jsonl(path))


def write_parquet(problems: Iterable[Problem], path: str | Path) -> int:
    """Write problems as Parquet (``choices``/``tests``/``metadata`` as JSON strings)."""
    import pandas as pd

    rows = [_to_row(p) for p in problems]
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    pd.DataFrame(rows, columns=_COLUMNS).to_parquet(tmp, index=False)
    tmp.replace(path)
    return len(rows)


def read_parquet(path: str | Path) -> list[Problem]:
    """Read problems written by :func:`write_parquet`."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise ProblemFileError(f"problem file not found: {path}")
    df = pd.read_parquet(path)
    out = []
    for i, row in enumerate(df.to_dict(orient="records")):
        try:
            out.append(_from_row(row))
        except (json.JSONDecodeError, ValidationError, TypeError) as exc:
            raise ProblemFileError(f"{path}: row {i}: not a valid Problem ({exc})") from exc
    return out


def read_problems(path: str | Path) -> list[Problem]:
    """Read a problem file by extension (``.jsonl`` or ``.parquet``)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".parquet":
        return read_parquet(path)
    if suffix in (".jsonl", ".json"):
        return read_jsonl(path)
    raise ProblemFileError(
        f"unknown problem file type '{suffix}' for {path}: use .jsonl or .parquet"
    )


_COLUMNS = ["id", "source", "domain", "question", "reference", "choices", "tests", "metadata"]
_JSON_COLUMNS = ("choices", "tests", "metadata")


def _to_row(p: Problem) -> dict[str, Any]:
    row = p.model_dump(mode="json")
    for col in _JSON_COLUMNS:
        row[col] = json.dumps(row[col], ensure_ascii=False, sort_keys=True)
    return row


def _from_row(row: dict[str, Any]) -> Problem:
    data = dict(row)
    for col in _JSON_COLUMNS:
        if isinstance(data.get(col), str):
            data[col] = json.loads(data[col])
    return Problem.model_validate(data)
