"""Compiling the pipelines afresh (about 10 s each: KFP inspects the call stack on every task
setting): the committed YAML is current, and cluster settings reach the compiled pods."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from conductor_pipelines.registry import COMPILED_DIR, NAMES, compile_pipeline


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
        "artifact_root: s3://team/conductor\ns3_endpoint: http://minio.minio:9000\n"
        "shared_paths: [/workspace]\n"
    )
    path = compile_pipeline(
        "training", tmp_path / "t.yaml", settings=load_cluster_settings(user), eval_parallelism=7
    )
    spec, platform = yaml.safe_load_all(Path(path).read_text())
    # every task at any depth (the exit handler, the branches of each stage, the loops)
    tasks = {
        name: task
        for comp in [spec["root"], *spec["components"].values()]
        for name, task in comp.get("dag", {}).get("tasks", {}).items()
    }
    # the GPU profiles' training tasks (train-gpu; tiny trains on CPU: train)
    train = spec["deploymentSpec"]["executors"]["exec-train-gpu"]["container"]
    assert int(train["resources"]["accelerator"]["resourceCount"]) == 2
    labels = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-train-gpu"][
        "nodeSelector"
    ]["labels"]
    assert labels == {"pool": "gpu-a", "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    loops = [t for t in tasks.values() if "parameterIterator" in t]
    assert loops and all(loop["iteratorPolicy"]["parallelismLimit"] == 7 for loop in loops)
    # the storage settings: the check's rules, and the endpoint and default root on every task
    check = tasks["check-params"]["inputs"]["parameters"]
    # the UI's run form shows the root the run will use, and the pipeline's whole description
    root_inputs = spec["root"]["inputDefinitions"]["parameters"]
    assert root_inputs["artifact_root"]["defaultValue"] == "s3://team/conductor"
    description = spec["pipelineInfo"]["description"]
    assert description.startswith("The training pipeline: curate -> validate -> base")
    assert description.endswith("whatever happened before it.")
    assert check["default_artifact_root"]["runtimeValue"]["constant"] == "s3://team/conductor"
    assert check["shared_paths"]["runtimeValue"]["constant"] == ["/workspace"]
    assert check["s3_secret"]["runtimeValue"]["constant"] == "conductor-s3"
    executors = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    for name, executor in spec["deploymentSpec"]["executors"].items():
        env = {e["name"]: e["value"] for e in executor["container"].get("env", [])}
        assert env.get("AWS_ENDPOINT_URL") == "http://minio.minio:9000", name
        assert env.get("MLFLOW_S3_ENDPOINT_URL") == "http://minio.minio:9000", name
        assert env.get("CONDUCTOR_ARTIFACT_ROOT") == "s3://team/conductor", name
        s3 = [s for s in executors[name]["secretAsEnv"] if s["secretName"] == "conductor-s3"]
        assert s3 and s3[0]["optional"] is True, name  # the parameter check names it
