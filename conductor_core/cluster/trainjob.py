"""Kubeflow Trainer v2 ``TrainJob`` and ``ConfigMap`` manifests for one training stage.

Plain dicts (no Kubernetes import), ready for ``CustomObjectsApi``/``CoreV1Api`` or ``kubectl``.

The job references a (Cluster)TrainingRuntime (``torch-distributed`` by default) and fills in:

* ``spec.trainer``: the image, ``[torchrun --no-python] conductor train --stage S --config
  /etc/conductor/stage.yaml``, the environment (plain values and ``secretKeyRef``\\s), ``numNodes``,
  ``numProcPerNode`` and ``resourcesPerNode``. The environment carries the sharding plan
  (``trainjob.sharding``, :mod:`conductor_core.cluster.sharding`): for ``fsdp2`` the variables
  ``accelerate launch`` derives from the plan's accelerate config (``ACCELERATE_USE_FSDP``,
  ``ACCELERATE_MIXED_PRECISION``, ``FSDP_*``), so torchrun stays the launcher the torch runtime
  expects; a variable ``gpu.env`` sets itself keeps that value;
* ``spec.runtimePatches``: one entry owned by this platform (``manager``) that patches the pod
  template of the runtime's ``node`` replicated job: node selector, tolerations, volumes
  (memory-backed ``/dev/shm``, the workspace, the ConfigMap holding the stage config), their
  mounts in the ``node`` container, pod labels, and optionally the service account.

``runtimePatches`` is the API of Trainer v2.2 and later (``trainer.kubeflow.org/v1alpha1``,
``pkg/apis/trainer/v1alpha1/trainjob_types.go``); it replaced ``podTemplateOverrides`` (v2.0-v2.1),
which these manifests do not use (the minimum Trainer is declared in
:mod:`conductor_core.cluster.versions`). Environment variables of the ``node`` container can only
be set through ``spec.trainer.env`` (the API rejects them in a container patch), so they go there.

Ownership: given an :class:`Owner` (the launcher passes the pipeline run's Argo Workflow, else
the launching task's pod: ``settings.trainjob.owner``), the TrainJob and its ConfigMap carry an
``ownerReference`` to it, so Kubernetes' garbage collector deletes them (and the TrainJob's JobSet
and pods) when the owner is deleted. Owned by the Workflow, a job outlives its launcher pod (a
drained node, an evicted pod) and goes with the run. The launching pod is read from the
downward-API variables ``POD_NAME``, ``POD_UID``, ``POD_NAMESPACE`` and ``WORKFLOW_NAME``
(:data:`POD_IDENTITY_FIELDS`). Without them (a local run) the objects have no owner.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from conductor_core.cluster.settings import ClusterSettings
from conductor_core.cluster.sharding import launch_env, resolve_plan
from conductor_core.errors import ConfigError

TRAINER_GROUP = "trainer.kubeflow.org"
TRAINER_VERSION = "v1alpha1"
TRAINER_API_VERSION = f"{TRAINER_GROUP}/{TRAINER_VERSION}"
TRAINJOB_KIND = "TrainJob"
TRAINJOB_PLURAL = "trainjobs"

NODE = "node"
"""Name of the trainer replicated job and of its container in the Trainer runtimes."""
CONFIG_KEY = "stage.yaml"
"""Key (and file name) of the stage config in the ConfigMap."""
CONFIG_VOLUME = "stage-config"
SHM_VOLUME = "dshm"
WORKSPACE_VOLUME = "workspace"

LABEL_PREFIX = "conductor.dev/"
LABEL_RUN = LABEL_PREFIX + "run-id"
LABEL_TASK = LABEL_PREFIX + "task-id"
LABEL_STAGE = LABEL_PREFIX + "stage"
LABEL_TRAINJOB = LABEL_PREFIX + "trainjob"

# Labels the JobSet controller sets on the pods of a TrainJob (the JobSet has the TrainJob's name);
# together they select the rank-0 pod ("<name>-node-0-0-<suffix>").
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"

MAX_NAME_LENGTH = 40
"""TrainJob names stay at most 40 characters, below the API's 63: the JobSet derives Job and pod
names (``<name>-node-<job>-<pod>-<5 random>``) and a pod hostname from it, which must fit in 63."""
MAX_CONFIGMAP_BYTES = 1024 * 1024

POD_NAME_ENV = "POD_NAME"
"""Environment variable with the launching pod's name (downward API ``metadata.name``)."""
POD_UID_ENV = "POD_UID"
"""Environment variable with the launching pod's uid (downward API ``metadata.uid``)."""
POD_NAMESPACE_ENV = "POD_NAMESPACE"
"""Environment variable with the launching pod's namespace (downward API ``metadata.namespace``)."""
WORKFLOW_LABEL = "workflows.argoproj.io/workflow"
"""The label Argo puts on every pod of a Workflow, valued with the Workflow's name."""
WORKFLOW_NAME_ENV = "WORKFLOW_NAME"
"""Environment variable with the name of the launching pod's Argo Workflow (its label)."""
POD_IDENTITY_FIELDS = {
    POD_NAME_ENV: "metadata.name",
    POD_UID_ENV: "metadata.uid",
    POD_NAMESPACE_ENV: "metadata.namespace",
    WORKFLOW_NAME_ENV: f"metadata.labels['{WORKFLOW_LABEL}']",
}
"""Each variable and the pod field it is filled from (``conductor_pipelines/kubernetes.py`` sets
them)."""

_NON_SLUG = re.compile(r"[^a-z0-9]+")
_LABEL_INVALID = re.compile(r"[^A-Za-z0-9._-]+")


def _slug(text: str) -> str:
    return _NON_SLUG.sub("-", text.lower()).strip("-")


def label_value(text: str) -> str:
    """``text`` as a valid label value: invalid characters become ``-``, at most 63 characters,
    starting and ending with an alphanumeric (may be empty)."""
    value = _LABEL_INVALID.sub("-", str(text))[:63]
    return value.strip("-_.")


def trainjob_name(run_id: str, task_id: str, stage: str) -> str:
    """A deterministic TrainJob name for one stage of one pipeline task.

    ``cdt-<stage>-<run prefix>-<hash>``: an RFC 1035 label (starts with a letter) of at most
    :data:`MAX_NAME_LENGTH` characters; the 10-hex-digit hash of ``(run_id, task_id, stage)``
    keeps names of different tasks apart, and a retried task gets the same name (so the
    launcher re-attaches instead of starting a second job).
    """
    if not str(run_id).strip() or not str(task_id).strip() or not str(stage).strip():
        raise ConfigError("trainjob_name: run_id, task_id and stage must be non-empty")
    digest = hashlib.sha256(f"{run_id}\0{task_id}\0{stage}".encode()).hexdigest()[:10]
    stage_slug = _slug(stage)[:12].strip("-")
    budget = MAX_NAME_LENGTH - len("cdt-") - len(digest) - 1 - (len(stage_slug) + 1)
    run_slug = _slug(run_id)[: max(budget - 1, 0)].strip("-")
    return "-".join(part for part in ("cdt", stage_slug, run_slug, digest) if part)


def resource_labels(run_id: str, task_id: str, stage: str, name: str) -> dict[str, str]:
    """Labels tying the TrainJob, its ConfigMap and its pods to the run, task and stage."""
    return {
        "app.kubernetes.io/name": "conductor",
        "app.kubernetes.io/component": "training",
        "app.kubernetes.io/managed-by": "conductor-launcher",
        LABEL_RUN: label_value(run_id),
        LABEL_TASK: label_value(task_id),
        LABEL_STAGE: label_value(stage),
        LABEL_TRAINJOB: name,
    }


def rank0_pod_selector(name: str) -> str:
    """Label selector of the rank-0 pod of TrainJob ``name`` (first pod of the ``node`` job)."""
    return ",".join(
        [
            f"{JOBSET_NAME_LABEL}={name}",
            f"{REPLICATED_JOB_LABEL}={NODE}",
            f"{JOB_INDEX_LABEL}=0",
            f"{COMPLETION_INDEX_LABEL}=0",
        ]
    )


@dataclass(frozen=True)
class TrainJobRequest:
    """What to train: the stage of one pipeline task, its config, and per-launch additions."""

    run_id: str
    """Pipeline run id (KFP ``dsl.PIPELINE_JOB_ID_PLACEHOLDER``)."""
    task_id: str
    """Task id within the run (KFP ``dsl.PIPELINE_TASK_ID_PLACEHOLDER``)."""
    stage: str
    """Training stage: base, adaptive or recursive."""
    stage_config: str | Mapping[str, Any]
    """The stage config (YAML text or a mapping), mounted as ``<config_mount_path>/stage.yaml``."""
    image: str | None = None
    """Trainer image; ``None`` = ``settings.trainjob.image``."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra plain environment (e.g. ``MLFLOW_RUN_ID``), over ``settings.gpu.env``."""
    extra_args: tuple[str, ...] = ()
    """Arguments appended to ``conductor train ...`` (e.g. ``("--no-progress",)``)."""


@dataclass(frozen=True)
class TrainJobManifests:
    """The manifests of one launch: the TrainJob and the ConfigMap with the stage config."""

    name: str
    namespace: str
    trainjob: dict[str, Any]
    configmap: dict[str, Any]

    @property
    def configmap_name(self) -> str:
        """Name of the ConfigMap."""
        return self.configmap["metadata"]["name"]


WORKFLOW_GROUP = "argoproj.io"
WORKFLOW_VERSION = "v1alpha1"
WORKFLOW_PLURAL = "workflows"
WORKFLOW_KIND = "Workflow"


@dataclass(frozen=True)
class Owner:
    """The owner of what a launch creates: the launching task's pod, or its run's Workflow."""

    name: str
    uid: str
    namespace: str | None = None
    """The owner's namespace, when known (an owner must be in the namespace of what it owns)."""
    kind: str = "Pod"
    api_version: str = "v1"

    def reference(self) -> dict[str, Any]:
        """The ``ownerReference`` to this owner. Not a controller reference (the Trainer controls
        the TrainJob), and ``blockOwnerDeletion`` off: setting it would need ``update`` on the
        owner's ``finalizers`` under the OwnerReferencesPermissionEnforcement admission plugin."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
            "blockOwnerDeletion": False,
        }


def owner_pod_from_env(environ: Mapping[str, str] | None = None) -> Owner | None:
    """The launching pod from ``POD_NAME``, ``POD_UID`` and (optional) ``POD_NAMESPACE`` in
    ``environ`` (default ``os.environ``); None unless both name and uid are set (a local run)."""
    env = os.environ if environ is None else environ
    name = (env.get(POD_NAME_ENV) or "").strip()
    uid = (env.get(POD_UID_ENV) or "").strip()
    if not name or not uid:
        return None
    namespace = (env.get(POD_NAMESPACE_ENV) or "").strip() or None
    return Owner(name=name, uid=uid, namespace=namespace)


def workflow_name_from_env(environ: Mapping[str, str] | None = None) -> str | None:
    """The launching pod's Argo Workflow from ``WORKFLOW_NAME`` (None outside Argo)."""
    env = os.environ if environ is None else environ
    return (env.get(WORKFLOW_NAME_ENV) or "").strip() or None


def workflow_owner(workflow: Mapping[str, Any]) -> Owner:
    """The Workflow object ``workflow`` (as the API returns it) as an :class:`Owner`."""
    meta = workflow.get("metadata") or {}
    return Owner(
        name=meta["name"],
        uid=meta["uid"],
        namespace=meta.get("namespace"),
        kind=WORKFLOW_KIND,
        api_version=f"{WORKFLOW_GROUP}/{WORKFLOW_VERSION}",
    )


def workflow_shutting_down(workflow: Mapping[str, Any]) -> bool:
    """Whether the run of Workflow ``workflow`` is being stopped: KFP's terminate sets its
    ``spec.activeDeadlineSeconds`` to 0, ``argo stop``/``terminate`` set ``spec.shutdown``."""
    spec = workflow.get("spec") or {}
    return spec.get("activeDeadlineSeconds") == 0 or bool(spec.get("shutdown"))


def stage_config_text(stage_config: str | Mapping[str, Any]) -> str:
    """The stage config as YAML text (a mapping is dumped in its order)."""
    import yaml

    if isinstance(stage_config, str):
        try:
            parsed = yaml.safe_load(stage_config)
        except yaml.YAMLError as exc:
            raise ConfigError(f"stage_config: not valid YAML ({exc})") from exc
        if not isinstance(parsed, dict):
            raise ConfigError("stage_config: must be a YAML mapping of the stage's config fields")
        return stage_config
    return yaml.safe_dump(dict(stage_config), sort_keys=False, allow_unicode=True)


def trainer_command(stage: str, settings: ClusterSettings) -> tuple[list[str], list[str]]:
    """``(command, args)`` of the node container: ``conductor train --stage S --config F``,
    under ``torchrun --no-python`` when ``settings.trainjob.launcher`` is ``torchrun`` (torchrun
    takes node count, rank and rendezvous from the ``PET_*`` variables the torch runtime sets)."""
    command = ["conductor"]
    if settings.trainjob.launcher == "torchrun":
        command = ["torchrun", "--no-python", "conductor"]
    config_path = f"{settings.trainjob.config_mount_path}/{CONFIG_KEY}"
    return command, ["train", "--stage", stage, "--config", config_path]


def sharding_env(request: TrainJobRequest, settings: ClusterSettings) -> dict[str, str]:
    """The environment of the sharding plan ``settings.trainjob.sharding`` resolves to for
    ``request``'s stage (:func:`~conductor_core.cluster.sharding.resolve_plan`): empty for
    ``none``, else what ``accelerate launch`` would set from the plan's accelerate config, less
    the variables ``settings.gpu.env`` sets itself (those keep the value given there)."""
    plan = resolve_plan(settings.trainjob.sharding, request.stage_config, request.stage)
    return {k: v for k, v in launch_env(plan).items() if k not in settings.gpu.env}


def build_configmap(
    name: str,
    namespace: str,
    stage_config: str | Mapping[str, Any],
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    owner: Owner | None = None,
) -> dict[str, Any]:
    """A ``ConfigMap`` named ``name`` with the stage config under :data:`CONFIG_KEY`, owned by
    ``owner`` when given (the launcher makes the TrainJob its owner once the job exists).

    Raises :class:`ConfigError` when the config is not a YAML mapping or exceeds the 1 MiB
    ConfigMap limit.
    """
    text = stage_config_text(stage_config)
    if len(text.encode("utf-8")) > MAX_CONFIGMAP_BYTES - 4096:
        raise ConfigError(
            "stage_config: larger than a ConfigMap can hold (1 MiB); keep data in S3 and pass URIs"
        )
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [owner.reference()]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata,
        "data": {CONFIG_KEY: text},
    }


def _volumes(settings: ClusterSettings, configmap_name: str) -> tuple[list[dict], list[dict]]:
    """``(volumes, volume mounts of the node container)``."""
    gpu, job = settings.gpu, settings.trainjob
    volumes: list[dict[str, Any]] = [
        {"name": CONFIG_VOLUME, "configMap": {"name": configmap_name}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": CONFIG_VOLUME, "mountPath": job.config_mount_path, "readOnly": True},
    ]
    if gpu.shm_size:
        volumes.append(
            {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": gpu.shm_size}}
        )
        mounts.append({"name": SHM_VOLUME, "mountPath": "/dev/shm"})
    if gpu.workspace is not None:
        volumes.append(gpu.workspace.as_volume(WORKSPACE_VOLUME))
        mounts.append({"name": WORKSPACE_VOLUME, "mountPath": gpu.workspace.mount_path})
    return volumes, mounts


def build_trainjob(
    name: str,
    namespace: str,
    request: TrainJobRequest,
    settings: ClusterSettings,
    configmap_name: str,
    labels: Mapping[str, str],
    annotations: Mapping[str, str] | None = None,
    owner: Owner | None = None,
) -> dict[str, Any]:
    """The ``TrainJob`` manifest (see the module docstring for what goes where), owned by
    ``owner`` when given."""
    gpu, job = settings.gpu, settings.trainjob
    command, args = trainer_command(request.stage, settings)
    env = {
        "CONDUCTOR_TRAINJOB": name,
        "CONDUCTOR_STAGE": request.stage,
        **gpu.sandbox.task_env(),
        **sharding_env(request, settings),
        **dict(request.env),
    }
    trainer: dict[str, Any] = {
        "image": request.image or job.image,
        "command": command,
        "args": [*args, *request.extra_args],
        "env": gpu.env_vars(env),
        "numNodes": job.num_nodes,
    }
    procs = settings.procs_per_node()
    if procs is not None:
        trainer["numProcPerNode"] = procs
    resources = gpu.resources()
    if resources:
        trainer["resourcesPerNode"] = resources

    volumes, mounts = _volumes(settings, configmap_name)
    pod_spec: dict[str, Any] = {}
    if job.pod_service_account:
        pod_spec["serviceAccountName"] = job.pod_service_account
    node_selector = gpu.effective_node_selector()
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    if gpu.tolerations:
        pod_spec["tolerations"] = gpu.k8s_tolerations()
    # The code sandbox's isolation (graders in the reward run model-written code): the pod and
    # container security fields the settings ask for. runtimeClassName and hostUsers cannot be
    # patched here: they belong in the TrainingRuntime (docs/sandbox.md).
    if gpu.sandbox.pod_security_context():
        pod_spec["securityContext"] = gpu.sandbox.pod_security_context()
    pod_spec["volumes"] = volumes
    container: dict[str, Any] = {"name": NODE, "volumeMounts": mounts}
    if gpu.sandbox.container_security_context():
        container["securityContext"] = gpu.sandbox.container_security_context()
    pod_spec["containers"] = [container]

    patch = {
        "manager": job.patch_manager,
        "trainingRuntimeSpec": {
            "template": {
                "metadata": {"labels": dict(labels)},
                "spec": {
                    "replicatedJobs": [
                        {
                            "name": NODE,
                            "template": {
                                "metadata": {"labels": dict(labels)},
                                "spec": {
                                    "template": {
                                        "metadata": {"labels": {**job.pod_labels, **labels}},
                                        "spec": pod_spec,
                                    }
                                },
                            },
                        }
                    ]
                },
            }
        },
    }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if owner is not None:
        metadata["ownerReferences"] = [owner.reference()]
    spec: dict[str, Any] = {
        "runtimeRef": {
            "apiGroup": TRAINER_GROUP,
            "kind": job.runtime_kind,
            "name": job.runtime_name,
        },
        "trainer": trainer,
        "runtimePatches": [patch],
    }
    if job.active_deadline:
        spec["activeDeadlineSeconds"] = max(1, math.ceil(job.deadline_s))
    return {
        "apiVersion": TRAINER_API_VERSION,
        "kind": TRAINJOB_KIND,
        "metadata": metadata,
        "spec": spec,
    }


def build_manifests(
    request: TrainJobRequest,
    settings: ClusterSettings,
    namespace: str | None = None,
    owner: Owner | None = None,
) -> TrainJobManifests:
    """The TrainJob and ConfigMap of ``request``, in ``namespace`` (else ``settings.namespace``,
    else ``default``), named by :func:`trainjob_name` and labelled by :func:`resource_labels`.

    With ``owner`` both carry an ``ownerReference`` to it. Kubernetes has no owners across
    namespaces (the garbage collector would take such a reference for a missing owner and delete
    the object), so an owner in another namespace raises :class:`ConfigError`.
    """
    name = trainjob_name(request.run_id, request.task_id, request.stage)
    namespace = namespace or settings.namespace or "default"
    if owner is not None and owner.namespace is not None and owner.namespace != namespace:
        raise ConfigError(
            f"the TrainJob's namespace {namespace!r} is not its owner's ({owner.namespace!r}): "
            "an owner must be in the same namespace"
        )
    labels = resource_labels(request.run_id, request.task_id, request.stage, name)
    annotations = {LABEL_RUN: str(request.run_id), LABEL_TASK: str(request.task_id)}
    configmap_name = f"{name}-config"
    configmap = build_configmap(
        configmap_name, namespace, request.stage_config, labels, annotations, owner
    )
    trainjob = build_trainjob(
        name, namespace, request, settings, configmap_name, labels, annotations, owner
    )
    return TrainJobManifests(name=name, namespace=namespace, trainjob=trainjob, configmap=configmap)


@dataclass(frozen=True)
class JobState:
    """Where a TrainJob stands, read from its ``status.conditions``."""

    phase: str
    """``Complete``, ``Failed``, ``Suspended`` or ``Running`` (no terminal condition yet)."""
    reason: str = ""
    message: str = ""

    @property
    def finished(self) -> bool:
        """Whether the job reached a terminal condition."""
        return self.phase in ("Complete", "Failed")


def job_state(trainjob: Mapping[str, Any]) -> JobState:
    """The state of a TrainJob object: the Trainer's ``Failed`` or ``Complete`` condition with
    status ``True`` (Failed wins if both are), else ``Suspended``, else ``Running``."""
    conditions = (trainjob.get("status") or {}).get("conditions") or []
    active = {
        c.get("type"): c for c in conditions if isinstance(c, Mapping) and c.get("status") == "True"
    }
    for phase in ("Failed", "Complete", "Suspended"):
        if phase in active:
            cond = active[phase]
            return JobState(phase, str(cond.get("reason") or ""), str(cond.get("message") or ""))
    return JobState("Running")
