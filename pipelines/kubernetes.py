"""Kubernetes settings on pipeline tasks: the one place where the cluster settings
(:mod:`conductor_core.cluster.settings`) become kfp-kubernetes calls.

Locally these settings are ignored by KFP's runner (resources only warn); they are kept in the
compiled YAML, where tests assert on them.
"""

from __future__ import annotations

from typing import Any

from kfp import kubernetes

SHM_VOLUME = "dshm"
WORKSPACE_VOLUME = "workspace"


def apply_pod_settings(task: Any, pod: Any) -> Any:
    """Apply a :class:`~conductor_core.cluster.settings.PodSettings` to a pipeline task:
    resources and accelerators, node selector, tolerations, a memory-backed ``/dev/shm``, the
    workspace volume, Secrets as environment variables and plain environment variables."""
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


def side_effects(task: Any) -> Any:
    """A task with side effects (training, launching a job, moving a registry alias) must run
    every time: caching off."""
    task.set_caching_options(enable_caching=False)
    return task
