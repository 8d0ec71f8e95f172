"""Stratified mixture to a target size, and the train/validation split.

Both are deterministic for a given seed: every random choice uses a ``random.Random`` seeded from
the seed and the stratum name, and problems are ordered by id before sampling, so the input order
does not matter.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping, Sequence

from conductor_core.data.config import MixtureConfig, SourceSpec, SplitConfig
from conductor_core.data.records import Filtered, Removal, source_of
from conductor_core.tasks.problem import Problem


def apportion(total: int, weights: Mapping[str, float], caps: Mapping[str, int]) -> dict[str, int]:
    """Split ``total`` into integer shares proportional to ``weights`` (largest remainder),
    never above ``caps``; what a capped key cannot take goes to the others."""
    shares = {k: 0 for k in weights}
    open_keys = [k for k in weights if caps.get(k, 0) > 0 and weights[k] > 0]
    left = total
    while left > 0 and open_keys:
        wsum = sum(weights[k] for k in open_keys)
        exact = {k: left * weights[k] / wsum for k in open_keys}
        give = {k: min(int(exact[k]), caps[k] - shares[k]) for k in open_keys}
        rest = left - sum(give.values())
        order = sorted(open_keys, key=lambda k: (-(exact[k] - int(exact[k])), k))
        for k in order:
            if rest <= 0:
                break
            if give[k] < caps[k] - shares[k]:
                give[k] += 1
                rest -= 1
        for k, v in give.items():
            shares[k] += v
        given = sum(give.values())
        left -= given
        open_keys = [k for k in open_keys if shares[k] < caps[k]]
        if given == 0:
            break
    return shares


def _sample(problems: list[Problem], k: int, rng: random.Random) -> list[Problem]:
    ordered = sorted(problems, key=lambda p: p.id)
    return rng.sample(ordered, k) if k < len(ordered) else ordered


def mix(
    problems: Sequence[Problem],
    config: MixtureConfig | None = None,
    sources: Sequence[SourceSpec] = (),
) -> Filtered:
    """Choose up to ``target_size`` problems.

    A source with a ``quota`` gets that many (or all it has); the rest of the target is shared
    among the other sources in proportion to their ``weight`` (default 1), and shares a source
    cannot fill go to the others. Within a source, problems are drawn stratified by domain in
    proportion to the domain counts. Sources absent from ``sources`` get weight 1. Problems not
    chosen are returned as removals ("not selected by the mixture").
    """
    config = config or MixtureConfig()
    by_source: dict[str, list[Problem]] = defaultdict(list)
    for p in problems:
        by_source[source_of(p)].append(p)
    specs = {s.name: s for s in sources}
    caps = {name: len(items) for name, items in by_source.items()}
    quotas = {
        name: min(specs[name].quota or 0, caps[name])
        for name in by_source
        if name in specs and specs[name].quota is not None
    }
    rest = max(0, config.target_size - sum(quotas.values()))
    weights = {
        name: (specs[name].weight if name in specs else 1.0)
        for name in by_source
        if name not in quotas
    }
    shares = dict(quotas)
    shares.update(apportion(rest, weights, {k: caps[k] for k in weights}))
    chosen: list[Problem] = []
    for name in sorted(by_source):
        chosen.extend(_stratified(by_source[name], shares.get(name, 0), config.seed, name))
    rng = random.Random(f"{config.seed}:order")
    chosen.sort(key=lambda p: p.id)
    rng.shuffle(chosen)
    picked = {p.id for p in chosen}
    removed = [
        Removal(id=p.id, reason="not selected by the mixture")
        for p in problems
        if p.id not in picked
    ]
    return Filtered(chosen, removed)


def _stratified(items: list[Problem], k: int, seed: int, name: str) -> list[Problem]:
    by_domain: dict[str, list[Problem]] = defaultdict(list)
    for p in items:
        by_domain[p.domain.value].append(p)
    counts = {d: float(len(v)) for d, v in by_domain.items()}
    caps = {d: len(v) for d, v in by_domain.items()}
    shares = apportion(k, counts, caps)
    out: list[Problem] = []
    for domain in sorted(by_domain):
        rng = random.Random(f"{seed}:{name}:{domain}")
        out.extend(_sample(by_domain[domain], shares[domain], rng))
    return out


def split(
    problems: Sequence[Problem], config: SplitConfig | None = None
) -> tuple[list[Problem], list[Problem]]:
    """Split into (train, validation), stratified by domain: each domain gives
    ``round(n * validation_fraction)`` problems to validation (at least one when the fraction is
    positive and the domain has two or more). Sets ``metadata["split"]`` on every problem."""
    config = config or SplitConfig()
    by_domain: dict[str, list[Problem]] = defaultdict(list)
    for p in problems:
        by_domain[p.domain.value].append(p)
    val_ids: set[str] = set()
    for domain in sorted(by_domain):
        items = sorted(by_domain[domain], key=lambda p: p.id)
        n_val = round(len(items) * config.validation_fraction)
        if config.validation_fraction > 0 and n_val == 0 and len(items) >= 2:
            n_val = 1
        rng = random.Random(f"{config.seed}:split:{domain}")
        val_ids.update(p.id for p in rng.sample(items, n_val))
    train: list[Problem] = []
    validation: list[Problem] = []
    for p in problems:
        part = "validation" if p.id in val_ids else "train"
        tagged = p.model_copy(update={"metadata": {**p.metadata, "split": part}})
        (validation if part == "validation" else train).append(tagged)
    return train, validation
