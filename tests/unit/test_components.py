"""Components: thin shells (only kfp at module level), described for the UI, and callable
through their ``python_func`` as the pipeline calls them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
COMPONENT_FILES = sorted((ROOT / "conductor_components").glob("*/component.py"))
ALLOWED_TOP_LEVEL = {"kfp", "typing", "conductor_components._settings"}


def test_every_step_has_a_component():
    names = {p.parent.name for p in COMPONENT_FILES}
    assert names >= {
        "check_params",
        "curate",
        "validate",
        "gate",
        "train",
        "plan_shards",
        "eval_shard",
        "aggregate",
        "register",
        "resolve_model",
        "close_run",
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
    comp = getattr(importlib.import_module(f"conductor_components.{name}"), name)
    assert comp.description and len(comp.description) > 40
    spec = comp.component_spec.implementation.container
    assert "pip install" not in " ".join(spec.command)  # install_kfp_package=False
    assert spec.image.startswith("ghcr.io/conductor-platform/conductor-")


def test_check_params_component_stops_on_a_typo():
    from conductor_components.check_params import check_params
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
        "shared_paths": ["/"],  # the local run's rule (every task on this machine)
    }
    assert "profile=tiny" in check_params.python_func(**args).checked
    with pytest.raises(ConfigError, match="launcher: 'gpu'"):
        check_params.python_func(**{**args, "launcher": "gpu"})
    with pytest.raises(ConfigError, match="warmup_steps: -1; give 0"):
        check_params.python_func(**{**args, "warmup_steps": -1})
    with pytest.raises(ConfigError, match="expert_start_steps: -1; give 0"):
        check_params.python_func(**{**args, "expert_start_steps": -1})
