"""Every TrainJob the launcher can build is valid against Kubeflow Trainer v2.2.0's TrainJob CRD.

The CRD (``tests/fixtures/cluster/trainer-v2.2.0-trainjobs-crd.yaml``, copied unchanged from
kubeflow/trainer; source and commit in its header) is the API the minimum Trainer
(:data:`conductor_core.cluster.versions.TRAINER`) serves. Its ``openAPIV3Schema`` is validated
with ``jsonschema`` as the API server treats a structural schema under strict field validation
(what the launcher asks for): a field the schema does not list is an error, wherever it is
(``additionalProperties: false`` is added to every object schema that lists ``properties`` and
does not set ``x-kubernetes-preserve-unknown-fields``). The CEL rules of the CRD that apply on
create (the name's format and length) are checked explicitly; the others compare with the old
object (immutability) or concern ``status``. ``metadata`` is an ``ObjectMeta`` the API server
validates itself: it is checked strictly with the Kubernetes schemas (``kubernetes-validate``).
"""

from __future__ import annotations

import copy
import functools
import itertools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from conductor_core.cluster.settings import ClusterSettings, load_cluster_settings
from conductor_core.cluster.trainjob import (
    TRAINER_GROUP,
    TRAINER_VERSION,
    TRAINJOB_KIND,
    Owner,
    TrainJobRequest,
    build_manifests,
)
from conductor_core.cluster.versions import TRAINER

jsonschema = pytest.importorskip("jsonschema")

CRD = (
    Path(__file__).resolve().parents[1]
    / "fixtures"
    / "cluster"
    / "trainer-v2.2.0-trainjobs-crd.yaml"
)
K8S_VERSION = "1.33.0"
RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# The CRD's CEL rules on the whole object, checked here by hand (jsonschema does not run CEL).
ROOT_RULES = [
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
    "size(self.metadata.name) <= 63",
]


def structural(schema: Any) -> Any:
    """``schema`` with unknown fields rejected: ``additionalProperties: false`` on every object
    schema with ``properties``, unless it preserves unknown fields or already says otherwise."""
    if isinstance(schema, list):
        return [structural(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key == "properties":
            out[key] = {name: structural(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "not"):
            out[key] = structural(value)
        elif key in ("allOf", "anyOf", "oneOf"):
            out[key] = [structural(sub) for sub in value]
        else:
            out[key] = value
    if (
        "properties" in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
        and "additionalProperties" not in out
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def crd() -> dict[str, Any]:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    (doc,) = [d for d in yaml.load_all(CRD.read_text(encoding="utf-8"), Loader=loader) if d]
    return doc


@functools.cache
def validator() -> Any:
    doc = crd()
    (version,) = [v for v in doc["spec"]["versions"] if v["name"] == TRAINER_VERSION]
    schema = structural(version["schema"]["openAPIV3Schema"])
    return jsonschema.Draft4Validator(schema)


def errors_of(trainjob: dict[str, Any]) -> list[str]:
    """Every schema error of ``trainjob`` (path: message), plus the root CEL rules."""
    found = [
        f"{'.'.join(str(p) for p in err.absolute_path) or '<root>'}: {err.message}"
        for err in validator().iter_errors(trainjob)
    ]
    name = trainjob.get("metadata", {}).get("name", "")
    if not RFC1035.match(name):
        found.append(f"metadata.name {name!r} is not an RFC 1035 label")
    if len(name) > 63:
        found.append(f"metadata.name {name!r} is longer than 63")
    return found


def assert_valid(trainjob: dict[str, Any]) -> None:
    problems = errors_of(trainjob)
    assert not problems, "\n".join(problems)
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    # metadata is an ObjectMeta (owner references included): validate it as a ConfigMap's.
    holder = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": trainjob["metadata"]}
    kubernetes_validate.validate(holder, K8S_VERSION, strict=True)


# -- the variants ----------------------------------------------------------------------------

GPU_VARIANTS: dict[str, dict[str, Any]] = {
    "cpu-only-bare": {
        "accelerator_count": 0,
        "accelerator_type": None,
        "cpu_request": None,
        "memory_request": None,
        "memory_limit": None,
        "node_selector": {},
        "tolerations": [],
        "shm_size": None,
        "workspace": None,
        "secret_env": [],
        "env": {},
    },
    "bundled-default": {},
    "everything": {
        "accelerator_count": 8,
        "accelerator_type": "nvidia-h100-80gb",
        "cpu_request": "32",
        "cpu_limit": "64",
        "memory_request": "320Gi",
        "memory_limit": "480Gi",
        "node_selector": {"pool": "h100", "topology.kubernetes.io/zone": "us-east1-b"},
        "tolerations": [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "dedicated", "operator": "Equal", "value": "training"},
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "toleration_seconds": 300,
            },
        ],
        "shm_size": "64Gi",
        "workspace": {"claim_name": "conductor-checkpoints", "mount_path": "/workspace"},
        "secret_env": [
            {"env": "OPENAI_API_KEY", "secret_name": "conductor-api-keys", "secret_key": "k"},
            {
                "env": "AWS_SECRET_ACCESS_KEY",
                "secret_name": "conductor-s3",
                "secret_key": "AWS_SECRET_ACCESS_KEY",
                "optional": False,
            },
        ],
        "env": {"MLFLOW_TRACKING_URI": "http://mlflow.mlflow:5000", "PYTHONUNBUFFERED": "1"},
    },
    "scratch-emptydir": {
        "accelerator_count": 1,
        "workspace": {"claim_name": None, "mount_path": "/scratch", "size_limit": "200Gi"},
        "shm_size": "1Gi",
    },
}

TRAINJOB_VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "single-node-plain": {
        "num_nodes": 1,
        "launcher": "none",
        "active_deadline": False,
        "runtime_kind": "TrainingRuntime",
        "runtime_name": "my-torch",
    },
    "many-nodes-explicit": {
        "num_nodes": 16,
        "num_proc_per_node": 4,
        "pod_service_account": "conductor-trainer",
        "deadline_s": 90.5,
        "config_mount_path": "/etc/conductor-stage/",
        "patch_manager": "example.com/conductor",
        "image": "registry.example.com/conductor-train:1.2.3",
    },
}

REQUEST_VARIANTS: dict[str, dict[str, Any]] = {
    "plain": {},
    "extras": {
        "image": "registry.example.com/conductor-train@sha256:" + "a" * 64,
        "env": {"MLFLOW_RUN_ID": "0123456789abcdef", "CONDUCTOR_RESUME": "1"},
        "extra_args": ("--no-progress", "--set", "steps=5"),
    },
}

OWNERS = {
    "no-owner": None,
    "owned": Owner("conductor-training-abc12-system-container-impl-1234567", "0b1c" * 9),
}

STAGES = ("base", "adaptive", "recursive")


def settings_for(gpu: dict[str, Any], trainjob: dict[str, Any], **top: Any) -> ClusterSettings:
    return load_cluster_settings(
        None, overrides={"namespace": "kubeflow-user", "gpu": gpu, "trainjob": trainjob, **top}
    )


def request_for(stage: str, extra: dict[str, Any]) -> TrainJobRequest:
    return TrainJobRequest(
        run_id="3f6c1e0a-7b7d-4e2a-9d51-0c3a9b1e2f44",
        task_id=f"train-{stage}-1234",
        stage=stage,
        stage_config={"stage": stage, "steps": 10},
        **extra,
    )


def test_the_fixture_is_the_v2_2_trainjob_crd() -> None:
    doc = crd()
    assert doc["kind"] == "CustomResourceDefinition"
    assert doc["spec"]["group"] == TRAINER_GROUP
    assert doc["spec"]["names"]["kind"] == TRAINJOB_KIND
    assert TRAINER.minimum == (2, 2, 0)
    header = CRD.read_text(encoding="utf-8").split("\n---\n", 1)[0]
    assert "tag:        v2.2.0" in header
    assert "commit:     dc7656ad878916f526cd401f30a347574cd47877" in header
    (version,) = [v for v in doc["spec"]["versions"] if v["name"] == TRAINER_VERSION]
    schema = version["schema"]["openAPIV3Schema"]
    assert [rule["rule"] for rule in schema["x-kubernetes-validations"]] == ROOT_RULES
    spec = schema["properties"]["spec"]["properties"]
    assert "runtimePatches" in spec and "podTemplateOverrides" not in spec


@pytest.mark.parametrize(
    ("gpu", "trainjob", "req", "owner"),
    list(itertools.product(GPU_VARIANTS, TRAINJOB_VARIANTS, REQUEST_VARIANTS, OWNERS)),
)
def test_every_variant_the_launcher_builds_is_valid(
    gpu: str, trainjob: str, req: str, owner: str
) -> None:
    settings = settings_for(GPU_VARIANTS[gpu], TRAINJOB_VARIANTS[trainjob])
    for stage in STAGES:
        manifests = build_manifests(
            request_for(stage, REQUEST_VARIANTS[req]), settings, owner=OWNERS[owner]
        )
        assert_valid(manifests.trainjob)


def test_settings_from_other_parts_of_the_cluster_settings_stay_valid() -> None:
    """The settings the other tasks also use (artifact root, S3 endpoint) reach the TrainJob's
    environment; still within the schema."""
    fields = ClusterSettings.model_fields
    top: dict[str, Any] = {}
    if "s3_endpoint" in fields:
        top["s3_endpoint"] = "http://minio.minio:9000"
    if "artifact_root" in fields:
        top["artifact_root"] = "s3://bucket/conductor"
    settings = settings_for(GPU_VARIANTS["everything"], {}, **top)
    manifests = build_manifests(request_for("base", {}), settings)
    assert_valid(manifests.trainjob)


def test_the_golden_trainjob_is_valid() -> None:
    golden = yaml.safe_load((CRD.parent / "trainjob.yaml").read_text(encoding="utf-8"))
    assert_valid(golden)


def _valid_job() -> dict[str, Any]:
    settings = settings_for(GPU_VARIANTS["everything"], TRAINJOB_VARIANTS["many-nodes-explicit"])
    return build_manifests(request_for("base", REQUEST_VARIANTS["extras"]), settings).trainjob


def _pod_patch(job: dict[str, Any]) -> dict[str, Any]:
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    return patch["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


@pytest.mark.parametrize(
    "mutate",
    [
        pytest.param(lambda job: job["spec"].update(podTemplateOverrides=[]), id="v2.1-api"),
        pytest.param(lambda job: job["spec"]["trainer"].update(numProcs=2), id="trainer-typo"),
        pytest.param(
            lambda job: job["spec"]["runtimePatches"][0].update(priority=1), id="patch-field"
        ),
        pytest.param(
            lambda job: _pod_patch(job)["containers"][0].update(resources={}),
            id="container-patch-resources",
        ),
        pytest.param(
            lambda job: _pod_patch(job)["tolerations"][0].update(operatr="Exists"),
            id="toleration-typo",
        ),
        pytest.param(
            lambda job: _pod_patch(job)["volumes"][0]["configMap"].update(nmae="x"),
            id="volume-typo",
        ),
        pytest.param(lambda job: job["spec"]["trainer"].update(numNodes="4"), id="wrong-type"),
        pytest.param(lambda job: job["spec"].update(activeDeadlineSeconds=0), id="below-minimum"),
        pytest.param(lambda job: job["spec"].pop("runtimeRef"), id="missing-runtime-ref"),
        pytest.param(lambda job: job["metadata"].update(name="9-starts-with-digit"), id="name"),
    ],
)
def test_unknown_or_wrong_fields_are_rejected(mutate: Any) -> None:
    job = _valid_job()
    assert not errors_of(job)
    broken = copy.deepcopy(job)
    mutate(broken)
    assert errors_of(broken)


def test_owner_reference_metadata_is_checked_strictly() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    job = build_manifests(
        request_for("base", {}), settings_for({}, {}), owner=OWNERS["owned"]
    ).trainjob
    assert_valid(job)
    ref = job["metadata"]["ownerReferences"][0]
    bad = {**job["metadata"], "ownerReferences": [{**ref, "uuid": ref["uid"]}]}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": bad}, K8S_VERSION, strict=True
        )


def test_the_sandbox_settings_reach_the_trainjob_nodes_and_stay_valid() -> None:
    """The code sandbox's isolation (graders run model-written code in the reward) reaches the
    TrainJob's nodes: the fallback variable, the seccomp/AppArmor profiles in the pod patch and
    procMount in the node container's patch."""
    sandbox = {
        "seccomp_profile": {"type": "Localhost", "localhost_profile": "profiles/sandbox.json"},
        "apparmor_profile": {"type": "Unconfined"},
        "proc_mount": "Unmasked",
        "host_users": False,
    }
    settings = settings_for({"sandbox": sandbox}, {})
    job = build_manifests(request_for("base", {}), settings).trainjob
    assert_valid(job)
    env = {e["name"]: e.get("value") for e in job["spec"]["trainer"]["env"]}
    assert env["CONDUCTOR_SANDBOX_FALLBACK"] == "refuse"
    pod = _pod_patch(job)
    assert pod["securityContext"]["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "profiles/sandbox.json",
    }
    assert pod["securityContext"]["appArmorProfile"] == {"type": "Unconfined"}
    assert pod["containers"][0]["securityContext"] == {"procMount": "Unmasked"}
