"""Whether the Kubeflow Trainer runtime a TrainJob references exists and can be read.

A default Trainer install has no ``torch-distributed`` ClusterTrainingRuntime (the Trainer's Helm
chart ships its runtimes disabled: ``--set runtimes.torchDistributed.enabled=true``), and the
Trainer's webhook rejects a TrainJob whose runtime does not exist: a ``launcher=trainjob`` run
would fail only when its first stage launches. The parameter check asks first, before any GPU
node is scheduled. Reading a cluster-scoped ClusterTrainingRuntime needs a ClusterRole
(``charts/conductor-training-rbac`` with ``readTrainingRuntimes=true``; a namespaced Role has no
effect). Without that right the check cannot tell, and says so without stopping the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conductor_core.cluster.settings import ClusterSettings
from conductor_core.cluster.trainjob import TRAINER_GROUP, TRAINER_VERSION

PLURALS = {
    "ClusterTrainingRuntime": "clustertrainingruntimes",
    "TrainingRuntime": "trainingruntimes",
}
"""The resource name of each runtime kind a TrainJob may reference."""

INSTALL_HINT = (
    "install the Trainer's runtimes (helm install kubeflow-trainer "
    "oci://ghcr.io/kubeflow/charts/kubeflow-trainer --set runtimes.torchDistributed.enabled=true) "
    "or set trainjob.runtime_name in the cluster settings to one that `kubectl get "
    "clustertrainingruntimes` lists"
)


@dataclass(frozen=True)
class RuntimeCheck:
    """What the parameter check learnt of the TrainJob's runtime."""

    problem: str | None = None
    """Why the run cannot launch its TrainJobs (it stops the run), or None."""
    warning: str | None = None
    """Why the runtime could not be checked (the run goes on), or None."""


def check_runtime(reference: str, api_client: Any, namespace: str) -> RuntimeCheck:
    """Look up the TrainJob runtime ``reference`` (``Kind/name``, as :func:`runtime_reference`
    writes it; a TrainingRuntime in ``namespace``): a problem when it does not exist or the
    lookup fails, a warning when the caller may not read it, neither when it is there."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException
    from urllib3.exceptions import HTTPError

    kind, _, name = reference.partition("/")
    if kind not in PLURALS or not name:
        return RuntimeCheck(
            f"trainjob: runtime {reference!r} is not Kind/name with Kind one of "
            f"{', '.join(PLURALS)}"
        )
    where = "" if kind == "ClusterTrainingRuntime" else f" in namespace {namespace!r}"
    api = client.CustomObjectsApi(api_client)
    try:
        if kind == "ClusterTrainingRuntime":
            api.get_cluster_custom_object(TRAINER_GROUP, TRAINER_VERSION, PLURALS[kind], name)
        else:
            api.get_namespaced_custom_object(
                TRAINER_GROUP, TRAINER_VERSION, namespace, PLURALS[kind], name
            )
    except ApiException as exc:
        if exc.status == 404:
            return RuntimeCheck(
                f"trainjob: the {kind} {name!r}{where} does not exist; {INSTALL_HINT}"
            )
        if exc.status in (401, 403):
            return RuntimeCheck(
                warning=f"trainjob: the {kind} {name!r}{where} could not be checked: the "
                f"pipeline's service account may not read it (HTTP {exc.status}; install "
                "charts/conductor-training-rbac with readTrainingRuntimes=true)"
            )
        return RuntimeCheck(
            f"trainjob: reading the {kind} {name!r}{where} failed (HTTP {exc.status})"
        )
    except (HTTPError, OSError) as exc:  # no answer at all: refused, reset, timed out
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        return RuntimeCheck(
            f"trainjob: the Kubernetes API could not be reached to read the {kind} {name!r}"
            f"{where} ({reason})"
        )
    return RuntimeCheck()


def runtime_reference(settings: ClusterSettings) -> str:
    """The settings' TrainJob runtime as ``Kind/name`` (what :func:`check_runtime` takes)."""
    return f"{settings.trainjob.runtime_kind}/{settings.trainjob.runtime_name}"
