"""``conductor tasks``: list benchmark sources and export them as Problem JSONL."""

from __future__ import annotations

import click

from conductor_core.errors import ConfigError
from conductor_core.tasks.problem import write_jsonl


@click.group("tasks")
def command() -> None:
    """Benchmark sources: list them, export one (or a slice) as Problem JSONL."""


@command.command("list")
def list_cmd() -> None:
    """List the benchmarks, their hub source, expected columns and options."""
    from rich.console import Console
    from rich.table import Table

    # lazy: conductor --help imports every command module; this adds ~7 ms
    from conductor_core.tasks.sources import INFO

    table = Table(title="Benchmarks (--path takes JSONL/JSON/Parquet with these columns)")
    for col in ("name", "domain", "hub source", "columns", "options"):
        table.add_column(col, overflow="fold")
    for info in INFO.values():
        table.add_row(info.name, info.domain, info.hub, info.columns, info.options or "-")
    Console().print(table)


@command.command("export")
@click.argument("name")
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="Output JSONL.")
@click.option("--path", default=None, help="Local file or directory in the published schema.")
@click.option("--split", default=None, help="Dataset split (BigCodeBench: complete|instruct).")
@click.option("--limit", default=None, type=click.IntRange(min=0), help="Keep the first N.")
@click.option(
    "--version", "version", default=None, help="LiveCodeBench v1..v6; BigCodeBench hub split."
)
@click.option(
    "--only-new", is_flag=True, default=None, help="LiveCodeBench: only problems new in --version."
)
@click.option("--start", default=None, help="LiveCodeBench: first release date (YYYY-MM-DD).")
@click.option("--end", default=None, help="LiveCodeBench: last release date (YYYY-MM-DD).")
@click.option("--subset", default=None, help="BigCodeBench: hard|full.")
@click.option(
    "--option",
    "extra",
    multiple=True,
    metavar="KEY=VALUE",
    help="Any other loader option (e.g. subject=anatomy, hf_id=org/name, hf_revision=COMMIT).",
)
def export_cmd(
    name: str,
    out: str,
    path: str | None,
    split: str | None,
    limit: int | None,
    version: str | None,
    only_new: bool | None,
    start: str | None,
    end: str | None,
    subset: str | None,
    extra: tuple[str, ...],
) -> None:
    """Write benchmark NAME as Problem JSONL to --out."""
    # lazy: conductor --help imports every command module; this adds ~7 ms
    from conductor_core.tasks.sources import load_benchmark

    options: dict[str, object] = {
        "version": version,
        "only_new": True if only_new else None,
        "start": start,
        "end": end,
        "subset": subset,
    }
    for item in extra:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option must be KEY=VALUE, got {item!r}")
        options[key.strip()] = value
    problems = load_benchmark(name, path=path, split=split, limit=limit, **options)
    n = write_jsonl(problems, out)
    click.echo(f"wrote {n} problem(s) of {name} to {out}")
