"""Cluster settings: the one model of where training and the other pipeline tasks run.

The bundled ``conductor_core/resources/cluster/default.yaml`` is the base; a user YAML file (an
argument, or the ``CONDUCTOR_CLUSTER_SETTINGS`` environment variable) is deep-merged over it, so
that a file only names what differs (for example the GPU type and the node count)::

    gpu:
      accelerator_type: nvidia-h100-80gb
    trainjob:
      num_nodes: 4

Pure pydantic + YAML: nothing here imports Kubernetes. The pipelines apply :class:`PodSettings`
to KFP tasks (kfp-kubernetes); :mod:`conductor_core.cluster.trainjob` turns them into a
Kubeflow Trainer ``TrainJob``. Secrets are referenced by Secret name and key, never by value.
"""

from __future__ import annotations

import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from conductor_core.cluster.images import image
from conductor_core.configfiles import deep_merge, read_yaml_file
from conductor_core.errors import ConfigError, format_validation_error

ENV_VAR = "CONDUCTOR_CLUSTER_SETTINGS"
"""Environment variable naming a user cluster-settings YAML merged over the bundled default."""

# Kubernetes resource quantity (k8s.io/apimachinery resource.Quantity), e.g. 500m, 2, 16Gi, 1e3.
_QUANTITY = re.compile(r"^[+]?(\d+(\.\d*)?|\.\d+)(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+)?$")
# RFC 1123 label (names of ConfigMaps, Secrets, PVCs, service accounts, namespaces).
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# Label/taint key: optional DNS-subdomain prefix + "/" + name of up to 63 characters.
_LABEL_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
# Container environment variable name (what kubectl and the API server accept).
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
# Plain env names that look like credentials: they belong in ``secret_env``.
_SECRET_LIKE = re.compile(r"(SECRET|PASSWORD|TOKEN|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL)")

_STRICT = ConfigDict(extra="forbid")

ARTIFACT_ROOT_ENV = "CONDUCTOR_ARTIFACT_ROOT"
"""Environment variable of a task's default artifact root (``ClusterSettings.artifact_root``)."""
S3_ENDPOINT_ENVS = ("AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL")
"""The variables ``ClusterSettings.s3_endpoint`` fills: boto3's and MLflow's artifact store's."""
S3_CREDENTIAL_ENVS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
"""The S3 credentials a task reads from its environment (filled from a Secret)."""


def _check_quantity(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    value = str(value).strip()
    if not _QUANTITY.match(value):
        raise ValueError(
            f"'{value}' is not a Kubernetes quantity for {what} (examples: 500m, 4, 16Gi)"
        )
    return value


def _quantity_value(value: str) -> float:
    """A quantity as a number of base units (bytes, cores) for comparisons."""
    suffixes = {
        "m": 1e-3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "P": 1e15,
        "E": 1e18,
        "Ki": 2**10,
        "Mi": 2**20,
        "Gi": 2**30,
        "Ti": 2**40,
        "Pi": 2**50,
        "Ei": 2**60,
    }
    for suffix in sorted(suffixes, key=len, reverse=True):
        if value.endswith(suffix) and not value[: -len(suffix)].endswith(("e", "E")):
            return float(value[: -len(suffix)]) * suffixes[suffix]
    return float(value)


def _check_label_key(key: str) -> str:
    prefix, sep, name = key.rpartition("/")
    if (sep and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix))) or not (
        0 < len(name) <= 63 and _LABEL_NAME.match(name)
    ):
        raise ValueError(
            f"'{key}' is not a valid Kubernetes label key ([prefix/]name, name up to 63 "
            "alphanumerics, '-', '_' or '.')"
        )
    return key


def _release_image(kind: str) -> str:
    """This release's pinned image of ``kind`` (:mod:`conductor_core.cluster.images`)."""
    return image(kind)  # type: ignore[arg-type]


def _check_dns_label(value: str, what: str) -> str:
    if not (len(value) <= 63 and _DNS_LABEL.match(value)):
        raise ValueError(
            f"'{value}' is not a valid {what} (lowercase letters, digits and '-', at most 63)"
        )
    return value


class Toleration(BaseModel):
    """A pod toleration of a node taint (e.g. GPU nodes tainted ``nvidia.com/gpu=present``)."""

    model_config = _STRICT

    key: str | None = Field(
        default=None, description="Taint key to tolerate; empty with operator Exists = all taints."
    )
    operator: Literal["Equal", "Exists"] = Field(
        default="Equal", description="Equal (key and value must match) or Exists (any value)."
    )
    value: str | None = Field(
        default=None, description="Taint value to match (operator Equal only)."
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; empty = every effect."
    )
    toleration_seconds: int | None = Field(
        default=None,
        ge=0,
        description="How long a NoExecute taint is tolerated before eviction; empty = forever.",
    )

    @field_validator("key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        return _check_label_key(value) if value else value

    @model_validator(mode="after")
    def _consistent(self) -> Toleration:
        if self.operator == "Exists" and self.value:
            raise ValueError("value must be empty when operator is Exists")
        if self.operator == "Equal" and not self.key:
            raise ValueError("key is required when operator is Equal")
        if self.toleration_seconds is not None and self.effect != "NoExecute":
            raise ValueError("toleration_seconds only applies to effect NoExecute")
        return self

    def as_k8s(self) -> dict[str, Any]:
        """The toleration as a Kubernetes ``Toleration`` (camelCase, empty fields left out)."""
        out: dict[str, Any] = {"operator": self.operator}
        if self.key:
            out["key"] = self.key
        if self.value:
            out["value"] = self.value
        if self.effect:
            out["effect"] = self.effect
        if self.toleration_seconds is not None:
            out["tolerationSeconds"] = self.toleration_seconds
        return out


class SecretEnv(BaseModel):
    """An environment variable filled from a key of a Kubernetes Secret (never the value)."""

    model_config = _STRICT

    env: str = Field(description="Environment variable name in the container, e.g. OPENAI_API_KEY.")
    secret_name: str = Field(description="Name of the Secret in the pod's namespace.")
    secret_key: str = Field(description="Key inside the Secret whose value fills the variable.")
    optional: bool = Field(
        default=True,
        description="Start the pod even when the Secret or key is missing (the variable is then "
        "unset); false makes a missing Secret block the pod.",
    )

    @field_validator("env")
    @classmethod
    def _env(cls, value: str) -> str:
        if not _ENV_NAME.match(value):
            raise ValueError(f"'{value}' is not a valid environment variable name")
        return value

    @field_validator("secret_name")
    @classmethod
    def _secret_name(cls, value: str) -> str:
        if not (len(value) <= 253 and _DNS_SUBDOMAIN.match(value)):
            raise ValueError(f"'{value}' is not a valid Secret name (lowercase DNS subdomain)")
        return value

    @field_validator("secret_key")
    @classmethod
    def _secret_key(cls, value: str) -> str:
        if not re.match(r"^[-._a-zA-Z0-9]+$", value) or len(value) > 253:
            raise ValueError(f"'{value}' is not a valid Secret key (alphanumerics, '-', '_', '.')")
        return value

    def as_k8s(self) -> dict[str, Any]:
        """The variable as a Kubernetes ``EnvVar`` with a ``secretKeyRef``."""
        return {
            "name": self.env,
            "valueFrom": {
                "secretKeyRef": {
                    "name": self.secret_name,
                    "key": self.secret_key,
                    "optional": self.optional,
                }
            },
        }


class WorkspaceSettings(BaseModel):
    """The scratch/checkpoint volume of a pod: a PersistentVolumeClaim or a node-local emptyDir."""

    model_config = _STRICT

    claim_name: str | None = Field(
        default=None,
        description="Existing PersistentVolumeClaim to mount (ReadWriteMany for multi-node); "
        "empty = an emptyDir on the node (lost when the pod ends).",
    )
    mount_path: str = Field(
        default="/workspace", description="Where the workspace is mounted in the container."
    )
    size_limit: str | None = Field(
        default=None, description="sizeLimit of the emptyDir (ignored with a claim), e.g. 200Gi."
    )

    @field_validator("claim_name")
    @classmethod
    def _claim(cls, value: str | None) -> str | None:
        if value is not None and not (len(value) <= 253 and _DNS_SUBDOMAIN.match(value)):
            raise ValueError(f"'{value}' is not a valid PersistentVolumeClaim name")
        return value

    @field_validator("mount_path")
    @classmethod
    def _mount(cls, value: str) -> str:
        if not value.startswith("/") or value.rstrip("/") in ("", "/dev/shm"):
            raise ValueError(f"'{value}' must be an absolute path other than / and /dev/shm")
        return value

    @field_validator("size_limit")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        return _check_quantity(value, "workspace.size_limit")

    def as_volume(self, name: str = "workspace") -> dict[str, Any]:
        """The Kubernetes ``Volume`` named ``name``."""
        if self.claim_name:
            return {"name": name, "persistentVolumeClaim": {"claimName": self.claim_name}}
        empty: dict[str, Any] = {}
        if self.size_limit:
            empty["sizeLimit"] = self.size_limit
        return {"name": name, "emptyDir": empty}


SANDBOX_FALLBACK_ENV = "CONDUCTOR_SANDBOX_FALLBACK"
"""The code sandbox's setting for hosts without namespaces (``refuse`` or ``limits-only``;
:mod:`conductor_core.tasks.sandbox.local`), set on a pod from ``sandbox.isolation``."""
SANDBOX_LABEL = "conductor.dev/sandbox"
"""Pod label carrying ``sandbox.isolation``: what an admission policy keys on to give the pods
that grade generated code the security settings of ``sandbox`` (docs/sandbox.md)."""


class SecurityProfile(BaseModel):
    """A seccomp or AppArmor profile of a pod (Kubernetes ``SeccompProfile`` /
    ``AppArmorProfile``)."""

    model_config = _STRICT

    type: Literal["RuntimeDefault", "Unconfined", "Localhost"] = Field(
        description="RuntimeDefault: the container runtime's profile (blocks the namespaces the "
        "code sandbox needs); Unconfined: none; Localhost: a profile file on the node."
    )
    localhost_profile: str | None = Field(
        default=None,
        description="With type Localhost: the profile's path relative to the kubelet's seccomp "
        "folder (seccomp, e.g. profiles/conductor-sandbox.json) or the loaded AppArmor profile's "
        "name.",
    )

    @model_validator(mode="after")
    def _localhost(self) -> SecurityProfile:
        if (self.type == "Localhost") != bool(self.localhost_profile):
            raise ValueError("localhost_profile is required with type Localhost, and only then")
        return self

    def as_k8s(self) -> dict[str, str]:
        """The profile as Kubernetes writes it (``type``, ``localhostProfile``)."""
        out = {"type": self.type}
        if self.localhost_profile:
            out["localhostProfile"] = self.localhost_profile
        return out


class SandboxSettings(BaseModel):
    """How generated code (the code graders of training and evaluation) is isolated in a pod.

    The code sandbox runs each program in fresh namespaces (bubblewrap). Under Kubernetes'
    ``RuntimeDefault`` seccomp profile, which Kubeflow Pipelines gives every task pod, and with
    /proc masked (the default ``procMount``) it cannot create them. These settings say what the
    pod gets so that it can (a sandboxed runtime class such as gVisor, or seccomp/AppArmor/
    procMount), and what graders do if it still cannot: ``isolation``. kfp-kubernetes 2.17 cannot
    set any of the pod fields on a task: they are rendered as a pod label and an annotation for
    an admission policy to apply, and directly into TrainJob runtime patches where the Trainer
    API allows them (docs/sandbox.md, "Generated code in containers and pods").
    """

    model_config = _STRICT

    isolation: Literal["namespaces", "limits-only"] = Field(
        default="namespaces",
        description="namespaces: graders refuse to run generated code unless the sandbox gets "
        "bubblewrap's namespaces (CONDUCTOR_SANDBOX_FALLBACK=refuse). limits-only: accept "
        "unshare (the pod's files readable) or resource limits only (the network too) where it "
        "does not (CONDUCTOR_SANDBOX_FALLBACK=limits-only): for trusted code. Other processes' "
        "environments (the pod's secret_env) stay unreadable: limits only needs a root grader "
        "with a world-readable interpreter or Landlock (Linux 5.19+), else graders refuse. A "
        "gVisor pod protects the node, not the pod's secrets (docs/sandbox.md, 'Secrets').",
    )
    runtime_class_name: str | None = Field(
        default=None,
        description="RuntimeClass of the pod, e.g. gvisor (runsc) or kata; empty = the node's "
        "default runtime. Set by an admission policy on task pods, by the TrainingRuntime on "
        "TrainJob pods (neither API lets a task or a TrainJob set it).",
    )
    seccomp_profile: SecurityProfile | None = Field(
        default=None,
        description="Pod seccomp profile: Unconfined, or Localhost with a profile that adds to "
        "the runtime's default clone/clone3/unshare with namespace flags, mount, umount2, "
        "pivot_root and sethostname; empty = leave the pod's (KFP: RuntimeDefault).",
    )
    apparmor_profile: SecurityProfile | None = Field(
        default=None,
        description="Pod AppArmor profile (nodes with AppArmor, e.g. Ubuntu: the runtime's "
        "default profile denies mount): Unconfined or Localhost; empty = leave the pod's.",
    )
    proc_mount: Literal["Default", "Unmasked"] | None = Field(
        default=None,
        description="procMount of the container: Unmasked lets the sandbox mount a fresh /proc "
        "in its PID namespace (the kernel refuses that inside a user namespace while parts of "
        "/proc are masked); Kubernetes needs host_users: false for it.",
    )
    host_users: bool | None = Field(
        default=None,
        description="hostUsers of the pod: false runs it in its own user namespace (Kubernetes "
        "1.33+ with a runtime that supports it; needed for proc_mount: Unmasked); empty = leave "
        "the pod's.",
    )

    @field_validator("runtime_class_name")
    @classmethod
    def _runtime_class(cls, value: str | None) -> str | None:
        if value is not None and not (len(value) <= 253 and _DNS_SUBDOMAIN.match(value)):
            raise ValueError(f"'{value}' is not a valid RuntimeClass name")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> SandboxSettings:
        if self.proc_mount == "Unmasked" and self.host_users is not False:
            raise ValueError(
                "proc_mount: Unmasked needs host_users: false (Kubernetes only unmasks /proc "
                "of a pod in its own user namespace)"
            )
        return self

    def task_env(self) -> dict[str, str]:
        """The sandbox's variable for every task and TrainJob node of this kind of pod."""
        fallback = "limits-only" if self.isolation == "limits-only" else "refuse"
        return {SANDBOX_FALLBACK_ENV: fallback}

    def pod_security_context(self) -> dict[str, Any]:
        """The pod ``securityContext`` fields these settings ask for (empty: none)."""
        out: dict[str, Any] = {}
        if self.seccomp_profile is not None:
            out["seccompProfile"] = self.seccomp_profile.as_k8s()
        if self.apparmor_profile is not None:
            out["appArmorProfile"] = self.apparmor_profile.as_k8s()
        return out

    def container_security_context(self) -> dict[str, Any]:
        """The container ``securityContext`` fields these settings ask for (empty: none)."""
        return {"procMount": self.proc_mount} if self.proc_mount else {}

    def pod_spec(self) -> dict[str, Any]:
        """Every pod field these settings ask for, as a pod ``spec`` fragment (the container
        as ``containers[0]``, without a name): what an admission policy applies to task pods.
        Empty when the pod is left as it is."""
        out: dict[str, Any] = {}
        if self.runtime_class_name:
            out["runtimeClassName"] = self.runtime_class_name
        if self.host_users is not None:
            out["hostUsers"] = self.host_users
        if self.pod_security_context():
            out["securityContext"] = self.pod_security_context()
        if self.container_security_context():
            out["containers"] = [{"securityContext": self.container_security_context()}]
        return out


class PodSettings(BaseModel):
    """Resources, placement, volumes and environment of one kind of pod (GPU or CPU tasks)."""

    model_config = _STRICT

    accelerator_resource: str = Field(
        default="nvidia.com/gpu",
        description="Extended resource name of the accelerator, e.g. nvidia.com/gpu, amd.com/gpu.",
    )
    accelerator_count: int = Field(
        default=0, ge=0, description="Accelerators per pod (per node for a TrainJob); 0 = none."
    )
    accelerator_label: str = Field(
        default="cloud.google.com/gke-accelerator",
        description="Node label that carries the accelerator type (GKE: "
        "cloud.google.com/gke-accelerator; NVIDIA GPU feature discovery: nvidia.com/gpu.product).",
    )
    accelerator_type: str | None = Field(
        default=None,
        description="Value of accelerator_label to schedule on, e.g. nvidia-h100-80gb; empty = "
        "any node with the resource.",
    )
    cpu_request: str | None = Field(default=None, description="CPU request, e.g. 8 or 500m.")
    cpu_limit: str | None = Field(default=None, description="CPU limit; empty = no limit.")
    memory_request: str | None = Field(default=None, description="Memory request, e.g. 64Gi.")
    memory_limit: str | None = Field(
        default=None, description="Memory limit; empty = no limit (pods may then be OOM-evicted)."
    )
    node_selector: dict[str, str] = Field(
        default_factory=dict, description="Extra node labels the pod must match."
    )
    tolerations: list[Toleration] = Field(
        default_factory=list, description="Taints the pod tolerates (GPU node pools are tainted)."
    )
    shm_size: str | None = Field(
        default=None,
        description="Size of a memory-backed /dev/shm (NCCL, DataLoader workers need more than "
        "the 64Mi default); empty = no extra /dev/shm volume.",
    )
    workspace: WorkspaceSettings | None = Field(
        default=None, description="Scratch/checkpoint volume; empty = none."
    )
    secret_env: list[SecretEnv] = Field(
        default_factory=list,
        description="Environment variables filled from Secrets (API keys, S3 credentials).",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        description="Plain, non-secret environment variables (MLFLOW_TRACKING_URI, "
        "MLFLOW_S3_ENDPOINT_URL, ...). Credentials go in secret_env.",
    )
    sandbox: SandboxSettings = Field(
        default_factory=SandboxSettings,
        description="Isolation of generated code run by graders in these pods (training "
        "rewards, evaluation): what the pod gets so that the code sandbox keeps its namespaces, "
        "and whether graders may fall back to resource limits only.",
    )

    @field_validator("accelerator_resource", "accelerator_label")
    @classmethod
    def _key(cls, value: str) -> str:
        return _check_label_key(value)

    @field_validator("accelerator_type")
    @classmethod
    def _type(cls, value: str | None) -> str | None:
        if value is not None and not (len(value) <= 63 and _LABEL_VALUE.match(value)):
            raise ValueError(f"'{value}' is not a valid node label value")
        return value

    @field_validator("cpu_request", "cpu_limit", "memory_request", "memory_limit", "shm_size")
    @classmethod
    def _quantity(cls, value: str | int | float | None, info: Any) -> str | None:
        return _check_quantity(None if value is None else str(value), info.field_name)

    @field_validator("node_selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        for key, label in value.items():
            _check_label_key(key)
            if not (len(label) <= 63 and _LABEL_VALUE.match(label)):
                raise ValueError(f"node_selector['{key}']: '{label}' is not a valid label value")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not _ENV_NAME.match(name):
                raise ValueError(f"'{name}' is not a valid environment variable name")
            if _SECRET_LIKE.search(name.upper()):
                raise ValueError(
                    f"'{name}' looks like a credential; put it in secret_env (a Secret name and "
                    "key) instead of a plain value"
                )
        return value

    @model_validator(mode="after")
    def _consistent(self) -> PodSettings:
        names = [item.env for item in self.secret_env]
        dupes = sorted({n for n in names if names.count(n) > 1} | (set(names) & set(self.env)))
        if dupes:
            raise ValueError(f"environment variable(s) {dupes} defined more than once")
        for kind in ("cpu", "memory"):
            request, limit = getattr(self, f"{kind}_request"), getattr(self, f"{kind}_limit")
            if request and limit and _quantity_value(request) > _quantity_value(limit):
                raise ValueError(f"{kind}_request ({request}) is above {kind}_limit ({limit})")
        if self.accelerator_type and not self.accelerator_count:
            raise ValueError("accelerator_type is set but accelerator_count is 0")
        return self

    @model_validator(mode="after")
    def _sandbox_env(self) -> PodSettings:
        if SANDBOX_FALLBACK_ENV in self.env or SANDBOX_FALLBACK_ENV in {
            item.env for item in self.secret_env
        }:
            raise ValueError(
                f"env sets {SANDBOX_FALLBACK_ENV}; set sandbox.isolation instead (namespaces or "
                "limits-only)"
            )
        return self

    def resource_requests(self) -> dict[str, str]:
        """Kubernetes ``resources.requests`` (accelerators included: they must equal limits)."""
        out: dict[str, str] = {}
        if self.cpu_request:
            out["cpu"] = self.cpu_request
        if self.memory_request:
            out["memory"] = self.memory_request
        if self.accelerator_count:
            out[self.accelerator_resource] = str(self.accelerator_count)
        return out

    def resource_limits(self) -> dict[str, str]:
        """Kubernetes ``resources.limits``, the accelerator count included when above 0."""
        out: dict[str, str] = {}
        if self.cpu_limit:
            out["cpu"] = self.cpu_limit
        if self.memory_limit:
            out["memory"] = self.memory_limit
        if self.accelerator_count:
            out[self.accelerator_resource] = str(self.accelerator_count)
        return out

    def resources(self) -> dict[str, dict[str, str]]:
        """A Kubernetes ``ResourceRequirements`` (``requests``/``limits``, empty ones left out)."""
        out = {"requests": self.resource_requests(), "limits": self.resource_limits()}
        return {key: value for key, value in out.items() if value}

    def effective_node_selector(self) -> dict[str, str]:
        """``node_selector`` plus ``accelerator_label: accelerator_type`` when a type is set."""
        out = dict(self.node_selector)
        if self.accelerator_type:
            out[self.accelerator_label] = self.accelerator_type
        return out

    def k8s_tolerations(self) -> list[dict[str, Any]]:
        """The tolerations as Kubernetes objects."""
        return [item.as_k8s() for item in self.tolerations]

    def env_vars(self, extra: dict[str, str] | None = None) -> list[dict[str, Any]]:
        """Kubernetes ``EnvVar`` list: plain ``env`` (+ ``extra``, which wins), sorted by name,
        then the Secret-backed variables in their configured order."""
        plain = {**self.env, **(extra or {})}
        secret_names = {item.env for item in self.secret_env}
        clash = sorted(secret_names & set(plain))
        if clash:
            raise ConfigError(f"environment variable(s) {clash} are Secret-backed; do not set them")
        out: list[dict[str, Any]] = [{"name": k, "value": str(plain[k])} for k in sorted(plain)]
        out.extend(item.as_k8s() for item in self.secret_env)
        return out


class TrainJobSettings(BaseModel):
    """How a multi-node training stage runs as a Kubeflow Trainer v2 ``TrainJob``."""

    model_config = _STRICT

    runtime_name: str = Field(
        default="torch-distributed",
        description="Name of the (Cluster)TrainingRuntime the TrainJob references.",
    )
    runtime_kind: Literal["ClusterTrainingRuntime", "TrainingRuntime"] = Field(
        default="ClusterTrainingRuntime",
        description="Kind of the runtime: cluster-wide, or namespaced in the job's namespace.",
    )
    image: str = Field(
        default_factory=lambda: _release_image("train"),
        description="Trainer image (CUDA + torch + TRL + conductor_core). Default: this "
        "release's pinned train image (conductor_core.cluster.images: "
        "<registry>/conductor-train:<version>), the one the pipeline's GPU tasks run; a value "
        "must name a tag other than 'latest' or a digest.",
    )
    launcher: Literal["torchrun", "none"] = Field(
        default="torchrun",
        description="torchrun: run 'conductor train' under torchrun (reads the PET_* variables "
        "the torch runtime sets); none: run 'conductor train' directly.",
    )
    sharding: Literal["auto", "none", "fsdp2"] = Field(
        default="auto",
        description="How the training state is split over the TrainJob's processes. fsdp2: "
        "PyTorch FSDP2 through accelerate, fully sharded (ZeRO-3's plan) with fp32 master "
        "weights and bf16 compute (conductor_core/resources/train/accelerate/"
        "fsdp2-full-shard.yaml, given to the nodes as the environment accelerate launch derives "
        "from it): what a full fine-tune of the paper's 7B needs on 80 GB GPUs (docs/training.md, "
        "'Memory at the paper's scale'). none: plain DDP, every process holds the whole model "
        "(LoRA, small models). auto: fsdp2 for a full fine-tune of a real model on GPUs (the "
        "stage config's device: cuda, lora off, model not tiny: the paper profile), else none.",
    )
    num_nodes: int = Field(default=2, ge=1, description="Training nodes (pods) of the TrainJob.")
    num_proc_per_node: int | None = Field(
        default=None,
        ge=1,
        description="Processes per node; empty = one per accelerator (gpu.accelerator_count).",
    )
    config_mount_path: str = Field(
        default="/etc/conductor",
        description="Where the ConfigMap with the stage config is mounted (file stage.yaml).",
    )
    pod_service_account: str | None = Field(
        default=None,
        description="Service account of the training pods; empty = the runtime's default.",
    )
    pod_labels: dict[str, str] = Field(
        default_factory=lambda: {"sidecar.istio.io/inject": "false"},
        description="Extra labels of the training pods. The default keeps Istio's sidecar out: "
        "multi-user Kubeflow injects it into profile namespaces, and torch's rendezvous between "
        "nodes fails through it (KFP opts its own pods out the same way). {} adds none.",
    )
    patch_manager: str = Field(
        default="conductor.dev/launcher",
        description="The 'manager' key of this platform's entry in spec.runtimePatches.",
    )
    active_deadline: bool = Field(
        default=True,
        description="Also set spec.activeDeadlineSeconds = deadline_s, so that the cluster stops "
        "the job even when the launcher is gone.",
    )
    deadline_s: float = Field(
        default=48 * 3600.0,
        gt=0,
        description="Overall time limit of a launch; past it the TrainJob is deleted and the task "
        "fails.",
    )
    watch_timeout_s: int = Field(
        default=60,
        ge=1,
        le=3600,
        description="Length of one watch window; the watch is re-opened (after a fresh read) at "
        "the end of each window or on a dropped connection.",
    )
    owner: Literal["workflow", "pod", "none"] = Field(
        default="workflow",
        description="What owns the TrainJob and its ConfigMap (Kubernetes deletes them with "
        "it): `workflow`, the pipeline run's Argo Workflow, so that the job outlives its "
        "launcher pod (a drained node, an evicted pod) and a retried launcher attaches to it "
        "(falls back to `pod` where the Workflow cannot be read); `pod`, the launcher pod, so "
        "that the job goes with it; `none`, nothing (deleted by the launcher or by hand). A job "
        "goes to another namespace than the launcher's without an owner.",
    )
    delete_on_failure: bool = Field(
        default=True,
        description="Delete the TrainJob and its ConfigMap when it fails, times out or the task "
        "is cancelled. A launcher pod stopped while its run goes on (SIGTERM from a drain or an "
        "eviction, the Workflow not being terminated) leaves a Workflow-owned job running for "
        "the task's retry to attach to.",
    )
    delete_on_success: bool = Field(
        default=False,
        description="Delete the TrainJob and its ConfigMap after it completes (kept by default "
        "for inspection).",
    )
    stream_logs: bool = Field(
        default=True, description="Stream the rank-0 pod's logs into the task's log."
    )

    @field_validator("runtime_name")
    @classmethod
    def _runtime(cls, value: str) -> str:
        if not (len(value) <= 253 and _DNS_SUBDOMAIN.match(value)):
            raise ValueError(f"'{value}' is not a valid runtime name")
        return value

    @field_validator("image")
    @classmethod
    def _pinned(cls, value: str) -> str:
        name, _, digest = value.partition("@")
        last = name.rsplit("/", 1)[-1]
        tag = last.partition(":")[2]
        if not digest and tag in ("", "latest"):
            raise ValueError(
                f"'{value}' is not pinned: name a version tag or a digest (the default is this "
                f"release's {_release_image('train')})"
            )
        return value

    @field_validator("config_mount_path")
    @classmethod
    def _mount(cls, value: str) -> str:
        if not value.startswith("/") or value.rstrip("/") == "":
            raise ValueError(f"'{value}' must be an absolute path other than /")
        return value.rstrip("/")

    @field_validator("pod_service_account")
    @classmethod
    def _sa(cls, value: str | None) -> str | None:
        if value is not None and not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"'{value}' is not a valid service account name")
        return value


class ClusterSettings(BaseModel):
    """Where the pipeline's tasks run: one :class:`PodSettings` per kind of pod (:data:`POD_KINDS`:
    GPU and CPU training, the TrainJob launcher, GPU evaluation, every other task), TrainJobs."""

    model_config = _STRICT

    namespace: str | None = Field(
        default=None,
        description="Namespace of TrainJobs and ConfigMaps; empty = the pod's own namespace "
        "(in a cluster), else 'default'.",
    )
    service_account: str = Field(
        default="pipeline-runner",
        description="Service account the pipeline's tasks run as. Kubeflow Pipelines picks it "
        "per run, not per task: the run's service account (conductor pipeline submit "
        "--service-account, or the UI run form's Service Account field), else KFP's default, "
        "pipeline-runner in standalone KFP and default-editor in a multi-user profile. The "
        "conductor-training-rbac chart grants it the TrainJob permissions.",
    )
    gpu: PodSettings = Field(
        default_factory=lambda: PodSettings(accelerator_count=1),
        description="Pods of training tasks of a GPU profile (paper) and of each TrainJob node.",
    )
    cpu: PodSettings = Field(
        default_factory=PodSettings,
        description="Pods of every task that loads no GPU profile's model (curation, parameter "
        "check, evaluation and registration of a CPU profile's model, closing the MLflow run).",
    )
    cpu_train: PodSettings = Field(
        default_factory=PodSettings,
        description="Pods of training tasks of a CPU profile (tiny): no accelerator. Given as "
        "the differences from cpu (merged over it).",
    )
    launcher: PodSettings = Field(
        default_factory=PodSettings,
        description="Pods of training tasks with launcher=trainjob, which only create and watch "
        "the TrainJob (the GPUs are the TrainJob's nodes'): small, no accelerator. Given as the "
        "differences from cpu (merged over it).",
    )
    gpu_eval: PodSettings = Field(
        default_factory=PodSettings,
        description="Pods of evaluation shards and registration of a GPU profile's model (they "
        "load it, e.g. a 7B model), with the workspace its weights are downloaded to. Given as "
        "the differences from gpu (merged over it).",
    )
    trainjob: TrainJobSettings = Field(
        default_factory=TrainJobSettings,
        description="Multi-node training through a Kubeflow Trainer TrainJob.",
    )
    artifact_root: str | None = Field(
        default=None,
        description="Default artifact root of a pipeline run (checkpoints, models, reports), used "
        "when the run's artifact_root parameter is empty: s3://bucket/prefix, or a folder under "
        "one of shared_paths; set as CONDUCTOR_ARTIFACT_ROOT on every task. Empty = a run must "
        "give one: a pod's own disk is never shared with the other tasks.",
    )
    shared_paths: list[str] = Field(
        default_factory=list,
        description="Absolute folders every task sees with the same content (the mount path of a "
        "ReadWriteMany volume mounted on every pod, e.g. /workspace with gpu.workspace and "
        "cpu.workspace on the same claim): an artifact root under one of them is accepted "
        "besides s3://. '/' = every folder (all tasks on one machine: the local run). "
        "Empty = only s3://.",
    )
    s3_endpoint: str | None = Field(
        default=None,
        description="URL of an S3-compatible endpoint (MinIO, Ceph, ...), set as "
        "AWS_ENDPOINT_URL (boto3) and MLFLOW_S3_ENDPOINT_URL (MLflow's artifact store) on every "
        "task and TrainJob node. Empty = AWS S3 itself. Credentials come from secret_env "
        "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY).",
    )

    @field_validator("namespace")
    @classmethod
    def _ns(cls, value: str | None) -> str | None:
        return _check_dns_label(value, "namespace") if value is not None else None

    @field_validator("service_account")
    @classmethod
    def _sa(cls, value: str) -> str:
        if not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"'{value}' is not a valid service account name")
        return value

    @field_validator("shared_paths")
    @classmethod
    def _shared(cls, value: list[str]) -> list[str]:
        out = []
        for path in value:
            if not path.startswith("/") or "/../" in f"{path}/":
                raise ValueError(f"'{path}' must be an absolute path without '..'")
            out.append(path.rstrip("/") or "/")
        return out

    @field_validator("s3_endpoint")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError(f"'{value}' is not an http(s):// URL (e.g. http://minio.minio:9000)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _derive_pods(cls, data: Any) -> Any:
        """Each of :data:`DERIVED_PODS` is its base pod's settings with its own merged over."""
        if not isinstance(data, dict):
            return data
        out = dict(data)
        for kind, base in DERIVED_PODS.items():
            out[kind] = deep_merge(_pod_data(cls, out, base), _pod_data(cls, out, kind) or {})
        return out

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSettings:
        for kind in ("cpu", "cpu_train", "launcher"):
            if getattr(self, kind).accelerator_count:
                raise ValueError(
                    f"{kind}.accelerator_count must be 0: GPU profiles use the gpu settings"
                )
        root = self.artifact_root
        if root and not (re.match(r"^s3://[^/]+", root) or shared_path_of(root, self.shared_paths)):
            raise ValueError(
                f"artifact_root '{root}' is neither s3://bucket/prefix nor under one of "
                f"shared_paths ({', '.join(self.shared_paths) or 'none'}): the tasks of a run "
                "share nothing else"
            )
        extra = self.task_env()
        for kind in POD_KINDS:
            pod: PodSettings = getattr(self, kind)
            secret = {item.env for item in pod.secret_env}
            for name, value in extra.items():
                if name in secret or pod.env.get(name, value) != value:
                    raise ValueError(
                        f"{kind}.env sets {name} too; set it once, in "
                        f"{'artifact_root' if name == ARTIFACT_ROOT_ENV else 's3_endpoint'}"
                    )
            pod.env = {**pod.env, **extra}
        return self

    def task_env(self) -> dict[str, str]:
        """The variables these settings add to every task's and TrainJob node's environment:
        ``CONDUCTOR_ARTIFACT_ROOT`` (``artifact_root``), ``AWS_ENDPOINT_URL`` and
        ``MLFLOW_S3_ENDPOINT_URL`` (``s3_endpoint``), for those that are set."""
        out = {}
        if self.artifact_root:
            out[ARTIFACT_ROOT_ENV] = self.artifact_root
        if self.s3_endpoint:
            out.update(dict.fromkeys(S3_ENDPOINT_ENVS, self.s3_endpoint))
        return out

    def s3_secret(self) -> str | None:
        """The Secret the tasks' S3 credentials come from (the ``secret_env`` entry of
        ``AWS_ACCESS_KEY_ID`` of the CPU pods, where the parameter check runs), or None."""
        for item in self.cpu.secret_env:
            if item.env == S3_CREDENTIAL_ENVS[0]:
                return item.secret_name
        return None

    def procs_per_node(self) -> int | None:
        """Processes per TrainJob node: the explicit value, else one per GPU (None without)."""
        if self.trainjob.num_proc_per_node is not None:
            return self.trainjob.num_proc_per_node
        return self.gpu.accelerator_count or None


POD_KINDS = ("gpu", "cpu", "cpu_train", "launcher", "gpu_eval")
"""The kinds of pod of :class:`ClusterSettings` (each a :class:`PodSettings` field)."""
DERIVED_PODS = {"cpu_train": "cpu", "launcher": "cpu", "gpu_eval": "gpu"}
"""Pod kinds given as the differences from another kind: a settings file names only what
differs (e.g. ``gpu_eval: {accelerator_count: 1}``), the rest (tolerations, Secrets, env, ...)
follows the base kind."""


def _pod_data(cls: type[BaseModel], data: dict[str, Any], kind: str) -> dict[str, Any] | None:
    """The pod settings of ``kind`` in raw ``data`` as a mapping; a missing base kind gives the
    field's default, a missing derived kind None."""
    value = data.get(kind)
    if isinstance(value, BaseModel):
        return value.model_dump()
    if isinstance(value, dict):
        return value
    if value is None and kind not in DERIVED_PODS:
        return cls.model_fields[kind].get_default(call_default_factory=True).model_dump()
    return value


def shared_path_of(path: str, shared_paths: list[str] | tuple[str, ...]) -> str | None:
    """The entry of ``shared_paths`` that the absolute ``path`` lies under (``/`` holds every
    absolute path), or None; a relative path, or one with ``..``, is under none."""
    if not path.startswith("/") or "/../" in f"{path}/":
        return None
    if "/" in shared_paths:
        return "/"
    for shared in shared_paths:
        if path == shared or path.startswith(shared.rstrip("/") + "/"):
            return shared
    return None


def _bundled_default() -> dict[str, Any]:
    text = (resources.files("conductor_core.resources") / "cluster" / "default.yaml").read_text(
        encoding="utf-8"
    )
    import yaml

    data = yaml.safe_load(text)
    return data if isinstance(data, dict) else {}


def load_cluster_settings(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> ClusterSettings:
    """The bundled default settings, with the user YAML at ``path`` (or at the file named by
    ``CONDUCTOR_CLUSTER_SETTINGS``) and then ``overrides`` deep-merged over them.

    Raises :class:`ConfigError` naming the file and the field (``gpu.shm_size: ...``) when a
    value is invalid, and naming the file when it is missing or not a mapping.
    """
    data = _bundled_default()
    source = "the bundled cluster settings"
    if path is None and os.environ.get(ENV_VAR):
        path = os.environ[ENV_VAR]
    if path is not None:
        user = read_yaml_file(
            path,
            f"cluster settings file not found: {path} (set {ENV_VAR} or pass an existing file)",
        )
        if user is None:
            user = {}
        if not isinstance(user, dict):
            raise ConfigError(f"{path}: cluster settings must be a YAML mapping (gpu:, trainjob:)")
        data = deep_merge(data, user)
        source = str(path)
    if overrides:
        data = deep_merge(data, overrides)
    try:
        return ClusterSettings.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {format_validation_error(exc)}") from exc
