"""The registry of baselines (conductor_core.evaluate.specs.BASELINES) is what the command line
accepts and what its help lists: the help is made from it, so it cannot leave one out."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from conductor_core.cli import cli
from conductor_core.errors import ConductorError
from conductor_core.evaluate.specs import BASELINES, baseline_forms, build_baselines


def _help() -> str:
    result = CliRunner().invoke(cli, ["eval", "run", "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def test_eval_run_help_lists_every_baseline_of_the_registry() -> None:
    text = _help()
    flat = " ".join(text.split())
    option = re.search(r"--baselines TEXT Comma-separated baselines: (.*?) \(see below\)", flat)
    assert option is not None, text
    assert option.group(1).split(", ") == baseline_forms()
    table = text[text.index("Baselines (--baselines, comma-separated):") :]
    listed = [
        line.split()[0]
        for line in table.splitlines()[1:]
        if line.startswith("  ") and not line.startswith("   ")
    ]
    for form in baseline_forms():
        assert form in listed, f"{form} is not in the help's table"
    for kind in ("smoothie", "routerdc", "masrouter"):
        assert any(form.startswith(kind) for form in baseline_forms())


def test_every_spec_goes_through_the_registry() -> None:
    assert {form.split(":")[0].split("[")[0] for form in baseline_forms()} == set(BASELINES)
    with pytest.raises(ConductorError) as err:
        build_baselines(["nope:1"], pool=None)  # type: ignore[arg-type]
    for form in baseline_forms():
        assert form in str(err.value)
