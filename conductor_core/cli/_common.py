"""Options and loaders shared by the ``solve`` and ``plan`` subcommands."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from conductor_core.workflow.model import AccessMode


def conductor_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add the options that choose the pool and the plan source."""
    options = [
        click.option(
            "--pool",
            "pool_path",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help="Worker pool YAML. Default: the bundled simulated pool (no keys needed).",
        ),
        click.option(
            "--conductor",
            "conductor",
            default="scripted",
            show_default=True,
            help="Plan source: 'scripted' (deterministic heuristic, not a learned model), "
            "'tiny' (tiny local model), a model directory, or an OpenAI-compatible URL "
            "(e.g. a vLLM-served Conductor at http://host:8000/v1).",
        ),
        click.option("--conductor-model", default=None, help="Model name at a Conductor URL."),
        click.option(
            "--conductor-key-env",
            default=None,
            help="NAME of the environment variable holding the Conductor endpoint's key.",
        ),
        click.option(
            "--problems",
            "problems_path",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help="Problem bank for simulated workers (default: the bundled demo problems).",
        ),
        click.option("--max-steps", default=5, show_default=True, type=click.IntRange(1, 20)),
        click.option(
            "--access-mode",
            type=click.Choice([m.value for m in AccessMode]),
            default=AccessMode.BINARY.value,
            show_default=True,
        ),
        click.option("--descriptors", is_flag=True, help="Describe workers to the Conductor."),
        click.option("--seed", "sample_index", default=0, show_default=True, help="Sample index."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def load_pool_and_bank(pool_path: Path | None, problems_path: Path | None):
    """Load the pool config (bundled simulated pool by default) and the simulated problem bank."""
    from conductor_core.workers.config import load_pool
    from conductor_core.workers.simulated import (
        ProblemBank,
        bundled_pool_path,
        bundled_problems_path,
    )

    config = load_pool(pool_path or bundled_pool_path())
    bank = None
    if any(w.provider == "simulated" for w in config.workers):
        bank = ProblemBank.from_file(problems_path or bundled_problems_path())
    return config, bank


def make_plan_source(spec: str, model: str | None, key_env: str | None):
    """Build the plan source named by ``--conductor``."""
    from conductor_core.policy.factory import load_plan_source

    return load_plan_source(spec, model=model, api_key_env=key_env)


def solve_options(
    config,
    *,
    max_steps: int,
    access_mode: str,
    descriptors: bool,
    rounds: int = 1,
    max_tokens: int | None = None,
    max_cost: float | None = None,
    deadline: float | None = None,
    answer_fallback: bool = False,
):
    """The solve-loop options the shared command-line options describe (workers' descriptions
    come from the pool config)."""
    from conductor_core.solve import SolveOptions
    from conductor_core.workflow.executor import Budget

    return SolveOptions(
        max_rounds=rounds,
        max_steps=max_steps,
        access_mode=AccessMode(access_mode),
        budget=Budget(
            max_steps=max_steps, max_tokens=max_tokens, max_cost=max_cost, deadline_s=deadline
        ),
        descriptors=descriptors,
        descriptions=tuple(w.description for w in config.workers),
        answer_fallback=answer_fallback,
    )
