"""The ``conductor`` command.

Each subcommand lives in its own module of this package and exposes a click command named
``command``; modules are imported only when their subcommand runs or shows its help (``conductor
--help`` takes each one-line help from :data:`SUBCOMMANDS`), so the command starts fast and a
missing optional dependency only affects the subcommand that needs it. Shell completion of the
command names loads them all. Commands of
other installed packages join through the ``conductor.commands`` entry-point group (the
``pipeline`` command of ``conductor_pipeline_runner``), so this library never imports them.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from conductor_core import __version__
from conductor_core.errors import ConductorError

# subcommand name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "solve": ("conductor_core.cli.solve", "Plan, run and answer a question on a worker pool."),
    "plan": ("conductor_core.cli.plan", "Ask the Conductor for a plan only (no execution)."),
    "parse": ("conductor_core.cli.parse", "Parse raw Conductor output; print the plan or error."),
    "simulate": ("conductor_core.cli.simulate", "Simulated workers and their HTTP server."),
    "serve": ("conductor_core.cli.serve", "Serve the Conductor as an OpenAI-compatible API."),
    "grade": ("conductor_core.cli.grade", "Grade a file of answers against a file of problems."),
    "tasks": ("conductor_core.cli.tasks", "Benchmark sources: export problems as JSONL."),
    "train": (
        "conductor_core.cli.train",
        "GRPO training of the Conductor.",
    ),
    "eval": ("conductor_core.cli.eval", "Evaluate on benchmarks with baselines; reports."),
    "curate": ("conductor_core.cli.curate", "Curate a training dataset (gated by expectations)."),
    "completion": ("conductor_core.cli.completion", "Print the shell completion script."),
}


ENTRY_POINT_GROUP = "conductor.commands"


def _plugins() -> dict[str, object]:
    """Commands other packages add through the ``conductor.commands`` entry points."""
    from importlib.metadata import entry_points

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when it is invoked (or its own
    help is asked for): ``conductor --help`` lists this package's commands with their help from
    :data:`SUBCOMMANDS`, importing none of them."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        own = {name for name, (mod, _) in SUBCOMMANDS.items() if _module_exists(mod)}
        return sorted(own | set(_plugins()))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The "Commands" section of ``--help``: this package's from :data:`SUBCOMMANDS`
        (click's own loads every command for its help line), other packages' loaded."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        for name in names:
            if name in SUBCOMMANDS:
                rows.append((name, SUBCOMMANDS[name][1]))
                continue
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in SUBCOMMANDS:
            plugin = _plugins().get(cmd_name)
            if plugin is None:
                return None
            try:
                return plugin.load()  # type: ignore[attr-defined]
            except ImportError as exc:
                raise ConductorError(
                    f"`conductor {cmd_name}` needs {exc.name or 'a missing package'}; install "
                    "the `pipelines` extra: pip install 'conductor-core[pipelines]'"
                ) from exc
        module_name, short_help = SUBCOMMANDS[cmd_name]
        if not _module_exists(module_name):
            return None
        module = importlib.import_module(module_name)
        cmd: click.Command = module.command
        cmd.short_help = cmd.short_help or short_help
        return cmd


def _module_exists(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="conductor")
def cli() -> None:
    """Conductor: learned orchestration of LLM worker pools."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors become one clear line on stderr and exit code 2."""
    try:
        rc = cli.main(args=argv, prog_name="conductor", standalone_mode=False)
        if isinstance(rc, int) and rc:
            sys.exit(rc)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except ConductorError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
