"""Registration moves the alias only when the new version beats the champion (SQLite MLflow)."""

from __future__ import annotations

import json

import pytest


@pytest.fixture
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("CONDUCTOR_RUNS_DIR", str(tmp_path))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "qwen2"}')
    return uri, model


def test_promote_only_when_better(store):
    from mlflow import MlflowClient

    from conductor_core.track.registry import promote_if_better

    uri, model = store
    first = promote_if_better(model, "unit-reg", "champion", metric="accuracy", score=0.5)
    assert first["promoted"] and first["champion_version"] is None
    worse = promote_if_better(model, "unit-reg", "champion", metric="accuracy", score=0.4)
    assert not worse["promoted"]
    assert worse["champion_score"] == 0.5
    assert "kept models:/unit-reg@champion on version 1" in worse["reason"]
    better = promote_if_better(model, "unit-reg", "champion", metric="accuracy", score=0.6)
    assert better["promoted"] and "beats" in better["reason"]
    client = MlflowClient(uri)
    assert (
        str(client.get_model_version_by_alias("unit-reg", "champion").version) == better["version"]
    )
    # every version carries its score, so a later run can compare with it
    assert client.get_model_version("unit-reg", worse["version"]).tags["conductor.accuracy"] == (
        "0.4"
    )
    # lower is better for cost
    promote_if_better(
        model, "unit-cost", "cheap", metric="cost_per_question", score=2.0, higher_is_better=False
    )
    cheaper = promote_if_better(
        model, "unit-cost", "cheap", metric="cost_per_question", score=1.0, higher_is_better=False
    )
    assert cheaper["promoted"]


def test_register_step_reads_the_comparison_and_updates_the_manifest(store, tmp_path):
    from conductor_core.errors import ConductorError
    from conductor_core.pipeline_steps.manifest import ModelManifest, read_manifest
    from conductor_core.pipeline_steps.register_step import register_step

    _, model = store
    manifest = ModelManifest(weights_uri=str(model), stage="recursive", prompt_style="compact")
    manifest.write(tmp_path / "in.json")
    table = {"rows": [{"label": "trained Conductor", "method": "conductor", "accuracy": 0.9}]}
    (tmp_path / "cmp.json").write_text(json.dumps(table))
    said = []
    decision = register_step(
        model_manifest=tmp_path / "in.json",
        comparison_file=tmp_path / "cmp.json",
        name="unit-step",
        out_manifest=tmp_path / "out.json",
        log=said.append,
    )
    assert decision["promoted"] and said == [decision["reason"]]
    out = read_manifest(tmp_path / "out.json")
    assert (out.registered_model, out.model_version) == ("unit-step", decision["version"])
    (tmp_path / "cmp.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ConductorError, match="no trained Conductor row"):
        register_step(
            model_manifest=tmp_path / "in.json",
            comparison_file=tmp_path / "cmp.json",
            name="unit-step",
        )
