"""The pipelines' steps as library calls (conductor_core.pipeline_steps), without KFP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor_core.errors import ConductorError, ConfigError
from tests.support.eval_records import eval_record


def test_run_folder_is_under_the_root_and_safe(tmp_path, monkeypatch):
    from conductor_core.pipeline_steps.context import artifact_root, run_folder

    monkeypatch.setenv("CONDUCTOR_ARTIFACT_ROOT", str(tmp_path / "art"))
    assert artifact_root() == str(tmp_path / "art")
    assert run_folder("", "abc/../x y", "base") == str(tmp_path / "art" / "abc-..-x-y" / "base")
    assert run_folder("s3://b/p", "r1", "base") == "s3://b/p/r1/base"
    with pytest.raises(ConfigError, match="run_id"):
        run_folder("", "", "base")


def test_shard_specs():
    from conductor_core.pipeline_steps.eval_steps import shard_specs

    assert shard_specs(3) == ["0/3", "1/3", "2/3"]
    with pytest.raises(ConfigError, match="eval_shards"):
        shard_specs(0)


def test_parameter_check_names_every_bad_parameter():
    from conductor_core.pipeline_steps.params import check_training_params

    good = {
        "profile": "tiny",
        "launcher": "pod",
        "metric": "accuracy",
        "baselines": "single,moa",
    }
    assert check_training_params(**good)["profile"] == "tiny"
    with pytest.raises(ConfigError) as err:
        check_training_params(
            profile="tinny",
            launcher="slurm",
            metric="accuracy",
            baselines="single,bogus",
            eval_shards=0,
            steps={"base": -1},
            seed=-2,
            curation_config="no-such-config",
        )
    message = str(err.value)
    for name in (
        "profile: 'tinny'",
        "launcher: 'slurm'",
        "baselines:",
        "eval_shards",
        "base_steps",
        "seed: -2",
        "curation_config",
    ):
        assert name in message
    with pytest.raises(ConfigError, match="pool:"):
        check_training_params(**good, pool="/no/such/pool.yaml")


def test_manifest_round_trip_and_clear_errors(tmp_path):
    from conductor_core.pipeline_steps.manifest import ModelManifest, read_manifest

    m = ModelManifest(weights_uri="s3://b/run/base/model", stage="base", prompt_style="compact")
    path = m.write(tmp_path / "m" / "manifest.json")
    assert read_manifest(path) == m
    assert read_manifest(path.parent) == m  # a folder holding manifest.json
    with pytest.raises(ConfigError, match="does not exist"):
        read_manifest(tmp_path / "nothing.json")
    (tmp_path / "bad.json").write_text('{"weights": 1}')
    with pytest.raises(ConfigError, match="not a model manifest"):
        read_manifest(tmp_path / "bad.json")


@pytest.fixture(scope="module")
def curated(tmp_path_factory):
    from conductor_core.pipeline_steps.data_steps import curate_step

    out = tmp_path_factory.mktemp("curated") / "dataset"
    stats = curate_step("pipeline", out, log=lambda _: None)
    return out, stats


def test_pipeline_curation_keeps_the_held_out_split_out(curated):
    from conductor_core.tasks.problem import read_problems

    out, stats = curated
    train = read_problems(out / "train.parquet") + read_problems(out / "validation.parquet")
    assert stats["final"]["total"] == len(train) == 480
    assert {p.metadata["split"] for p in train} == {"train", "validation"}
    assert all(not p.id.startswith("train-") or p.metadata.get("split") != "test" for p in train)
    assert set(stats["final"]["by_domain"]) == {"math", "mcq", "freeform"}


def test_validate_step_passes_and_fails_with_a_report(curated, tmp_path):
    import shutil

    from conductor_core.pipeline_steps.data_steps import validate_step
    from conductor_core.tasks.problem import read_problems, write_parquet

    out, _ = curated
    checked = validate_step(out, tmp_path / "r.html", tmp_path / "r.md", log=lambda _: None)
    assert checked["passed"] and checked["problems"] == 480
    assert "<html" in (tmp_path / "r.html").read_text().lower()

    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    problems = read_problems(broken / "train.parquet")
    problems[0] = problems[0].model_copy(update={"reference": ""})
    write_parquet(problems, broken / "train.parquet")
    with pytest.raises(ConductorError, match="failed 1 expectation"):
        validate_step(broken, tmp_path / "b.html", tmp_path / "b.md", log=lambda _: None)
    assert (tmp_path / "b.md").is_file()  # the report is written either way


def test_a_failed_validation_reports_and_the_gate_after_it_stops_the_run(curated, tmp_path):
    """The pipeline's validate task must succeed with its report (KFP uploads a failed task's
    outputs nowhere) and say why; the gate task after it fails with that one line."""
    import shutil

    from conductor_core.pipeline_steps.data_steps import gate_step, validate_step
    from conductor_core.tasks.problem import read_problems, write_parquet

    out, _ = curated
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    problems = read_problems(broken / "train.parquet")
    problems[0] = problems[0].model_copy(update={"reference": ""})
    write_parquet(problems, broken / "train.parquet")
    html, md = tmp_path / "b.html", tmp_path / "b.md"
    verdict = validate_step(broken, html, md, log=lambda _: None, raise_on_failure=False)
    assert verdict["passed"] is False and verdict["problems"] == 480
    assert verdict["reason"].startswith("dataset broken failed 1 expectation(s): [")
    assert "\n" not in verdict["reason"]
    assert "Validation FAILED" in md.read_text() and "<html" in html.read_text().lower()
    with pytest.raises(ConductorError) as err:
        gate_step(verdict["passed"], verdict["reason"], log=lambda _: None)
    assert str(err.value) == verdict["reason"]
    gate_step(True, "", log=lambda _: None)  # a passed check lets the run go on


def test_validate_step_rejects_a_folder_that_is_not_a_dataset(tmp_path):
    from conductor_core.pipeline_steps.data_steps import validate_step

    with pytest.raises(ConfigError, match="not a curated dataset"):
        validate_step(tmp_path, tmp_path / "r.html", tmp_path / "r.md")


def test_comparison_picks_the_best_single_worker_and_moa():
    from conductor_core.evaluate.aggregate import OVERALL, Stats, Summary
    from conductor_core.pipeline_steps.eval_steps import comparison, comparison_markdown

    def row(method, acc, calls):
        return Stats(method=method, benchmark=OVERALL, accuracy=acc, calls_per_question=calls)

    summary = Summary(
        methods=["conductor", "single:a", "single:b", "moa:1"],
        benchmarks=["x"],
        rows=[
            row("conductor", 0.8, 1.5),
            row("single:a", 0.5, 1),
            row("single:b", 0.6, 1),
            row("moa:1", 0.7, 5),
        ],
    )
    table = comparison(summary)
    assert [r["method"] for r in table["rows"]] == ["conductor", "single:b", "moa:1"]
    assert table["rows"][1]["label"] == "best single worker (b)"
    assert table["conductor_ahead"] is True
    assert "| trained Conductor | 80.0%" in comparison_markdown(table)
    summary.rows[0].accuracy = 0.6  # a tie is not ahead
    assert comparison(summary)["conductor_ahead"] is False


def test_eval_shard_and_aggregate_on_the_held_out_split(tmp_path):
    from conductor_core.pipeline_steps.eval_steps import aggregate_step, eval_shard_step

    shards = []
    for spec in ("0/2", "1/2"):
        out = tmp_path / spec.replace("/", "of")
        result = eval_shard_step(
            shard=spec,
            out_dir=out,
            benchmark="held-out",
            split="test",
            conductor="scripted",
            baselines="single:0",
            limit=20,
            log=lambda _: None,
        )
        assert result["methods"] == ["conductor", "single:sim-math"]
        shards.append(out)
    agg = aggregate_step(shards, tmp_path / "agg", log=lambda _: None)
    table = json.loads((tmp_path / "agg" / "comparison.json").read_text())
    assert table == agg["comparison"]
    assert [r["label"] for r in table["rows"]] == [
        "trained Conductor",
        "best single worker (sim-math)",
    ]
    # every problem was evaluated once per method across the two shards
    lines = [
        line
        for s in shards
        for f in s.glob("records-*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert len(lines) == 2 * 20
    with pytest.raises(ConductorError, match="no records"):
        aggregate_step([tmp_path / "empty"], tmp_path / "agg2", log=lambda _: None)


def test_aggregate_step_counts_a_rerun_record_once(tmp_path):
    """A shard's records file keeps an infrastructure failure and, appended after it, its re-run:
    the pipeline's aggregate counts the re-run only, as `conductor eval aggregate` does."""
    from conductor_core.evaluate.records import RecordWriter
    from conductor_core.pipeline_steps.eval_steps import aggregate_step

    shard = tmp_path / "0of1"
    with RecordWriter(shard / "records-0of1.jsonl") as w:
        w.write(eval_record("p1", "conductor", infra_error=True))
        w.write(eval_record("p2", "conductor", correct=False))
        w.write(eval_record("p1", "conductor"))
        w.write(eval_record("p1", "single:a", correct=False))
        w.write(eval_record("p2", "single:a", correct=False))
    lines = []
    result = aggregate_step([shard], tmp_path / "agg", log=lines.append)
    assert result["records"] == 4
    assert lines[-1].startswith("aggregated 4 records of 1 shard(s)")
    conductor = result["comparison"]["rows"][0]
    assert conductor["method"] == "conductor" and conductor["accuracy"] == 0.5
    summary = json.loads(Path(result["paths"]["summary"]).read_text())
    overall = next(
        r for r in summary["rows"] if r["method"] == "conductor" and r["benchmark"] == "average"
    )
    assert overall["records"] == 2 and overall["infra_failure_rate"] == 0


def test_train_config_takes_the_warmup_steps_or_keeps_the_profiles(tmp_path):
    from conductor_core.pipeline_steps.train_steps import train_config

    common = {"stage": "base", "profile": "tiny", "dataset_dir": tmp_path, "pool": "bundled"}
    kept = train_config(**common, output_dir=tmp_path / "a")
    short = train_config(**common, output_dir=tmp_path / "b", warmup_steps=10)
    assert kept.warmup.enabled and kept.warmup.steps == 300
    assert short.warmup.enabled and short.warmup.steps == 10


def test_train_config_takes_the_expert_start_steps_or_keeps_the_profiles(tmp_path):
    from conductor_core.pipeline_steps.train_steps import train_config

    common = {"stage": "recursive", "profile": "tiny", "dataset_dir": tmp_path, "pool": "bundled"}
    kept = train_config(**common, output_dir=tmp_path / "a")
    short = train_config(**common, output_dir=tmp_path / "b", expert_start_steps=10)
    assert kept.expert_start.enabled and kept.expert_start.steps == 400
    assert short.expert_start.enabled and short.expert_start.steps == 10
    assert short.expert_start.learning_rate == kept.expert_start.learning_rate  # only the steps
    base = train_config(
        **{**common, "stage": "base"}, output_dir=tmp_path / "c", expert_start_steps=10
    )
    assert not base.expert_start.enabled  # a stage without one does not get one


def test_train_config_takes_the_seed_for_training_and_the_tiny_weights_or_keeps_the_profiles(
    tmp_path,
):
    from conductor_core.pipeline_steps.train_steps import train_config

    common = {"stage": "base", "profile": "tiny", "dataset_dir": tmp_path, "pool": "bundled"}
    kept = train_config(**common, output_dir=tmp_path / "a")
    seeded = train_config(**common, output_dir=tmp_path / "b", seed=3)
    assert (kept.seed, kept.model.tiny.seed) == (0, 0)
    assert (seeded.seed, seeded.model.tiny.seed) == (3, 3)
    assert seeded.model.tiny.layers == kept.model.tiny.layers  # the rest of the shape is kept
