"""Curated problems -> a Hugging Face ``datasets.Dataset`` of Conductor prompts.

Each row carries the chat-form prompt (``prompt``), the problem id and domain (used by the
reward), ``offered``: the ids offered to the Conductor, in the order its prompt lists them, and
``workers``: the pool id each stands for. The prompt names each worker under its pool id ("Model
1", "Model 3") and plans use those ids, so the two columns are equal, except in descriptor mode
with ``adaptive.renumber``, where the ids are random and only the descriptions tell workers apart.
The base and recursive stages offer the whole pool; the adaptive stage offers a random subset of
k workers per row. The reward and the routing exploration (:mod:`conductor_core.train.exploration`)
take the offered ids from these columns.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from random import Random
from typing import Any

from conductor_core.errors import ConfigError, require
from conductor_core.policy.base import PreviousRound
from conductor_core.solve import SolveOptions, plan_request
from conductor_core.tasks.problem import Problem
from conductor_core.track.lineage import content_digest
from conductor_core.train.config import StageConfig
from conductor_core.workflow.executor import UNLIMITED, Budget
from conductor_core.workflow.model import AccessMode
from conductor_core.workflow.prompts import PromptStyle, plan_messages

RENUMBER_IDS = 10
"""With ``adaptive.renumber`` the offered workers are shown under random distinct ids below this
(or below the pool size, if larger): ids 0-9 are one token each with Qwen tokenizers."""


def stage_options(
    config: StageConfig,
    offered: Sequence[int] | None = None,
    descriptions: Sequence[str] = (),
) -> SolveOptions:
    """The solve options of ``config``'s stage: its prompt style, step limit, access mode and
    budget, offering ``offered`` (None: the whole pool), with ``descriptions`` (indexed by the
    ids the prompt shows) in descriptor mode (``data.descriptors``)."""
    reward = config.reward
    budget = (
        Budget(max_tokens=reward.max_tokens_per_plan, deadline_s=reward.deadline_s)
        if reward.max_tokens_per_plan is not None or reward.deadline_s is not None
        else UNLIMITED
    )
    return SolveOptions(
        max_steps=config.data.max_steps,
        access_mode=AccessMode(config.data.access_mode),
        prompt_style=PromptStyle(config.data.prompt_style),
        worker_ids=tuple(offered) if offered is not None else None,
        budget=budget,
        descriptors=config.data.descriptors,
        descriptions=tuple(descriptions),
    )


def stage_prompt(
    config: StageConfig,
    question: str,
    pool_size: int,
    *,
    offered: Sequence[int] | None = None,
    previous: PreviousRound | None = None,
    descriptions: Sequence[str] = (),
) -> list[dict[str, str]]:
    """The chat messages asking for a plan in ``config``'s stage: the plan request the solve loop
    would send (:func:`conductor_core.solve.plan_request`), rendered by
    :func:`conductor_core.workflow.prompts.plan_messages`, exactly as at serving time.
    ``descriptions`` are indexed by the ids the prompt shows (descriptor mode)."""
    options = stage_options(config, offered, descriptions)
    request = plan_request(question, pool_size, options, previous=previous)
    return plan_messages(request)


def offered_subset(rng: Random, pool_size: int, k_min: int, k_max: int | None) -> list[int]:
    """A random subset of ``k`` pool ids (k uniform in [k_min, k_max]), in pool order."""
    hi = min(pool_size, k_max or pool_size)
    lo = min(k_min, hi)
    k = rng.randint(lo, hi)
    return sorted(rng.sample(range(pool_size), k))


def id_range(pool_size: int) -> int:
    """How many ids renumbered workers are drawn from (``adaptive.renumber``)."""
    return max(RENUMBER_IDS, pool_size)


def renumbered(rng: Random, pool_ids: Sequence[int], ids: int) -> tuple[list[int], list[int]]:
    """``pool_ids`` under random distinct ids below ``ids``: (the shown ids in ascending order,
    the pool id each one stands for), so neither an id nor a position tells a worker apart."""
    shown = sorted(rng.sample(range(ids), len(pool_ids)))
    workers = list(pool_ids)
    rng.shuffle(workers)
    return shown, workers


def shown_descriptions(
    descriptions: Sequence[str], shown: Sequence[int], workers: Sequence[int]
) -> tuple[str, ...]:
    """Pool descriptions (by pool id) re-indexed by the ids a prompt shows them under."""
    out = [""] * (max(shown, default=-1) + 1)
    for s, w in zip(shown, workers, strict=True):
        out[s] = descriptions[w] if w < len(descriptions) else ""
    return tuple(out)


def shown_workers(
    rng: Random,
    config: StageConfig,
    offered: Sequence[int],
    pool_size: int,
    descriptions: Sequence[str] = (),
) -> tuple[list[int], list[int], tuple[str, ...]]:
    """How one prompt shows the ``offered`` pool ids: (the ids it shows, the pool id each stands
    for, the descriptions by shown id). Pool ids as they are, except in the adaptive stage with
    ``adaptive.renumber`` (random ids, :func:`renumbered`); ``descriptions`` (by pool id) only
    in descriptor mode. Draws from ``rng`` only when it renumbers."""
    shown, workers = list(offered), list(offered)
    if config.stage == "adaptive" and config.adaptive.renumber:
        shown, workers = renumbered(rng, offered, id_range(pool_size))
    if not config.data.descriptors:
        return shown, workers, ()
    return shown, workers, shown_descriptions(descriptions, shown, workers)


def build_rows(
    problems: Sequence[Problem],
    pool_size: int,
    config: StageConfig,
    *,
    rows: int | None = None,
    descriptions: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """The dataset rows for ``config``'s stage (plain dicts; see :func:`build_dataset`).

    The adaptive stage repeats the problems until ``rows`` rows exist (default: enough for every
    step), each copy with a fresh random subset, so the policy sees each question with several
    subsets. Other stages keep one row per problem. Deterministic given ``config.seed``.

    ``offered`` holds the ids the prompt shows, ``workers`` the pool id each stands for: the same
    list, except with ``adaptive.renumber`` (descriptor mode), where each row shows its workers
    under random ids (:func:`renumbered`). ``descriptions`` (by pool id) are shown in descriptor
    mode (``data.descriptors``).
    """
    if not problems:
        raise ConfigError("data.problems: no training problems left (check data.split)")
    rng = Random(config.seed)
    adaptive = config.stage == "adaptive"
    if adaptive:
        needed = rows or config.steps * config.questions_per_step
        copies = max(1, math.ceil(needed / len(problems)))
    else:
        copies = 1
    out: list[dict[str, Any]] = []
    for copy_index in range(copies):
        for p in problems:
            if adaptive:
                offered = offered_subset(
                    rng, pool_size, config.adaptive.k_min, config.adaptive.k_max
                )
            else:
                offered = list(range(pool_size))
            offered, workers, shown = shown_workers(rng, config, offered, pool_size, descriptions)
            messages = stage_prompt(
                config, p.question, pool_size, offered=offered, descriptions=shown
            )
            out.append(
                {
                    "prompt": messages,
                    "problem_id": p.id,
                    "domain": str(p.domain),
                    "offered": offered,
                    "workers": workers,
                    "copy": copy_index,
                }
            )
    return out


def build_dataset(
    problems: Sequence[Problem],
    pool_size: int,
    config: StageConfig,
    descriptions: Sequence[str] = (),
):
    """A ``datasets.Dataset`` with columns ``prompt``, ``problem_id``, ``domain``, ``offered``
    and ``workers`` (:func:`build_rows`)."""
    datasets = require("datasets", "train", "GRPO training")
    rows = build_rows(problems, pool_size, config, descriptions=descriptions)
    return datasets.Dataset.from_list(rows)


def problems_digest(problems: Iterable[Problem]) -> str:
    """The content digest of a problem file's problems (one per id, in file order): the same
    problems give the same digest whatever file format, path or run they come from (see
    :func:`conductor_core.track.lineage.content_digest`)."""
    unique = {p.id: p for p in problems}
    return content_digest(p.model_dump(mode="json") for p in unique.values())


def select_problems(problems: Sequence[Problem], split: str | None, limit: int | None):
    """Problems of ``split`` (``metadata.split``; None keeps all), at most ``limit``."""
    chosen = [p for p in problems if split is None or p.metadata.get("split", "train") == split]
    return chosen[:limit] if limit else chosen
