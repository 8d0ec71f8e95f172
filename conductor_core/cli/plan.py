"""``conductor plan``: ask the Conductor for a plan only (nothing is executed)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import click

from conductor_core.cli._common import (
    conductor_options,
    load_pool,
    make_plan_source,
)
from conductor_core.solve import plan_request, solve_options


@click.command("plan")
@click.argument("question")
@conductor_options
def command(
    question: str,
    pool_path: Path | None,
    conductor: str,
    conductor_model: str | None,
    plan_grammar: bool,
    conductor_temperature: float | None,
    conductor_max_tokens: int | None,
    conductor_key_env: str | None,
    problems_path: Path | None,
    max_steps: int,
    access_mode: str,
    descriptors: bool,
    prompt_style: str,
    sample_index: int,
) -> None:
    """Print the Conductor's raw output and the parsed plan (or its format error) as JSON."""
    config = load_pool(pool_path, problems_path)
    source = make_plan_source(
        conductor,
        conductor_model,
        conductor_key_env,
        plan_grammar=plan_grammar,
        temperature=conductor_temperature,
        plan_tokens=conductor_max_tokens,
    )
    options = solve_options(
        config,
        max_steps=max_steps,
        access_mode=access_mode,
        descriptors=descriptors,
        prompt_style=prompt_style,
    )
    request = plan_request(question, len(config.workers), options, sample_index)

    async def go():
        try:
            return await source.plan(request)
        finally:
            await source.aclose()

    result = asyncio.run(go())
    out = {
        "raw": result.raw,
        "plan": result.workflow.to_dict() if result.workflow else None,
        "error": result.error.to_dict() if result.error else None,
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "latency_s": round(result.latency_s, 4),
    }
    click.echo(json.dumps(out, indent=2, ensure_ascii=False))
    if result.error:
        sys.exit(1)
