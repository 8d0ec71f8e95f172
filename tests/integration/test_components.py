"""The register component called through its ``python_func`` as the pipeline calls it, on an
MLflow SQLite store: it promotes a better model, then keeps the champion (the other components:
tests/unit/test_components.py)."""

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
