"""``conductor curate``: build a training dataset, gated by Great Expectations.

Exit codes: 0 written; 1 the data failed an expectation (nothing written to the output folder, the
report of the failure lies beside it); 2 a user error such as a bad config (one line).
"""

from __future__ import annotations

import sys

import click


@click.command(name="curate")
@click.option(
    "--config",
    "config_path",
    required=True,
    help="Curation config YAML, or 'example' for the bundled example.",
)
@click.option(
    "--out",
    "out_dir",
    default=None,
    type=click.Path(file_okay=False),
    help="Output folder (default: output_dir of the config; ./curated-example for the example).",
)
@click.option("--no-progress", is_flag=True, help="Hide progress bars.")
def command(config_path: str, out_dir: str | None, no_progress: bool) -> None:
    """Curate problems: load, normalise, dedup, decontaminate, filter, mix, split, validate."""
    # lazy: conductor --help imports every command module; this adds ~105 ms
    from conductor_core.data.config import load_config
    from conductor_core.data.curation import CurationFailed, curate

    config = load_config(config_path)
    try:
        result = curate(config, out_dir=out_dir, progress=not no_progress)
    except CurationFailed as exc:
        click.echo(f"curation FAILED validation: nothing written to {out_dir or config.output_dir}")
        click.echo(exc.outcome.summary())
        click.echo(f"report: {exc.report_md}")
        click.echo(f"        {exc.report_html}")
        sys.exit(1)
    stats = result.stats
    click.echo(f"curated {stats['final']['total']} problems (target {stats['target_size']})")
    click.echo(f"  loaded {stats['loaded']['total']}")
    for name, info in stats["filters"].items():
        click.echo(f"  {name}: removed {info['removed']}")
    click.echo(
        f"  train {stats['train']['total']}, validation {stats['validation']['total']}; "
        f"by domain {stats['final']['by_domain']}"
    )
    click.echo(result.outcome.summary())
    click.echo(f"wrote {result.out_dir}")
