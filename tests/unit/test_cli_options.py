"""One spelling per meaning (``--json``, ``--out``), the old spellings (``--format json|table``,
``--output-dir``, ``--out-dir``) still accepted with a deprecation line on stderr
(``conductor_core/cli/options.py``); every command's options follow the conventions."""

from __future__ import annotations

import json

import click
import pytest
from click.testing import CliRunner

from conductor_core.cli import cli
from conductor_core.cli.options import FORMAT_JSON, OUT_DIR, OUTPUT_DIR, rewrite_args


def _run(argv: list[str]):
    return CliRunner().invoke(cli, argv, prog_name="conductor", catch_exceptions=False)


# -- the rewrite ---------------------------------------------------------------------------------


def test_old_spellings_are_rewritten_with_one_line_each() -> None:
    said: list[str] = []
    rules = [OUTPUT_DIR, FORMAT_JSON]
    args = ["--output-dir", "a", "--format", "json", "x", "--output-dir=b", "--format=table"]
    assert rewrite_args(args, rules, "conductor x", said.append) == [
        "--out",
        "a",
        "--json",
        "x",
        "--out=b",
    ]
    assert said == [
        "conductor x: --output-dir is deprecated and will be removed in the next release; "
        "use --out",
        "conductor x: --format json is deprecated and will be removed in the next release; "
        "use --json",
        "conductor x: --output-dir is deprecated and will be removed in the next release; "
        "use --out",
        "conductor x: --format table is deprecated and will be removed in the next release; "
        "use nothing (it is the default; --json)",
    ]


def test_nothing_after_a_double_dash_and_no_other_token_is_touched() -> None:
    said: list[str] = []
    args = ["--out", "x", "--output", "--out-dirs", "--", "--out-dir", "y"]
    assert rewrite_args(args, [OUT_DIR], "c", said.append) == args
    assert said == []


def test_an_old_value_outside_its_choices_is_a_usage_error() -> None:
    with pytest.raises(click.UsageError, match="'xml' is not one of json, table"):
        rewrite_args(["--format", "xml"], [FORMAT_JSON], "c", lambda _: None)


# -- the commands --------------------------------------------------------------------------------


def test_train_out_and_its_old_spelling(tmp_path) -> None:
    out = str(tmp_path / "o")
    new = _run(["train", "--profile", "tiny", "--out", out, "--print-config"])
    old = _run(["train", "--profile", "tiny", "--output-dir", out, "--print-config"])
    assert new.exit_code == old.exit_code == 0
    assert f"output_dir: {tmp_path / 'o'}" in new.stdout
    assert old.stdout == new.stdout and new.stderr == ""
    assert old.stderr.strip() == (
        "conductor train: --output-dir is deprecated and will be removed in the next release; "
        "use --out"
    )
    assert "--output-dir" not in _run(["train", "--help"]).stdout


def test_pipeline_compile_out_and_its_old_spelling(tmp_path, monkeypatch) -> None:
    pytest.importorskip("kfp", reason="the pipelines extra")
    import conductor_pipelines.registry as registry

    written = []
    monkeypatch.setattr(
        registry, "compile_pipeline", lambda name, path, **kw: written.append(path) or path
    )
    new = _run(["pipeline", "compile", "curation", "--out", str(tmp_path / "a")])
    old = _run(["pipeline", "compile", "curation", "--out-dir", str(tmp_path / "b")])
    assert new.exit_code == old.exit_code == 0
    assert written == [tmp_path / "a" / "curation.yaml", tmp_path / "b" / "curation.yaml"]
    assert new.stderr == ""
    assert "conductor pipeline compile: --out-dir is deprecated" in old.stderr
    assert "use --out" in old.stderr
    assert "--out-dir" not in _run(["pipeline", "compile", "--help"]).stdout


def test_eval_compare_json_and_its_old_spelling(monkeypatch) -> None:
    import conductor_core.evaluate.mlflow_logging as logging_
    from conductor_core.evaluate.mlflow_logging import MethodRun

    row = MethodRun(
        run_id="0123456789abcdef",
        method="conductor:scripted",
        evaluation="demo",
        parent_run_id="p",
        params={},
        metrics={"accuracy": 0.5, "accuracy/demo": 0.5, "calls_per_question": 2.0},
    )
    monkeypatch.setattr(logging_, "compare_runs", lambda *a, **kw: [row])
    new = _run(["eval", "compare", "--json"])
    old = _run(["eval", "compare", "--format", "json"])
    assert new.exit_code == old.exit_code == 0
    assert json.loads(new.stdout) == json.loads(old.stdout) == [row.to_dict()]
    assert new.stderr == "" and "--format json is deprecated" in old.stderr
    table = _run(["eval", "compare"])
    old_table = _run(["eval", "compare", "--format", "table"])
    assert "conductor:scripted" in table.stdout and table.stdout == old_table.stdout
    assert "--format table is deprecated" in old_table.stderr
    bad = CliRunner().invoke(cli, ["eval", "compare", "--format", "xml"], prog_name="conductor")
    assert bad.exit_code == 2 and "'xml' is not one of json, table" in bad.stderr


# -- the conventions, over every command ---------------------------------------------------------


def _commands(group: click.Group, ctx: click.Context, path: str = "conductor"):
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is None:
            continue
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, click.Context(cmd, parent=ctx), f"{path} {name}")
        else:
            yield f"{path} {name}", cmd


def test_every_command_spells_json_and_out_one_way() -> None:
    """Machine-readable output is ``--json`` (a flag); where a command writes is ``--out``."""
    pytest.importorskip("kfp", reason="the pipeline command is in the pipelines extra")
    seen = {}
    for path, cmd in _commands(cli, click.Context(cli)):
        for param in cmd.params:
            opts = [o for o in param.opts + param.secondary_opts if o.startswith("--")]
            seen.update(dict.fromkeys(opts, path))
            for opt in opts:
                assert opt not in ("--format", "--output", "--output-dir", "--out-dir"), path
                assert not opt.startswith(("--out-", "--output")), (path, opt)
                if opt == "--json":
                    assert getattr(param, "is_flag", False), path
    assert {"--json", "--out"} <= set(seen)


def test_top_level_help_lists_the_commands_without_importing_them(monkeypatch) -> None:
    from conductor_core.cli import SUBCOMMANDS, LazyGroup

    loaded: list[str] = []
    real = LazyGroup.get_command

    def recording(self, ctx, name):
        loaded.append(name)
        return real(self, ctx, name)

    monkeypatch.setattr(LazyGroup, "get_command", recording)
    result = _run(["--help"])
    assert result.exit_code == 0
    for name, (_, short_help) in SUBCOMMANDS.items():
        assert f"{name}  " in result.output and short_help in result.output
    assert not set(loaded) & set(SUBCOMMANDS)  # only other packages' commands are loaded
