"""Components called through their ``python_func`` as the pipeline calls them: curation,
validation, sharded evaluation and aggregation chained on real data (about 10 s), and register on
an MLflow SQLite store, which promotes a better model, then keeps the champion (the components'
shape and parameter checks: tests/unit/test_components.py)."""

from __future__ import annotations

import json
from pathlib import Path

from kfp import dsl


def out(kind, path: Path):
    artifact = kind(name=path.name, uri=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    return artifact


def test_register_component_promotes_then_keeps(tmp_path, monkeypatch):
    from conductor_components.register import register
    from conductor_core.pipeline_steps.manifest import ModelManifest

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text('{"model_type": "qwen2"}')
    model = dsl.Model(name="model", uri=str(tmp_path / "model.json"))
    ModelManifest(weights_uri=str(weights), stage="recursive", prompt_style="compact").write(
        model.path
    )
    reasons = []
    for i, accuracy in enumerate((0.7, 0.6)):
        comparison = out(dsl.Artifact, tmp_path / f"cmp{i}")
        Path(comparison.path).mkdir()
        row = {"label": "trained Conductor", "method": "conductor", "accuracy": accuracy}
        (Path(comparison.path) / "comparison.json").write_text(json.dumps({"rows": [row]}))
        registered = dsl.Model(name="registered", uri=str(tmp_path / f"registered{i}.json"))
        reasons.append(
            register.python_func(
                model=model, comparison=comparison, registered=registered, model_name="unit-c"
            )
        )
        assert registered.metadata["promoted"] is (i == 0)
        assert json.loads(Path(registered.path).read_text())["model_version"] == str(i + 1)
    assert reasons[0].startswith("registered unit-c version 1")
    assert reasons[1].startswith("kept models:/unit-c@champion on version 1")


def test_data_eval_and_report_components_chain(tmp_path):
    from conductor_components.aggregate import aggregate
    from conductor_components.curate import curate
    from conductor_components.eval_shard import eval_shard
    from conductor_components.plan_shards import plan_shards
    from conductor_components.validate import validate

    dataset = out(dsl.Dataset, tmp_path / "dataset")
    final = json.loads(curate.python_func(curation_config="pipeline", dataset=dataset))
    assert final["total"] == 480 and dataset.metadata["train"] == 432
    report = out(dsl.HTML, tmp_path / "report.html")
    summary = out(dsl.Markdown, tmp_path / "summary.md")
    checked = validate.python_func(dataset=dataset, report=report, summary=summary)
    assert (checked.problems, checked.passed, checked.reason) == (480, True, "")
    assert Path(report.path).read_text().lower().count("<table") >= 1

    shards = []
    for spec in plan_shards.python_func(count=2):
        records = out(dsl.Artifact, tmp_path / f"shard{spec[0]}")
        n = eval_shard.python_func(
            shard=spec,
            benchmark="held-out",
            records=records,
            conductor="scripted",
            split="test",
            baselines="single,moa",
            limit=12,
        )
        assert n > 0
        shards.append(records)
    metrics = dsl.Metrics(name="metrics", uri=str(tmp_path / "metrics"))
    html = out(dsl.HTML, tmp_path / "agg.html")
    md = out(dsl.Markdown, tmp_path / "agg.md")
    comparison = out(dsl.Artifact, tmp_path / "comparison")
    ahead = aggregate.python_func(
        shards=shards, metrics=metrics, report=html, summary=md, comparison=comparison
    )
    table = json.loads((Path(comparison.path) / "comparison.json").read_text())
    assert ahead is table["conductor_ahead"]
    assert [r["label"].split(" (")[0] for r in table["rows"]] == [
        "trained Conductor",
        "best single worker",
        "mixture of agents",
    ]
    assert metrics.metadata["conductor/accuracy"] == round(table["rows"][0]["accuracy"], 6)
    summary_md = Path(md.path).read_text()
    assert "| trained Conductor |" in summary_md
    # the plots render in the UI's Markdown view: inline, not links to files it cannot see
    assert summary_md.count("](data:image/png;base64,") == 3
    assert ".png)" not in summary_md
    assert "<html" in Path(html.path).read_text().lower()


def _broken_dataset(tmp_path: Path) -> Path:
    """A curated dataset whose first training problem has no reference answer."""
    from conductor_core.pipeline_steps.data_steps import curate_step
    from conductor_core.tasks.problem import read_problems, write_parquet

    folder = tmp_path / "broken"
    curate_step("pipeline", folder, log=lambda _: None)
    problems = read_problems(folder / "train.parquet")
    problems[0] = problems[0].model_copy(update={"reference": ""})
    write_parquet(problems, folder / "train.parquet")
    return folder


def test_a_failing_data_gate_keeps_the_report_as_an_output_artifact(tmp_path):
    """On KFP's local runner: validate succeeds with its report on failing data, the gate after
    it fails the run with the reason, and the report artifact is there afterwards (in a cluster
    a failed task's outputs are never uploaded, so the report must come from a task that
    succeeds)."""
    import kfp.local
    import pytest

    from conductor_components.gate import gate
    from conductor_components.validate import validate

    broken = _broken_dataset(tmp_path)

    @dsl.pipeline(name="data-check")
    def gated():
        data = dsl.importer(artifact_uri=str(broken), artifact_class=dsl.Dataset)
        checked = validate(dataset=data.output)
        gate(passed=checked.outputs["passed"], reason=checked.outputs["reason"])

    root = tmp_path / "kfp"
    kfp.local.init(runner=kfp.local.SubprocessRunner(use_venv=False), pipeline_root=str(root))
    with pytest.raises(RuntimeError, match=r"Inner task failed: \S*'gate'"):
        gated()
    reports = sorted(root.glob("*/validate/report"))
    summaries = sorted(root.glob("*/validate/summary"))
    assert len(reports) == len(summaries) == 1
    assert "Validation FAILED" in summaries[0].read_text()
    assert "<table" in reports[0].read_text().lower()


def test_resolve_model_turns_an_alias_into_the_version_it_points_at(tmp_path, monkeypatch):
    """The evaluation pipeline's uncached first task: a moved alias gives another version, so
    the cached shards after it are run afresh."""
    from conductor_components.resolve_model import resolve_model
    from conductor_core.track.registry import register_version, resolve_model_uri

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    weights = tmp_path / "weights"
    weights.mkdir()
    (weights / "config.json").write_text('{"model_type": "qwen2"}')
    first = register_version(weights, "it-resolve")
    second = register_version(weights, "it-resolve")
    import mlflow

    client = mlflow.MlflowClient(uri)
    client.set_registered_model_alias("it-resolve", "champion", first)
    alias = "models:/it-resolve@champion"
    assert resolve_model.python_func(conductor=alias) == (f"models:/it-resolve/{first}", "cpu")
    client.set_registered_model_alias("it-resolve", "champion", second)
    resolved = resolve_model.python_func(conductor=alias, profile="paper")
    assert (resolved.conductor, resolved.placement) == (f"models:/it-resolve/{second}", "gpu")
    assert resolve_model_uri("models:/it-resolve/1", tracking_uri=uri) == "models:/it-resolve/1"
    import pytest

    from conductor_core.errors import ConfigError

    with pytest.raises(ConfigError, match="no version of the registered model 'it-resolve'"):
        resolve_model_uri("models:/it-resolve@nobody", tracking_uri=uri)
