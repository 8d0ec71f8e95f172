"""Kubernetes settings on pipeline tasks: the one place where the cluster settings
(:mod:`conductor_core.cluster.settings`) become kfp-kubernetes calls.

Locally these settings are ignored by KFP's runner (resources only warn); they are kept in the
compiled YAML, where tests assert on them.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterator
from typing import Any

from kfp import kubernetes

from conductor_core.cluster.settings import SANDBOX_LABEL
from conductor_core.cluster.trainjob import POD_IDENTITY_FIELDS

SHM_VOLUME = "dshm"
WORKSPACE_VOLUME = "workspace"

_PINS: contextvars.ContextVar[Any] = contextvars.ContextVar("conductor_image_pins", default=None)


@contextlib.contextmanager
def pinned_images(pins: Any) -> Iterator[None]:
    """Within the block, :func:`apply_pod_settings` pins every task's image:
    ``pins`` (:class:`~conductor_core.cluster.images.ImagePins`, or None for the release's
    references as the components name them, with no pull policy)."""
    token = _PINS.set(pins)
    try:
        yield
    finally:
        _PINS.reset(token)


def pin_image(task: Any) -> Any:
    """Give a task the pinned reference of its image and the pull policy that reference needs
    (``kfp-kubernetes`` ``set_image_pull_policy``: ``IfNotPresent`` for a digest, ``Always`` for
    a tag), when a compile pins images (:func:`pinned_images`); otherwise leave it as it is."""
    pins = _PINS.get()
    if pins is None or task.container_spec is None:
        return task
    # The task's own copy of its component's container (KFP deep-copies it for each task).
    from conductor_core.cluster.images import pull_policy

    task.container_spec.image = ref = pins.resolve(task.container_spec.image)
    kubernetes.set_image_pull_policy(task, pull_policy(ref))
    return task


def apply_pod_settings(task: Any, pod: Any) -> Any:
    """Apply a :class:`~conductor_core.cluster.settings.PodSettings` to a pipeline task:
    resources and accelerators, node selector, tolerations, a memory-backed ``/dev/shm``, the
    workspace volume, Secrets as environment variables and plain environment variables; and,
    when the compile pins images, the image and its pull policy (:func:`pin_image`)."""
    pin_image(task)
    requests, limits = pod.resource_requests(), pod.resource_limits()
    if "cpu" in requests:
        task.set_cpu_request(requests["cpu"])
    if "cpu" in limits:
        task.set_cpu_limit(limits["cpu"])
    if "memory" in requests:
        task.set_memory_request(requests["memory"])
    if "memory" in limits:
        task.set_memory_limit(limits["memory"])
    if pod.accelerator_count:
        task.set_accelerator_type(pod.accelerator_resource)
        task.set_accelerator_limit(pod.accelerator_count)
    for key, value in pod.effective_node_selector().items():
        kubernetes.add_node_selector(task, label_key=key, label_value=value)
    for tol in pod.tolerations:
        kubernetes.add_toleration(
            task,
            key=tol.key,
            operator=tol.operator,
            value=tol.value,
            effect=tol.effect,
            toleration_seconds=tol.toleration_seconds,
        )
    if pod.shm_size:
        kubernetes.empty_dir_mount(
            task,
            volume_name=SHM_VOLUME,
            mount_path="/dev/shm",
            medium="Memory",
            size_limit=pod.shm_size,
        )
    if pod.workspace is not None:
        ws = pod.workspace
        if ws.claim_name:
            kubernetes.mount_pvc(task, pvc_name=ws.claim_name, mount_path=ws.mount_path)
        else:
            kubernetes.empty_dir_mount(
                task,
                volume_name=WORKSPACE_VOLUME,
                mount_path=ws.mount_path,
                size_limit=ws.size_limit,
            )
        task.set_env_variable(name="CONDUCTOR_WORKDIR", value=ws.mount_path)
    by_secret: dict[tuple[str, bool], dict[str, str]] = {}
    for s in pod.secret_env:
        by_secret.setdefault((s.secret_name, s.optional), {})[s.secret_key] = s.env
    for (name, optional), mapping in by_secret.items():
        kubernetes.use_secret_as_env(
            task, secret_name=name, secret_key_to_env=mapping, optional=optional
        )
    for name, value in pod.env.items():
        task.set_env_variable(name=name, value=value)
    return task


RETRIES = 2
"""How often a training or evaluation task is retried after a failure (a preempted node, an
evicted pod, an S3 or API error): a retried training task resumes from its last checkpoint (in
the artifact root), a retried launcher re-attaches to its TrainJob, a retried evaluation shard
evaluates its shard again (its records were in the failed pod; the local runner's retry resumes
from them)."""
RETRY_BACKOFF = {"backoff_duration": "60s", "backoff_factor": 2.0, "backoff_max_duration": "600s"}
"""The wait before the first retry, its growth, and its cap (KFP's retry policy)."""


def retried(task: Any) -> Any:
    """Retry a task :data:`RETRIES` times with :data:`RETRY_BACKOFF`, for failures outside it
    (training and evaluation tasks: a retry costs at most a checkpoint interval or one shard)."""
    return task.set_retry(num_retries=RETRIES, **RETRY_BACKOFF)


def side_effects(task: Any) -> Any:
    """A task with side effects (training, launching a job, moving a registry alias) must run
    every time: caching off."""
    task.set_caching_options(enable_caching=False)
    return task


def expose_pod_identity(task: Any) -> Any:
    """Give a task its own pod's name, uid and namespace and its Argo Workflow's name as
    ``POD_NAME``, ``POD_UID``, ``POD_NAMESPACE`` and ``WORKFLOW_NAME`` (downward API,
    ``kfp-kubernetes`` ``use_field_path_as_env``). The TrainJob launcher makes the run's
    Workflow (else that pod) the owner of the TrainJob it creates, so the job is
    garbage-collected with the run (:mod:`conductor_core.cluster.launcher`). Call it on every
    task that may launch a TrainJob (the training tasks)."""
    for env_name, field_path in POD_IDENTITY_FIELDS.items():
        kubernetes.use_field_path_as_env(task, env_name=env_name, field_path=field_path)
    return task


SANDBOX_SPEC_ANNOTATION = "conductor.dev/sandbox-pod-spec"
"""Pod annotation holding, as JSON, the pod fields ``sandbox`` asks for (runtimeClassName,
hostUsers, securityContext, the container's procMount): kfp-kubernetes 2.17 has no API for
them, so an admission policy applies them (docs/sandbox.md)."""


def apply_sandbox(task: Any, pod: Any) -> Any:
    """Make the code sandbox's isolation explicit on a task that may grade generated code
    (training, evaluation shards; harmless on others), from ``pod.sandbox``
    (:class:`~conductor_core.cluster.settings.SandboxSettings`):

    * ``CONDUCTOR_SANDBOX_FALLBACK`` (``refuse`` or ``limits-only``): whether graders may run
      generated code in a weaker mode (``unshare`` without bubblewrap, or resource limits with
      a uid or Landlock domain of its own) when the pod cannot give bubblewrap its namespaces;
    * the pod label ``conductor.dev/sandbox: <isolation>`` and, when the settings ask for pod
      fields, the annotation :data:`SANDBOX_SPEC_ANNOTATION` with them as JSON, for the
      cluster's admission policy that sets them (KFP itself sets seccomp ``RuntimeDefault``)."""
    sandbox = pod.sandbox
    for name, value in sandbox.task_env().items():
        task.set_env_variable(name=name, value=value)
    kubernetes.add_pod_label(task, label_key=SANDBOX_LABEL, label_value=sandbox.isolation)
    spec = sandbox.pod_spec()
    if spec:
        kubernetes.add_pod_annotation(
            task,
            annotation_key=SANDBOX_SPEC_ANNOTATION,
            annotation_value=json.dumps(spec, sort_keys=True, separators=(",", ":")),
        )
    return task
