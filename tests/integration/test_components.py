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
    from components.register import register
    from conductor_core.pipeline.manifest import ModelManifest

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
    from components.aggregate import aggregate
    from components.curate import curate
    from components.eval_shard import eval_shard
    from components.plan_shards import plan_shards
    from components.validate import validate

    dataset = out(dsl.Dataset, tmp_path / "dataset")
    final = json.loads(curate.python_func(curation_config="pipeline", dataset=dataset))
    assert final["total"] == 480 and dataset.metadata["train"] == 432
    report = out(dsl.HTML, tmp_path / "report.html")
    summary = out(dsl.Markdown, tmp_path / "summary.md")
    assert validate.python_func(dataset=dataset, report=report, summary=summary) == 480
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
    assert "| trained Conductor |" in Path(md.path).read_text()
    assert "<html" in Path(html.path).read_text().lower()
