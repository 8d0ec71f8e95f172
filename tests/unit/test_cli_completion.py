"""Shell completion of ``conductor`` (click's): what it offers for the words typed so far, asked
in this process; the scripts themselves run in a real bash in tests/integration/
test_cli_completion.py."""

from __future__ import annotations

import pytest
from click.shell_completion import ShellComplete

from conductor_core.cli import cli
from conductor_core.cli.completion import COMPLETE_VAR, PROG_NAME


def complete(*words: str) -> list[str]:
    """The values offered after ``conductor WORDS...``, the last word being the one typed."""
    *args, incomplete = words
    shell = ShellComplete(cli, {}, PROG_NAME, COMPLETE_VAR)
    return [item.value for item in shell.get_completions(list(args), incomplete)]


def test_subcommands_options_and_choices_are_offered() -> None:
    top = complete("")
    assert {"solve", "eval", "train", "completion", "plan"} <= set(top)
    assert complete("co") == ["completion"]
    assert complete("train", "--stage", "") == ["base", "adaptive", "recursive"]
    assert complete("completion", "") == ["bash", "zsh", "fish"]
    assert {"run", "aggregate", "compare", "fit-router"} <= set(complete("eval", ""))
    assert "--json" in complete("solve", "--j")


def test_pipeline_commands_and_names_are_offered() -> None:
    pytest.importorskip("kfp", reason="the pipeline command is in the pipelines extra")
    assert {"compile", "run", "submit", "schedule"} <= set(complete("pipeline", ""))
    assert complete("pipeline", "run", "") == ["training", "evaluation", "curation"]
    assert "--no-cache" in complete("pipeline", "submit", "training", "--no")


def test_deprecated_spellings_are_not_offered() -> None:
    assert complete("train", "--out") == ["--out"]
    assert complete("eval", "compare", "--f") == []
