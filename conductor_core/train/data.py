"""Curated problems -> a Hugging Face ``datasets.Dataset`` of Conductor prompts.

Each row carries the chat-form prompt (``prompt``), the problem id and domain (used by the
reward) and ``offered``: the pool ids offered to the Conductor, in the order it sees them
(``offered[k]`` is the pool id of "Model k"). The base and recursive stages offer the whole pool;
the adaptive stage offers a random subset of k workers per row, renumbered 0..k-1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from random import Random
from typing import Any

from conductor_core.errors import ConfigError, require
from conductor_core.tasks.problem import Problem
from conductor_core.train.config import StageConfig

COMPACT_PROMPT = (
    "Models: {models}. Write a plan of at most {max_steps} steps as three lists: model_id, "
    "subtasks, access_list.\n\nQuestion:\n{question}"
)
"""The ``compact`` prompt style: a short prompt for tiny models (no worked examples). The
question comes last, next to where the plan starts, so that a tiny model can attend to it."""

COMPACT_RECURSION = (
    "\n\nPrevious plan:\n{previous_plan}\nPrevious answer:\n{previous_answer}\n"
    "Write a new plan, or three empty lists to keep the answer."
)


def compact_prompt(
    question: str,
    num_workers: int,
    *,
    max_steps: int = 5,
    previous_plan: str | None = None,
    previous_answer: str | None = None,
) -> str:
    """The compact Conductor prompt (with the recursion section when a previous round is given)."""
    text = COMPACT_PROMPT.format(
        question=question.strip(),
        models=", ".join(str(i) for i in range(num_workers)),
        max_steps=max_steps,
    )
    if previous_plan is not None:
        text += COMPACT_RECURSION.format(
            previous_plan=previous_plan.strip(), previous_answer=(previous_answer or "").strip()
        )
    return text


def prompt_messages(
    question: str,
    num_workers: int,
    *,
    style: str = "full",
    max_steps: int = 5,
    access_mode: str = "binary",
    previous_plan: str | None = None,
    previous_answer: str | None = None,
) -> list[dict[str, str]]:
    """The chat messages asking for a plan (a recursion round when ``previous_plan`` is given)."""
    if style == "compact":
        text = compact_prompt(
            question,
            num_workers,
            max_steps=max_steps,
            previous_plan=previous_plan,
            previous_answer=previous_answer,
        )
        return [{"role": "user", "content": text}]
    if style != "full":
        raise ConfigError(f"data.prompt_style: unknown style '{style}'; use 'full' or 'compact'")
    from conductor_core.workflow.prompts import conductor_messages

    if previous_plan is not None:
        return conductor_messages(
            question,
            num_workers,
            max_steps=max_steps,
            access_mode=access_mode,
            previous_plan=previous_plan,
            previous_answer=previous_answer or "",
        )
    return conductor_messages(question, num_workers, max_steps=max_steps, access_mode=access_mode)


def stage_prompt(
    config: StageConfig,
    question: str,
    num_workers: int,
    *,
    previous_plan: str | None = None,
    previous_answer: str | None = None,
) -> list[dict[str, str]]:
    """:func:`prompt_messages` with the prompt style, step limit and access mode of ``config``."""
    return prompt_messages(
        question,
        num_workers,
        style=config.data.prompt_style,
        max_steps=config.data.max_steps,
        access_mode=config.data.access_mode,
        previous_plan=previous_plan,
        previous_answer=previous_answer,
    )


def offered_subset(rng: Random, pool_size: int, k_min: int, k_max: int | None) -> list[int]:
    """A random subset of ``k`` pool ids (k uniform in [k_min, k_max]), in random order."""
    hi = min(pool_size, k_max or pool_size)
    lo = min(k_min, hi)
    k = rng.randint(lo, hi)
    return rng.sample(range(pool_size), k)


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
            messages = stage_prompt(config, p.question, len(offered))
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
