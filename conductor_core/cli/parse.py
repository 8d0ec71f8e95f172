"""``conductor parse``: parse raw Conductor output and print the plan (or the format error) as JSON.

Exit codes: 0 when the plan parses, 1 for a format error (the JSON names its code), 2 when the
input cannot be read.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from conductor_core.workflow.model import AccessMode
from conductor_core.workflow.parser import try_parse_plan


class InputError(click.ClickException):
    """The input file cannot be read (one clear line, exit code 2)."""

    exit_code = 2


class PlanRejected(click.ClickException):
    """The plan did not parse: shown as one line on stderr, exit code 1."""

    exit_code = 1


def _read_input(source: str) -> str:
    """The text of ``source`` (a path, or ``-`` for standard input)."""
    if source == "-":
        return click.get_text_stream("stdin").read()
    path = Path(source)
    if not path.exists():
        raise InputError(f"FILE: {source} does not exist; pass an existing file, or - for stdin")
    if path.is_dir():
        raise InputError(f"FILE: {source} is a directory; pass a text file, or - for stdin")
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise InputError(
            f"FILE: cannot read {source} ({exc.strerror or exc}); check its permissions"
        ) from None


@click.command(name="parse")
@click.argument("file", default="-", metavar="[FILE|-]")
@click.option(
    "--workers",
    "-w",
    type=click.IntRange(min=1),
    default=None,
    help="Pool size: model ids must be 0..N-1 (default: not checked).",
)
@click.option(
    "--max-steps",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="Most steps a plan may have.",
)
@click.option(
    "--access-mode",
    type=click.Choice(["binary", "index"]),
    default="binary",
    show_default=True,
    help='binary: ["all"] or [] per step; index: lists of earlier step numbers.',
)
@click.option(
    "--allow-empty",
    is_flag=True,
    help="Accept three empty lists (a recursion round keeping its previous answer).",
)
def command(
    file: str,
    workers: int | None,
    max_steps: int,
    access_mode: str,
    allow_empty: bool,
) -> None:
    """Parse raw Conductor output from FILE (or stdin) and print the workflow as JSON.

    Prints {"error": {"code": ..., "message": ...}} and exits 1 when the plan is invalid.
    """
    text = _read_input(file)
    workflow, error = try_parse_plan(
        text,
        workers=workers,
        max_steps=max_steps,
        access_mode=AccessMode(access_mode),
        allow_empty=allow_empty,
    )
    if workflow is not None:
        click.echo(json.dumps(workflow.to_dict(), ensure_ascii=False, indent=2))
        return
    assert error is not None
    click.echo(json.dumps({"error": error.to_dict()}, ensure_ascii=False, indent=2))
    # Raised (not ctx.exit) so that the exit code survives conductor's non-standalone main().
    raise PlanRejected(f"{error.code.value}: {error.message}")
