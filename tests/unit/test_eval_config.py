"""The evaluation config (YAML in and out, errors naming the field) and the library call
``run_shard`` on the bundled demo slice with the bundled simulated pool: records, report, the
shard's files, and a resume that does no new work."""

from __future__ import annotations

import json

import pytest
import yaml

from conductor_core.errors import ConfigError
from conductor_core.evaluate import EvalConfig, load_eval_config, parse_eval_config, run_shard
from conductor_core.evaluate.records import read_records


def test_yaml_round_trip(tmp_path) -> None:
    config = EvalConfig(
        benchmark="livecodebench",
        options={"version": "v5"},
        shard="2/8",
        baselines="single, moa:1,sc:0:5",
        evaluate_conductor=False,
        repeats=4,
        setting="constrained",
        conductor_key_env="CONDUCTOR_KEY",
        mlflow={"enabled": True, "experiment": "exp"},
    )
    assert config.baselines == ["single", "moa:1", "sc:0:5"]
    assert (config.shard.index, config.shard.count, config.shard.tag) == (2, 8, "2of8")
    path = tmp_path / "eval.yaml"
    config.to_yaml(path)
    assert yaml.safe_load(path.read_text())["shard"] == "2/8"
    assert load_eval_config(path) == config
    # the shard may also be written as a mapping
    data = yaml.safe_load(path.read_text())
    data["shard"] = {"index": 2, "count": 8}
    assert parse_eval_config(data) == config


def test_overrides_win_and_nested_fields_merge(tmp_path) -> None:
    path = tmp_path / "eval.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "benchmark": "demo",
                "repeats": 3,
                "options": {"version": "v5", "other": 1},
                "mlflow": {"experiment": "mine"},
            }
        )
    )
    config = load_eval_config(
        path, {"repeats": 2, "options": {"version": "v6"}, "mlflow": {"enabled": True}}
    )
    assert config.repeats == 2
    assert config.options == {"version": "v6", "other": 1}
    assert config.mlflow.enabled and config.mlflow.experiment == "mine"


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"benchmark": "demo", "repeatz": 2}, "repeatz: unknown field"),
        ({"benchmark": "demo", "repeats": 0}, "repeats:"),
        ({"benchmark": "demo", "shard": "3/2"}, "shard: index (3) must be below count (2)"),
        ({"benchmark": "demo", "shard": "half"}, "shard: expected 'i/n'"),
        ({"benchmark": "demo", "mlflow": {"enable": True}}, "mlflow.enable: unknown field"),
        ({"benchmark": "demo", "conductor_key_env": "sk-123"}, "conductor_key_env: must be"),
        ({"repeats": 2}, "benchmark: Field required"),
    ],
)
def test_a_bad_field_is_named(tmp_path, data, field) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as exc:
        load_eval_config(path)
    assert field in str(exc.value) and str(path) in str(exc.value)


def test_missing_or_malformed_file(tmp_path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_eval_config(tmp_path / "nothing.yaml")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="mapping"):
        load_eval_config(tmp_path / "list.yaml")
    with pytest.raises(ConfigError, match="nothing to evaluate"):
        parse_eval_config({"benchmark": "demo", "evaluate_conductor": False})


def test_run_shard_writes_records_report_and_config_then_resumes(tmp_path) -> None:
    out = tmp_path / "eval"
    config = EvalConfig(
        benchmark="demo", limit=6, baselines=["single:0"], repeats=2, output_dir=str(out)
    )
    first = run_shard(config, progress=False)

    methods = {"conductor:scripted", "single:sim-math-expert"}
    assert set(first.methods) == methods
    records = read_records(first.records_path)
    assert first.records_path == out / "records-0of1.jsonl"
    assert {r.method for r in records} == methods
    assert len(records) == first.records == first.new_records == 2 * first.problems * 2
    assert first.problems == first.total_problems == 6
    assert set(first.summary.methods) == methods

    for key in ("markdown", "html", "summary"):
        assert (out / first.report[key].rsplit("/", 1)[-1]).is_file()
    assert "conductor:scripted" in (out / "report.md").read_text()
    assert load_eval_config(out / "config-0of1.yaml") == config
    shard_problems = [json.loads(line) for line in (out / "problems-0of1.jsonl").open()]
    assert len(shard_problems) == 6
    result = json.loads((out / "result-0of1.json").read_text())
    assert result["new_records"] == len(records) and result["mlflow_run_id"] is None
    assert set(result["overall"]) == methods
    # the simulated workers knew the demo questions: some answers are right
    assert any(r.correct for r in records)

    again = run_shard(config, progress=False)
    assert again.new_records == 0 and again.records == len(records)
    assert read_records(again.records_path) == records  # nothing appended
    assert again.summary == first.summary


def test_run_shard_fails_before_writing_on_a_bad_baseline(tmp_path) -> None:
    from conductor_core.errors import ConductorError

    out = tmp_path / "eval"
    config = EvalConfig(benchmark="demo", baselines=["bogus"], output_dir=str(out))
    with pytest.raises(ConductorError, match="unknown baseline"):
        run_shard(config, progress=False)
    assert not out.exists()


def test_cli_config_file_with_command_line_overrides(tmp_path) -> None:
    from click.testing import CliRunner

    from conductor_core.cli import cli

    path = tmp_path / "eval.yaml"
    EvalConfig(benchmark="demo", repeats=3, baselines=["moa"], output_dir="x").to_yaml(path)
    result = CliRunner().invoke(
        cli,
        [
            "eval",
            "run",
            "--config",
            str(path),
            "--repeats",
            "2",
            "--shard",
            "1/2",
            "--print-config",
        ],
    )
    assert result.exit_code == 0, result.output
    printed = yaml.safe_load(result.output)
    assert printed["repeats"] == 2 and printed["shard"] == "1/2"  # given options win
    assert printed["baselines"] == ["moa"] and printed["output_dir"] == "x"  # the rest: the file
    missing = CliRunner().invoke(cli, ["eval", "run", "--print-config"])
    assert missing.exit_code == 2 and "--benchmark" in missing.output
