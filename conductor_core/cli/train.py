"""``conductor train``: run one GRPO stage (base, adaptive or recursive) from a YAML config.

Under ``torchrun --nproc-per-node N`` every process trains; rank 0 prints the header and the
summary, logs to MLflow and writes checkpoints and the model (``conductor_core.train.ranks``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from conductor_core.api import train_config  # what the Python API's train() resolves
from conductor_core.cli.options import OUTPUT_DIR, RenamedOptionsCommand
from conductor_core.configfiles import parse_sets
from conductor_core.train import ranks
from conductor_core.train.config import PROFILES


@click.command(
    cls=RenamedOptionsCommand,
    renamed=[OUTPUT_DIR],
    help="Train the Conductor with GRPO (one stage) from a YAML config.",
)
@click.option(
    "--stage",
    type=click.Choice(["base", "adaptive", "recursive"]),
    default=None,
    help="Stage to run (default: the config's 'stage').",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Stage config YAML. Default: the bundled config of the stage.",
)
@click.option(
    "--profile",
    type=click.Choice(PROFILES),
    default=None,
    help="Named profile under the config (resources/train/profiles): 'tiny' (a random tiny "
    "model, CPU, minutes), 'small' (SmolLM2-135M-Instruct, the paper's mechanism, CPU) or "
    "'paper' (GPU, 7B).",
)
@click.option(
    "--out", "output_dir", default=None, help="Folder of the stage's outputs (overrides output_dir)"
)
@click.option("--steps", type=click.IntRange(1), default=None, help="Override steps.")
@click.option("--init-from", default=None, help="Override init_from (a model directory).")
@click.option(
    "--set", "sets", multiple=True, help="Override any field: --set reward.executions_per_plan=2"
)
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@click.option("--print-config", is_flag=True, help="Print the resolved config as YAML and exit.")
def command(
    stage: str | None,
    config_path: Path | None,
    profile: str | None,
    output_dir: str | None,
    steps: int | None,
    init_from: str | None,
    sets: tuple[str, ...],
    no_progress: bool,
    print_config: bool,
) -> None:
    """Resolve the config, run the stage, print a summary."""
    config = train_config(
        stage,
        config=config_path,
        profile=profile,
        steps=steps,
        output_dir=output_dir,
        init_from=init_from,
        overrides=parse_sets(sets),
    )
    if print_config:
        click.echo(config.to_yaml(), nl=False)
        return
    from rich.console import Console

    console = Console(stderr=True)
    launch = ranks.current()
    if launch.is_main:
        processes = f" processes={launch.world_size}" if launch.distributed else ""
        console.print(
            f"[bold]conductor train[/bold] stage={config.stage} profile={config.profile or '-'} "
            f"steps={config.steps} batch={config.questions_per_step}x{config.plans_per_question}"
            f"{processes} -> {config.output_path()}"
        )
    # lazy: conductor --help imports every command module; this adds ~110 ms
    from conductor_core.train.grpo import run_stage

    result = run_stage(config, progress=not no_progress, log=lambda m: console.print(m))
    if launch.is_main:  # under torchrun, rank 0 tracks the run and writes the model
        print_summary(result.summary, result.run_id, console)


def print_summary(summary: dict[str, Any], run_id: str | None, console: Any) -> None:
    """The end-of-run summary table."""
    from rich.table import Table

    table = Table(title="training summary", show_header=True)
    table.add_column("metric")
    table.add_column("first steps", justify="right")
    table.add_column("last steps", justify="right")
    for label in ("reward", "format_error_rate", "best_worker_share", "mean_steps"):
        if f"{label}_first" in summary:
            table.add_row(
                label, f"{summary[f'{label}_first']:.3f}", f"{summary[f'{label}_last']:.3f}"
            )
    console.print(table)
    console.print(
        f"steps {summary.get('steps')}, {summary.get('seconds')}s; "
        f"model: {summary.get('model_dir')}"
        + (f"; resumed from {summary['resumed_from']}" if summary.get("resumed_from") else "")
        + (f"; MLflow run {run_id}" if run_id else "")
    )
