"""Curated problems -> a Hugging Face ``datasets.Dataset`` of Conductor prompts.

Each row carries the chat-form prompt (``prompt``), the problem id and domain (used by the
reward) and ``offered``: the pool ids offered to the Conductor, in the order its prompt lists
them; the prompt names each under its pool id ("Model 1", "Model 3") and plans use those ids. The
base and recursive stages offer the whole pool; the adaptive stage offers a random subset of k
workers per row (in pool order). The reward and the routing exploration
(:mod:`conductor_core.train.exploration`) take the offered ids from this column.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from random import Random
from typing import Any

from conductor_core.errors import ConfigError, require
from conductor_core.policy.base import PreviousRound
from conductor_core.solve import SolveOptions, plan_request
from conductor_core.tasks.problem import Problem
from conductor_core.train.config import StageConfig
from conductor_core.workflow.model import AccessMode
from conductor_core.workflow.prompts import PromptStyle, plan_messages


def stage_options(config: StageConfig, offered: Sequence[int] | None = None) -> SolveOptions:
    """The solve options of ``config``'s stage: its prompt style, step limit, access mode and
    budget, offering ``offered`` (None: the whole pool)."""
    from conductor_core.workflow.executor import UNLIMITED, Budget

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
    )


def stage_prompt(
    config: StageConfig,
    question: str,
    pool_size: int,
    *,
    offered: Sequence[int] | None = None,
    previous: PreviousRound | None = None,
) -> list[dict[str, str]]:
    """The chat messages asking for a plan in ``config``'s stage: the plan request the solve loop
    would send (:func:`conductor_core.solve.plan_request`), rendered by
    :func:`conductor_core.workflow.prompts.plan_messages`, exactly as at serving time."""
    request = plan_request(question, pool_size, stage_options(config, offered), previous=previous)
    return plan_messages(request)


def offered_subset(rng: Random, pool_size: int, k_min: int, k_max: int | None) -> list[int]:
    """A random subset of ``k`` pool ids (k uniform in [k_min, k_max]), in pool order."""
    hi = min(pool_size, k_max or pool_size)
    lo = min(k_min, hi)
    k = rng.randint(lo, hi)
    return sorted(rng.sample(range(pool_size), k))


def build_rows(
    problems: Sequence[Problem],
    pool_size: int,
    config: StageConfig,
    *,
    rows: int | None = None,
) -> list[dict[str, Any]]:
    """The dataset rows for ``config``'s stage (plain dicts; see :func:`build_dataset`).

    The adaptive stage repeats the problems until ``rows`` rows exist (default: enough for every
    step), each copy with a fresh random subset, so the policy sees each question with several
    subsets. Other stages keep one row per problem. Deterministic given ``config.seed``.
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
            messages = stage_prompt(config, p.question, pool_size, offered=offered)
            out.append(
                {
                    "prompt": messages,
                    "problem_id": p.id,
                    "domain": str(p.domain),
                    "offered": offered,
                    "copy": copy_index,
                }
            )
    return out


def build_dataset(problems: Sequence[Problem], pool_size: int, config: StageConfig):
    """A ``datasets.Dataset`` with columns ``prompt``, ``problem_id``, ``domain``, ``offered``."""
    datasets = require("datasets", "train", "GRPO training")
    return datasets.Dataset.from_list(build_rows(problems, pool_size, config))


def select_problems(problems: Sequence[Problem], split: str | None, limit: int | None):
    """Problems of ``split`` (``metadata.split``; None keeps all), at most ``limit``."""
    chosen = [p for p in problems if split is None or p.metadata.get("split", "train") == split]
    return chosen[:limit] if limit else chosen
