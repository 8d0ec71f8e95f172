"""Options and loaders shared by the ``solve`` and ``plan`` subcommands."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from conductor_core.api import load_pool_config
from conductor_core.workflow.model import AccessMode
from conductor_core.workflow.prompts import PromptStyle


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
            "'tiny' (tiny local model), 'smollm2-135m-instruct' (the bundled pretrained "
            "SmolLM2-135M-Instruct, offline), a model directory, or an OpenAI-compatible URL "
            "(e.g. a vLLM-served Conductor at http://host:8000/v1).",
        ),
        click.option("--conductor-model", default=None, help="Model name at a Conductor URL."),
        click.option(
            "--plan-grammar/--no-plan-grammar",
            "plan_grammar",
            default=True,
            show_default=True,
            help="A local model Conductor ('tiny', a model directory, models:/...) decodes under "
            "the plan grammar, so every plan it finishes parses; --no-plan-grammar lets it "
            "write unaided (what it learned). No effect on 'scripted' or a URL.",
        ),
        click.option(
            "--conductor-temperature",
            type=click.FloatRange(min=0),
            default=None,
            help="Sampling temperature of a learned Conductor (a local model or a URL); 0: "
            "greedy. Default: 1.0, as GRPO sampled it in training.",
        ),
        click.option(
            "--conductor-max-tokens",
            type=click.IntRange(min=1),
            default=None,
            help="Most tokens a learned Conductor writes for a plan. Default: the plan length a "
            "model folder was trained with, else 1024.",
        ),
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
            help="Problems the simulated workers know, JSONL or Parquet, replacing the pool's "
            "simulation.problems (default: those of the pool; the bundled pool knows the "
            "bundled demo problems).",
        ),
        click.option("--max-steps", default=5, show_default=True, type=click.IntRange(1, 20)),
        click.option(
            "--access-mode",
            type=click.Choice([m.value for m in AccessMode]),
            default=AccessMode.BINARY.value,
            show_default=True,
        ),
        click.option("--descriptors", is_flag=True, help="Describe workers to the Conductor."),
        click.option(
            "--prompt-style",
            type=click.Choice([s.value for s in PromptStyle]),
            default=PromptStyle.FULL.value,
            show_default=True,
            help="How the Conductor is asked: 'full' (worked examples) or 'compact' (tiny "
            "models). A model folder saved by `conductor train` is always asked its own way.",
        ),
        click.option("--seed", "sample_index", default=0, show_default=True, help="Sample index."),
    ]
    return functools.reduce(lambda f, opt: opt(f), reversed(options), func)


def load_pool(pool_path: Path | None, problems_path: Path | None):
    """The pool config (the bundled simulated pool by default); ``--problems`` replaces the
    problems its simulated workers know (:func:`conductor_core.api.load_pool_config`)."""
    return load_pool_config(pool_path, problems_path)


def make_plan_source(
    spec: str,
    model: str | None,
    key_env: str | None,
    *,
    plan_grammar: bool = True,
    temperature: float | None = None,
    plan_tokens: int | None = None,
):
    """Build the plan source named by ``--conductor`` (``--plan-grammar`` for local models,
    ``--conductor-temperature``, ``--conductor-max-tokens``)."""
    # lazy: conductor --help imports every command module; this adds ~8 ms
    from conductor_core.policy.factory import load_plan_source

    return load_plan_source(
        spec,
        model=model,
        api_key_env=key_env,
        plan_grammar=plan_grammar,
        temperature=temperature,
        plan_tokens=plan_tokens,
    )
