"""One spelling per meaning across the ``conductor`` commands, and the old spellings kept for one
release.

The spellings (``docs/cli.md``):

* ``--json``: print machine-readable JSON instead of the tables (``solve``, ``grade``,
  ``eval compare``); commands that only print JSON (``plan``, ``parse``, ``pipeline submit``)
  need no flag;
* ``--out``: where a command writes, a file or a folder as its help says (``eval run``,
  ``eval aggregate``, ``eval fit-router``, ``curate``, ``tasks export``,
  ``simulate pool-for-endpoint``, ``train``, ``pipeline compile``).

The spellings they replace (``--format json|table``, ``--output-dir``, ``--out-dir``) still work
until the next release: a command built with :class:`RenamedOptionsCommand` rewrites them to the
new spelling before parsing, and says so on stderr. They are not in ``--help``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import click


@dataclass(frozen=True)
class Renamed:
    """An option spelling that is deprecated.

    ``old`` is replaced by ``new``. With ``values`` the old option took a value that the new
    spelling says otherwise: ``values[value]`` are the tokens that replace ``old value`` (e.g.
    ``--format json`` -> ``["--json"]``, ``--format table`` -> ``[]``).
    """

    old: str
    new: str
    values: dict[str, tuple[str, ...]] | None = field(default=None, hash=False)

    def message(self, command: str, value: str | None = None) -> str:
        """The deprecation line printed on stderr."""
        given = self.old if value is None else f"{self.old} {value}"
        if self.values is not None and value is not None:
            now = " ".join(self.values.get(value, ())) or f"nothing (it is the default; {self.new})"
        else:
            now = self.new
        return (
            f"{command}: {given} is deprecated and will be removed in the next release; use {now}"
        )


def rewrite_args(
    args: Sequence[str], renamed: Sequence[Renamed], command: str, warn=None
) -> list[str]:
    """``args`` with every deprecated spelling of ``renamed`` replaced by its new one (up to a
    ``--``); ``warn`` (default: stderr) gets one line per replacement. An old option's value not
    in its ``values`` is left for the parser to refuse."""
    say = warn or (lambda line: click.echo(line, err=True))
    by_old = {r.old: r for r in renamed}
    out: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        if token == "--":
            out.extend(args[i:])
            break
        name, eq, inline = token.partition("=")
        rule = by_old.get(name)
        if rule is None:
            out.append(token)
            i += 1
            continue
        if rule.values is None:
            say(rule.message(command))
            out.append(rule.new + (eq + inline if eq else ""))
            i += 1
            continue
        # an old option with a value: --format json, --format=json
        if eq:
            value, i = inline, i + 1
        elif i + 1 < len(args):
            value, i = args[i + 1], i + 2
        else:
            out.append(token)  # no value: the parser says so
            i += 1
            continue
        if value not in rule.values:
            choices = ", ".join(rule.values)
            raise click.UsageError(f"{rule.old}: {value!r} is not one of {choices}")
        say(rule.message(command, value))
        out.extend(rule.values[value])
    return out


class RenamedOptionsCommand(click.Command):
    """A click command that accepts the deprecated spellings in ``renamed`` (see the module)."""

    def __init__(self, *args, renamed: Sequence[Renamed] = (), **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.renamed = tuple(renamed)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if self.renamed and not ctx.resilient_parsing:  # not while completing
            args = rewrite_args(args, self.renamed, ctx.command_path)
        return super().parse_args(ctx, args)


# The renames of this release, by command.
FORMAT_JSON = Renamed("--format", "--json", values={"json": ("--json",), "table": ()})
OUTPUT_DIR = Renamed("--output-dir", "--out")
OUT_DIR = Renamed("--out-dir", "--out")
