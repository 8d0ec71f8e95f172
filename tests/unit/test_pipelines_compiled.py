"""The committed compiled pipelines: described, and carrying the GPU and Kubernetes settings
(compiling them afresh: tests/integration/test_pipelines_compile.py)."""

from __future__ import annotations

import pytest
import yaml

from pipelines.registry import COMPILED_DIR, NAMES


def _docs(name: str) -> list[dict]:
    return list(yaml.safe_load_all((COMPILED_DIR / f"{name}.yaml").read_text()))


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_has_a_default_and_a_description(name):
    spec = _docs(name)[0]
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params
    for key, p in params.items():
        assert "defaultValue" in p, f"{name}.{key} has no default"
        assert len(p.get("description", "")) > 15, f"{name}.{key} has no description"


def test_training_tasks_get_gpu_pods_and_the_rest_cpu_pods():
    spec, platform = _docs("training")
    executors = spec["deploymentSpec"]["executors"]
    train = executors["exec-train"]["container"]
    assert train["image"].endswith("conductor-train:" + train["image"].rsplit(":", 1)[1])
    assert train["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
    assert int(train["resources"]["accelerator"]["resourceCount"]) >= 1
    assert "conductor-base" in executors["exec-eval-shard"]["container"]["image"]
    assert "accelerator" not in executors["exec-eval-shard"]["container"].get("resources", {})

    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
    pod = k8s["exec-train"]
    shm = [m for m in pod["emptyDirMounts"] if m["mountPath"] == "/dev/shm"]
    assert shm and shm[0]["medium"] == "Memory"
    assert any(t.get("key") == "nvidia.com/gpu" for t in pod["tolerations"])
    secrets = {s["secretName"]: s for s in pod["secretAsEnv"]}
    assert {"conductor-api-keys", "conductor-s3"} <= set(secrets)
    envs = {e["envVar"] for s in secrets.values() for e in s["keyToEnv"]}
    assert {"OPENAI_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= envs
    # evaluation pods read the API keys too, but need no GPU settings
    assert "tolerations" not in k8s["exec-eval-shard"]


def test_side_effect_steps_are_never_cached():
    spec = _docs("training")[0]
    tasks = spec["root"]["dag"]["tasks"]
    for name in ("train", "train-2", "train-3", "register"):
        assert tasks[name]["cachingOptions"] == {}, name  # {} = enableCache false
    assert tasks["curate"]["cachingOptions"] == {"enableCache": True}


def test_no_task_starts_before_the_parameter_check():
    tasks = _docs("training")[0]["root"]["dag"]["tasks"]
    roots = [n for n, t in tasks.items() if not t.get("dependentTasks")]
    assert roots == ["check-params"]
