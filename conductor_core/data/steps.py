"""Curation steps on lists of problems: load, normalise, de-duplicate, decontaminate.

Each step is a plain function (lists in, lists out) so that a pipeline component can call it on
files read with :mod:`conductor_core.tasks.problem`. Filtering steps return :class:`Filtered`
(problems kept, removals with reasons); the first occurrence of a duplicate wins, so sources listed
first in the config take priority.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence

from conductor_core.data.config import DecontaminationConfig, DedupConfig, SourceSpec
from conductor_core.data.records import SOURCE_KEY, Filtered, Removal
from conductor_core.data.text import (
    MinHasher,
    clean_text,
    comparison_key,
    comparison_words,
    jaccard,
    lsh_bands,
    shingles,
    word_ngrams,
)
from conductor_core.errors import ConfigError
from conductor_core.tasks.problem import Domain, Problem, read_problems
from conductor_core.tasks.sources import load_benchmark


def load_source(spec: SourceSpec) -> list[Problem]:
    """Load one source (benchmark or problem file) and tag each problem with the source name."""
    if spec.file is not None:
        problems = read_problems(spec.file)
        if spec.split is not None:
            problems = [p for p in problems if p.metadata.get("split", "train") == spec.split]
        if spec.limit is not None:
            problems = problems[: spec.limit]
    else:
        problems = load_benchmark(
            spec.benchmark, path=spec.path, split=spec.split, limit=spec.limit, **spec.options
        )
    return [
        p.model_copy(update={"metadata": {**p.metadata, SOURCE_KEY: spec.name}}) for p in problems
    ]


def load_sources(specs: Sequence[SourceSpec]) -> list[Problem]:
    """Load every source in order (the order is the priority when duplicates are removed)."""
    if not specs:
        raise ConfigError("sources: give at least one source (a benchmark name or a problem file)")
    out: list[Problem] = []
    for spec in specs:
        out.extend(load_source(spec))
    return out


def normalise_problem(problem: Problem) -> Problem:
    """NFKC, whitespace and strip on question, reference and choices (code keeps indentation)."""
    code = problem.domain == Domain.CODE
    return problem.model_copy(
        update={
            "id": problem.id.strip(),
            "question": clean_text(problem.question, keep_indentation=code),
            "reference": clean_text(problem.reference, keep_indentation=code),
            "choices": [clean_text(c) for c in problem.choices],
        }
    )


def normalise(problems: Iterable[Problem]) -> Filtered:
    """Normalise every problem; one whose question or id becomes empty is removed."""
    kept: list[Problem] = []
    removed: list[Removal] = []
    for p in problems:
        q = normalise_problem(p)
        if not q.question or not q.id:
            removed.append(Removal(id=p.id, reason="empty question or id after normalisation"))
        else:
            kept.append(q)
    return Filtered(kept, removed)


def _dedup_text(p: Problem) -> str:
    return "\n".join([p.question, *p.choices])


def deduplicate(problems: Sequence[Problem], config: DedupConfig | None = None) -> Filtered:
    """Remove exact duplicates (same question and choices up to case, punctuation and spacing),
    then near duplicates (word-shingle Jaccard >= ``threshold``; MinHash LSH finds candidates and
    the exact Jaccard confirms them). Problems of different domains are never duplicates."""
    config = config or DedupConfig()
    kept = list(problems)
    removed: list[Removal] = []
    if config.exact:
        seen: dict[tuple[str, str], str] = {}
        survivors = []
        for p in kept:
            key = (p.domain.value, comparison_key(_dedup_text(p)))
            if key in seen:
                removed.append(Removal(id=p.id, reason=f"exact duplicate of {seen[key]}"))
            else:
                seen[key] = p.id
                survivors.append(p)
        kept = survivors
    if config.near and len(kept) > 1:
        kept, near = _near_duplicates(kept, config)
        removed.extend(near)
    return Filtered(kept, removed)


def _near_duplicates(problems: list[Problem], config: DedupConfig) -> tuple[list[Problem], list]:
    hasher = MinHasher(config.num_perm)
    bands, rows = lsh_bands(config.num_perm, config.threshold)
    buckets: dict[tuple, list[int]] = defaultdict(list)
    sets: list[set[str]] = []
    kept_idx: list[int] = []
    removed: list[Removal] = []
    for i, p in enumerate(problems):
        items = shingles(comparison_words(_dedup_text(p)), config.shingle_size)
        sets.append(items)
        sig = hasher.signature(items)
        keys = [(p.domain.value, b, sig[b * rows : (b + 1) * rows]) for b in range(bands)]
        candidates = sorted({j for k in keys for j in buckets.get(k, ())})
        match = next(
            ((j, s) for j in candidates if (s := jaccard(items, sets[j])) >= config.threshold),
            None,
        )
        if match is not None:
            j, sim = match
            reason = f"near duplicate of {problems[j].id} (jaccard {sim:.2f})"
            removed.append(Removal(id=p.id, reason=reason))
            continue
        kept_idx.append(i)
        for k in keys:
            buckets[k].append(i)
    return [problems[i] for i in kept_idx], removed


def _contamination_text(p: Problem) -> str:
    # a loader's own instructions (e.g. "Return it in a single python code block") are shared by
    # every problem of a benchmark: compare the benchmark's statement when the loader kept it
    statement = p.metadata.get("statement")
    return statement if isinstance(statement, str) and statement.strip() else p.question


def decontaminate(
    problems: Sequence[Problem],
    eval_problems: Sequence[Problem],
    config: DecontaminationConfig | None = None,
) -> Filtered:
    """Remove problems sharing a word n-gram (normalised text, ``n`` words, default 13) with any
    evaluation problem. A question shorter than ``n`` words is contaminated when its whole
    normalised text equals an evaluation question's (a substring test would flag any short
    question such as "Compute 3+5.")."""
    config = config or DecontaminationConfig()
    if not config.enabled or not eval_problems:
        return Filtered(list(problems), [])
    n = config.n
    index: dict[str, str] = {}
    whole: dict[str, str] = {}
    for e in eval_problems:
        words = comparison_words(_contamination_text(e))
        label = f"{e.source}:{e.id}"
        whole.setdefault(" ".join(words), label)
        for gram in word_ngrams(words, n):
            index.setdefault(gram, label)
    kept: list[Problem] = []
    removed: list[Removal] = []
    for p in problems:
        words = comparison_words(_contamination_text(p))
        hit = None
        if len(words) >= n:
            hit = next((index[g] for g in word_ngrams(words, n) if g in index), None)
            why = f"shares a {n}-gram with eval problem {hit}"
        elif words:
            hit = whole.get(" ".join(words))
            why = f"same text as eval problem {hit}"
        if hit is None:
            kept.append(p)
        else:
            removed.append(Removal(id=p.id, reason=why))
    return Filtered(kept, removed)
