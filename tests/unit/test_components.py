"""Components: thin shells (only kfp at module level), described for the UI, and callable
through their ``python_func`` as the pipeline calls them."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from kfp import dsl

ROOT = Path(__file__).resolve().parents[2]
COMPONENT_FILES = sorted((ROOT / "components").glob("*/component.py"))
ALLOWED_TOP_LEVEL = {"kfp", "typing", "components._settings"}


def test_every_step_has_a_component():
    names = {p.parent.name for p in COMPONENT_FILES}
    assert names == {
        "check_params",
        "curate",
        "validate",
        "train",
        "plan_shards",
        "eval_shard",
        "aggregate",
        "register",
    }


@pytest.mark.parametrize("path", COMPONENT_FILES, ids=lambda p: p.parent.name)
def test_component_files_import_only_kfp_at_module_level(path):
    tree = ast.parse(path.read_text())
    for node in tree.body:
        if isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            mods = [node.module or ""]
        else:
            continue
        for mod in mods:
            assert mod.split(".")[0] == "kfp" or mod in ALLOWED_TOP_LEVEL, f"{path}: {mod}"


@pytest.mark.parametrize("path", COMPONENT_FILES, ids=lambda p: p.parent.name)
def test_components_are_described_and_do_not_install_kfp(path):
    import importlib

    name = path.parent.name
    comp = getattr(importlib.import_module(f"components.{name}"), name)
    assert comp.description and len(comp.description) > 40
    spec = comp.component_spec.implementation.container
    assert "pip install" not in " ".join(spec.command)  # install_kfp_package=False
    assert spec.image.startswith("ghcr.io/conductor-platform/conductor-")


def out(kind, path: Path):
    artifact = kind(name=path.name, uri=str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    return artifact


def test_check_params_component_stops_on_a_typo():
    from components.check_params import check_params
    from conductor_core.errors import ConfigError

    args = {
        "profile": "tiny",
        "launcher": "pod",
        "register_metric": "accuracy",
        "baselines": "single,moa",
        "pool": "bundled",
        "curation_config": "pipeline",
        "eval_shards": 2,
        "eval_parallelism": 2,
        "base_steps": 0,
        "adaptive_steps": 0,
        "recursive_steps": 0,
    }
    assert "profile=tiny" in check_params.python_func(**args)
    with pytest.raises(ConfigError, match="launcher: 'gpu'"):
        check_params.python_func(**{**args, "launcher": "gpu"})


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
