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
        default="ghcr.io/conductor-platform/conductor-train:latest",
        description="Trainer image (CUDA + torch + TRL + conductor_core); the pipeline usually "
        "passes its own image instead.",
    )
    launcher: Literal["torchrun", "none"] = Field(
        default="torchrun",
        description="torchrun: run 'conductor train' under torchrun (reads the PET_* variables "
        "the torch runtime sets); none: run 'conductor train' directly.",
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
    delete_on_failure: bool = Field(
        default=True,
        description="Delete the TrainJob and its ConfigMap when it fails, times out or the task "
        "is cancelled.",
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
    """Where the pipeline's tasks run: GPU pods for training, CPU pods for the rest, TrainJobs."""

    model_config = _STRICT

    namespace: str | None = Field(
        default=None,
        description="Namespace of TrainJobs and ConfigMaps; empty = the pod's own namespace "
        "(in a cluster), else 'default'.",
    )
    service_account: str = Field(
        default="conductor-pipeline",
        description="Service account the pipeline's tasks run as; the conductor-training-rbac "
        "chart grants it the TrainJob permissions.",
    )
    gpu: PodSettings = Field(
        default_factory=lambda: PodSettings(accelerator_count=1),
        description="Pods of training tasks (and of each TrainJob node).",
    )
    cpu: PodSettings = Field(
        default_factory=PodSettings,
        description="Pods of every other task (curation, evaluation, registration).",
    )
    trainjob: TrainJobSettings = Field(
        default_factory=TrainJobSettings,
        description="Multi-node training through a Kubeflow Trainer TrainJob.",
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

    @model_validator(mode="after")
    def _consistent(self) -> ClusterSettings:
        if self.cpu.accelerator_count:
            raise ValueError("cpu.accelerator_count must be 0: training tasks use the gpu settings")
        return self

    def procs_per_node(self) -> int | None:
        """Processes per TrainJob node: the explicit value, else one per GPU (None without)."""
        if self.trainjob.num_proc_per_node is not None:
            return self.trainjob.num_proc_per_node
        return self.gpu.accelerator_count or None


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
