"""Compiling the pipelines afresh (about 10 s each: KFP inspects the call stack on every task
setting): the committed YAML is current, and cluster settings reach the compiled pods."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipelines.registry import COMPILED_DIR, NAMES, compile_pipeline


@pytest.mark.parametrize("name", NAMES)
def test_compiled_yaml_is_current(name, tmp_path):
    fresh = compile_pipeline(name, tmp_path / f"{name}.yaml")
    committed = COMPILED_DIR / f"{name}.yaml"
    assert committed.is_file(), f"run `conductor pipeline compile` ({committed} is missing)"
    assert fresh.read_text() == committed.read_text(), (
        f"{committed} is stale: run `conductor pipeline compile` and commit the result"
    )


def test_cluster_settings_change_the_compiled_pods(tmp_path):
    from conductor_core.cluster.settings import load_cluster_settings

    user = tmp_path / "cluster.yaml"
    user.write_text(
        "gpu:\n  accelerator_count: 2\n  accelerator_type: nvidia-h100-80gb\n"
        "  node_selector: {pool: gpu-a}\n"
    )
    path = compile_pipeline(
        "training", tmp_path / "t.yaml", settings=load_cluster_settings(user), eval_parallelism=7
    )
    spec, platform = yaml.safe_load_all(Path(path).read_text())
    train = spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert int(train["resources"]["accelerator"]["resourceCount"]) == 2
    labels = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train"][
        "nodeSelector"
    ]["labels"]
    assert labels == {"pool": "gpu-a", "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    loop = next(t for t in spec["root"]["dag"]["tasks"].values() if "parameterIterator" in t)
    assert loop["iteratorPolicy"]["parallelismLimit"] == 7
