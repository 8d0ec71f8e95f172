"""TrainJob and ConfigMap manifests: names, golden files, the Trainer v2 API shape, and the core
Kubernetes objects inside them validated against the Kubernetes schemas.

Regenerate the golden files with ``UPDATE_GOLDEN=1`` (then review the diff).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conductor_core.cluster.settings import load_cluster_settings
from conductor_core.cluster.trainjob import (
    CONFIG_KEY,
    MAX_NAME_LENGTH,
    NODE,
    TrainJobRequest,
    build_manifests,
    job_state,
    label_value,
    rank0_pod_selector,
    resource_labels,
    trainjob_name,
)
from conductor_core.errors import ConfigError

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "cluster"
K8S_VERSION = "1.33.0"
RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

STAGE_CONFIG = {
    "stage": "base",
    "steps": 200,
    "model": "Qwen/Qwen2.5-7B-Instruct",
    "output_dir": "/workspace/checkpoints/base",
}


def golden_settings():
    """Settings with every pod-level feature on (fixed, so the golden files only change when the
    manifest builder does)."""
    return load_cluster_settings(
        None,
        overrides={
            "namespace": "kubeflow-user",
            "gpu": {
                "accelerator_type": "nvidia-h100-80gb",
                "accelerator_count": 8,
                "node_selector": {"pool": "h100"},
                "workspace": {"claim_name": "conductor-checkpoints", "mount_path": "/workspace"},
                "env": {
                    "MLFLOW_TRACKING_URI": "http://mlflow.mlflow:5000",
                    "MLFLOW_S3_ENDPOINT_URL": "http://minio.minio:9000",
                    "PYTHONUNBUFFERED": "1",
                    "HF_HUB_DISABLE_TELEMETRY": "1",
                },
            },
            "trainjob": {
                "image": "registry.example.com/conductor-train:1.2.3",
                "num_nodes": 4,
                "pod_service_account": "conductor-trainer",
                "deadline_s": 3600,
            },
        },
    )


def golden_request() -> TrainJobRequest:
    return TrainJobRequest(
        run_id="3f6c1e0a-7b7d-4e2a-9d51-0c3a9b1e2f44",
        task_id="train-base-1234",
        stage="base",
        stage_config=STAGE_CONFIG,
        env={"MLFLOW_RUN_ID": "0123456789abcdef"},
        extra_args=("--no-progress",),
    )


def check_golden(name: str, data: dict[str, Any]) -> None:
    path = GOLDEN / name
    text = yaml.safe_dump(data, sort_keys=False, width=100)
    if os.environ.get("UPDATE_GOLDEN"):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.is_file(), f"missing golden file {path}; run with UPDATE_GOLDEN=1"
    assert yaml.safe_load(path.read_text(encoding="utf-8")) == data, (
        f"{name} differs from the golden file; if intended, rerun with UPDATE_GOLDEN=1"
    )


def test_trainjob_and_configmap_match_golden_files() -> None:
    manifests = build_manifests(golden_request(), golden_settings())
    check_golden("trainjob.yaml", manifests.trainjob)
    check_golden("configmap.yaml", manifests.configmap)


def test_names_are_deterministic_rfc1035_and_short() -> None:
    first = trainjob_name("run-1", "task-a", "base")
    assert first == trainjob_name("run-1", "task-a", "base")
    assert len({first, trainjob_name("run-1", "task-b", "base")}) == 2
    assert len({first, trainjob_name("run-2", "task-a", "base")}) == 2
    assert len({first, trainjob_name("run-1", "task-a", "adaptive")}) == 2
    odd = [
        ("RUN_ID/With Spaces" * 10, "t" * 200, "Recursive"),
        ("0000-leading-digits", "x", "base"),
        ("---", "---", "---"),
        ("ü", "é", "ß"),
    ]
    for run_id, task_id, stage in odd:
        name = trainjob_name(run_id, task_id, stage)
        assert RFC1035.match(name), name
        assert len(name) <= MAX_NAME_LENGTH
    with pytest.raises(ConfigError, match="non-empty"):
        trainjob_name("", "t", "base")


def test_labels_are_valid_label_values() -> None:
    labels = resource_labels("run/with:odd chars" + "x" * 80, "-task-", "base", "cdt-base-x")
    for key, value in labels.items():
        assert len(value) <= 63, key
        assert re.match(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$", value), (key, value)
    assert label_value("a/b") == "a-b"


def test_trainjob_uses_the_v2_api_shape() -> None:
    settings = golden_settings()
    manifests = build_manifests(golden_request(), settings)
    job = manifests.trainjob
    assert job["apiVersion"] == "trainer.kubeflow.org/v1alpha1"
    assert job["kind"] == "TrainJob"
    assert job["metadata"]["name"] == manifests.name
    assert job["metadata"]["namespace"] == "kubeflow-user"
    spec = job["spec"]
    assert set(spec) == {"runtimeRef", "trainer", "runtimePatches", "activeDeadlineSeconds"}
    assert spec["runtimeRef"] == {
        "apiGroup": "trainer.kubeflow.org",
        "kind": "ClusterTrainingRuntime",
        "name": "torch-distributed",
    }
    trainer = spec["trainer"]
    assert trainer["command"] == ["torchrun", "--no-python", "conductor"]
    assert trainer["args"] == [
        "train",
        "--stage",
        "base",
        "--config",
        f"/etc/conductor/{CONFIG_KEY}",
        "--no-progress",
    ]
    assert trainer["numNodes"] == 4
    assert trainer["numProcPerNode"] == 8
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "8"
    env = {item["name"]: item for item in trainer["env"]}
    assert env["MLFLOW_RUN_ID"] == {"name": "MLFLOW_RUN_ID", "value": "0123456789abcdef"}
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "conductor-api-keys"
    assert all("value" not in env[k] for k in ("OPENAI_API_KEY", "AWS_SECRET_ACCESS_KEY"))
    assert spec["activeDeadlineSeconds"] == 3600

    (patch,) = spec["runtimePatches"]
    assert patch["manager"] == "conductor.dev/launcher"
    (rjob,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    assert rjob["name"] == NODE
    pod = rjob["template"]["spec"]["template"]
    assert pod["metadata"]["labels"]["conductor.dev/trainjob"] == manifests.name
    pod_spec = pod["spec"]
    assert pod_spec["nodeSelector"] == {
        "pool": "h100",
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
    }
    assert pod_spec["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert pod_spec["serviceAccountName"] == "conductor-trainer"
    volumes = {v["name"]: v for v in pod_spec["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "64Gi"}
    assert volumes["stage-config"]["configMap"]["name"] == manifests.configmap_name
    assert volumes["workspace"]["persistentVolumeClaim"]["claimName"] == "conductor-checkpoints"
    (container,) = pod_spec["containers"]
    assert container["name"] == NODE
    assert "env" not in container  # the API only takes the node container's env in spec.trainer
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {
        "stage-config": "/etc/conductor",
        "dshm": "/dev/shm",
        "workspace": "/workspace",
    }


def test_optional_parts_are_left_out() -> None:
    settings = load_cluster_settings(
        None,
        overrides={
            "gpu": {"shm_size": None, "workspace": None, "tolerations": [], "accelerator_count": 0},
            "trainjob": {"launcher": "none", "active_deadline": False},
        },
    )
    job = build_manifests(
        TrainJobRequest(run_id="r", task_id="t", stage="adaptive", stage_config="steps: 3\n"),
        settings,
        namespace="ns",
    ).trainjob
    assert job["metadata"]["namespace"] == "ns"
    assert "activeDeadlineSeconds" not in job["spec"]
    trainer = job["spec"]["trainer"]
    assert trainer["command"] == ["conductor"]
    assert "numProcPerNode" not in trainer
    assert "nvidia.com/gpu" not in str(trainer.get("resourcesPerNode", {}))
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    pod_spec = patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert "tolerations" not in pod_spec
    assert [v["name"] for v in pod_spec["volumes"]] == ["stage-config"]


def test_stage_config_must_be_a_mapping_and_fit_a_configmap() -> None:
    settings = load_cluster_settings(None)
    with pytest.raises(ConfigError, match="YAML mapping"):
        build_manifests(TrainJobRequest("r", "t", "base", "- a\n"), settings)
    with pytest.raises(ConfigError, match="not valid YAML"):
        build_manifests(TrainJobRequest("r", "t", "base", "a: [\n"), settings)
    with pytest.raises(ConfigError, match="1 MiB"):
        build_manifests(TrainJobRequest("r", "t", "base", {"blob": "x" * (1024 * 1024)}), settings)
    text = "steps: 3  # a comment kept as written\n"
    configmap = build_manifests(TrainJobRequest("r", "t", "base", text), settings).configmap
    assert configmap["data"] == {CONFIG_KEY: text}


def test_configmap_validates_strictly_against_kubernetes_schema() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    manifests = build_manifests(golden_request(), golden_settings())
    kubernetes_validate.validate(manifests.configmap, K8S_VERSION, strict=True)
    assert yaml.safe_load(manifests.configmap["data"][CONFIG_KEY]) == STAGE_CONFIG


def test_core_objects_inside_the_trainjob_validate_as_a_pod() -> None:
    """The TrainJob's CRD is not in kubernetes-validate: the core objects it embeds (env with
    secretKeyRef, resources, volumes, mounts, tolerations, node selector) are validated by
    assembling the pod the Trainer would create from them."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    manifests = build_manifests(golden_request(), golden_settings())
    spec = manifests.trainjob["spec"]
    trainer = spec["trainer"]
    rjob = spec["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]
    pod_patch = rjob["template"]["spec"]["template"]
    container = {
        "name": NODE,
        "image": trainer["image"],
        "command": trainer["command"],
        "args": trainer["args"],
        "env": trainer["env"],
        "resources": trainer["resourcesPerNode"],
        "volumeMounts": pod_patch["spec"]["containers"][0]["volumeMounts"],
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{manifests.name}-node-0-0-abcde", **pod_patch["metadata"]},
        "spec": {**pod_patch["spec"], "containers": [container], "restartPolicy": "Never"},
    }
    kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
    bad = {**pod, "spec": {**pod["spec"], "tolerations": [{"key": "a", "operatr": "Exists"}]}}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_rank0_selector_and_job_state() -> None:
    selector = rank0_pod_selector("cdt-base-x")
    assert "jobset.sigs.k8s.io/jobset-name=cdt-base-x" in selector.split(",")
    assert "jobset.sigs.k8s.io/replicatedjob-name=node" in selector.split(",")
    assert "batch.kubernetes.io/job-completion-index=0" in selector.split(",")
    assert job_state({}).phase == "Running"
    running = {"status": {"conditions": [{"type": "Complete", "status": "False"}]}}
    assert not job_state(running).finished
    failed = {
        "status": {
            "conditions": [
                {"type": "Suspended", "status": "False", "reason": "Resumed"},
                {"type": "Failed", "status": "True", "reason": "DeadlineExceeded", "message": "m"},
            ]
        }
    }
    state = job_state(failed)
    assert (state.phase, state.reason, state.message, state.finished) == (
        "Failed",
        "DeadlineExceeded",
        "m",
        True,
    )
    done = {"status": {"conditions": [{"type": "Complete", "status": "True", "reason": "Done"}]}}
    assert job_state(done).phase == "Complete"
    suspended = {"status": {"conditions": [{"type": "Suspended", "status": "True"}]}}
    assert job_state(suspended).phase == "Suspended"


def _pod_labels(settings) -> dict[str, str]:
    job = build_manifests(TrainJobRequest("r", "t", "base", "steps: 3\n"), settings).trainjob
    template = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return template["replicatedJobs"][0]["template"]["spec"]["template"]["metadata"]["labels"]


def test_training_pods_keep_istios_sidecar_out_unless_the_settings_say_otherwise() -> None:
    """Multi-user Kubeflow injects Istio's sidecar into profile namespaces; torch's rendezvous
    between nodes fails through it."""
    labels = _pod_labels(load_cluster_settings(None))
    assert labels["sidecar.istio.io/inject"] == "false"
    assert labels["app.kubernetes.io/managed-by"]  # the job's own labels stay
    custom = load_cluster_settings(None, overrides={"trainjob": {"pod_labels": {"team": "ml"}}})
    assert "sidecar.istio.io/inject" not in _pod_labels(custom)
    assert _pod_labels(custom)["team"] == "ml"
