"""``conductor completion SHELL``: print the shell completion script of ``conductor``.

Completion is click's: the script calls ``conductor`` back with ``_CONDUCTOR_COMPLETE`` set, and
the command lists the subcommands, options and choices that fit the words typed so far (the
pipelines' names, ``--stage`` values, files and folders where a path is asked). Install it once::

    conductor completion bash >> ~/.bashrc          # or: eval "$(conductor completion bash)"
    conductor completion zsh > ~/.zfunc/_conductor   # a folder on $fpath, then compinit
    conductor completion fish > ~/.config/fish/completions/conductor.fish
"""

from __future__ import annotations

import click

from conductor_core.cli import cli

SHELLS = ("bash", "zsh", "fish")
PROG_NAME = "conductor"
COMPLETE_VAR = "_CONDUCTOR_COMPLETE"
"""The variable click's completion scripts set when they call the command back."""


def completion_script(shell: str) -> str:
    """The completion script of ``conductor`` for ``shell`` (bash, zsh or fish)."""
    from click.shell_completion import get_completion_class

    cls = get_completion_class(shell)
    if cls is None:  # pragma: no cover (SHELLS are click's own)
        raise click.UsageError(f"no completion for {shell}; give one of {', '.join(SHELLS)}")
    return cls(cli, {}, PROG_NAME, COMPLETE_VAR).source()


@click.command("completion")
@click.argument("shell", type=click.Choice(SHELLS))
def command(shell: str) -> None:
    """Print the completion script for SHELL (bash 4.4+, zsh or fish).

    \b
      bash:  conductor completion bash >> ~/.bashrc
      zsh:   conductor completion zsh > "${fpath[1]}/_conductor"
      fish:  conductor completion fish > ~/.config/fish/completions/conductor.fish
    """
    click.echo(completion_script(shell), nl=False)
