"""The admission policy that gives the graders' pods what the code sandbox needs.

KFP's compiler sets ``seccompProfile: RuntimeDefault`` on every task pod and container, and
kfp-kubernetes can set none of the fields the sandbox's namespaces need (runtime class, seccomp,
AppArmor, ``procMount``, ``hostUsers``): with the default ``isolation: namespaces`` the graders
would refuse generated code deep inside a run. ``conductor_pipelines.kubernetes.apply_sandbox``
labels the graders' pods ``conductor.dev/sandbox: <isolation>``; the cluster applies the fields
with an admission policy keyed on that label, limited to the pipeline's namespace (and service
account), with fixed values rendered here from the cluster settings, never read from the pod.

The policy is a Kyverno ``ClusterPolicy`` (``kyverno.io/v1``): ``conductor pipeline
sandbox-policy`` prints it for ``kubectl apply -f -``. TrainJob pods get the same fields from
the launcher's ``runtimePatches`` instead (``conductor_core/cluster/trainjob.py``).
"""

from __future__ import annotations

from typing import Any

from conductor_core.cluster.settings import SANDBOX_LABEL, SandboxSettings
from conductor_core.errors import ConfigError

KFP_CONTAINER = "main"
"""The name of a KFP task pod's container that runs the component."""


def admission_policy(
    sandbox: SandboxSettings,
    namespace: str,
    *,
    service_account: str | None = None,
    name: str = "conductor-sandbox",
) -> dict[str, Any]:
    """The Kyverno ``ClusterPolicy`` that applies ``sandbox``'s pod fields to the pods labelled
    ``conductor.dev/sandbox: <isolation>`` in ``namespace`` (and, given, run by
    ``service_account``). The container's seccomp profile is set too: KFP sets the container's
    own ``RuntimeDefault``, which would win over the pod's. Raises :class:`ConfigError` when the
    settings ask for no pod field (nothing to apply)."""
    fields = sandbox.pod_spec()
    if not fields:
        raise ConfigError(
            "sandbox: the settings ask for no pod field (sandbox.runtime_class_name, "
            "seccomp_profile, apparmor_profile, proc_mount, host_users): no policy to apply"
        )
    if not namespace:
        raise ConfigError("sandbox policy: give the pipeline's namespace")
    patch = dict(fields)
    container = dict(patch.pop("containers", [{}])[0].get("securityContext", {}))
    if "seccompProfile" in patch.get("securityContext", {}):
        container["seccompProfile"] = patch["securityContext"]["seccompProfile"]
    if container:
        patch["containers"] = [{"name": KFP_CONTAINER, "securityContext": container}]
    rule: dict[str, Any] = {
        "name": "graders-keep-namespaces",
        "match": {
            "any": [
                {
                    "resources": {
                        "kinds": ["Pod"],
                        "namespaces": [namespace],
                        "selector": {"matchLabels": {SANDBOX_LABEL: sandbox.isolation}},
                        "operations": ["CREATE"],
                    }
                }
            ]
        },
        "mutate": {"patchStrategicMerge": {"spec": patch}},
    }
    if service_account:
        rule["preconditions"] = {
            "all": [
                {
                    "key": "{{ request.object.spec.serviceAccountName || 'default' }}",
                    "operator": "Equals",
                    "value": service_account,
                }
            ]
        }
    return {
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": name,
            "annotations": {
                "policies.kyverno.io/description": "The code sandbox's pod fields for the "
                "Conductor pipeline's grader pods (conductor_core/cluster/sandbox_policy.py)."
            },
        },
        "spec": {"rules": [rule]},
    }
