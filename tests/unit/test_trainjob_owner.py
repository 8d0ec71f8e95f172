"""A TrainJob (and its ConfigMap) is owned by the pod of the task that launched it: the owner
reference on the manifests, read from the downward-API environment, and none on a local run
(the launcher against an API server: tests/integration/test_trainjob_kmock.py)."""

from __future__ import annotations

import pytest

from conductor_core.cluster.settings import load_cluster_settings
from conductor_core.cluster.trainjob import (
    POD_IDENTITY_FIELDS,
    Owner,
    TrainJobRequest,
    build_manifests,
    owner_pod_from_env,
)
from conductor_core.errors import ConfigError

POD = Owner("training-x7k2p-system-container-impl-123", "6f1c2b7e-1d9a-4c55-9a64-0b5f3f0e9d21")


def request() -> TrainJobRequest:
    return TrainJobRequest(run_id="run-1", task_id="task-1", stage="base", stage_config="a: 1\n")


def test_owner_pod_reference_on_trainjob_and_configmap() -> None:
    manifests = build_manifests(request(), load_cluster_settings(None), "team-a", owner=POD)
    expected = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": POD.name,
        "uid": POD.uid,
        "blockOwnerDeletion": False,
    }
    assert manifests.trainjob["metadata"]["ownerReferences"] == [expected]
    assert manifests.configmap["metadata"]["ownerReferences"] == [expected]
    # not a controller reference: the Trainer is the TrainJob's controller
    assert "controller" not in expected


def test_no_owner_without_a_pod() -> None:
    manifests = build_manifests(request(), load_cluster_settings(None), "team-a")
    assert "ownerReferences" not in manifests.trainjob["metadata"]
    assert "ownerReferences" not in manifests.configmap["metadata"]


def test_an_owner_in_another_namespace_is_refused() -> None:
    pod = Owner(POD.name, POD.uid, namespace="kubeflow")
    with pytest.raises(ConfigError, match="same namespace"):
        build_manifests(request(), load_cluster_settings(None), "team-a", owner=pod)
    same = Owner(POD.name, POD.uid, namespace="team-a")
    manifests = build_manifests(request(), load_cluster_settings(None), "team-a", owner=same)
    assert manifests.trainjob["metadata"]["ownerReferences"][0]["uid"] == POD.uid


def test_owner_pod_from_the_downward_api_environment() -> None:
    assert POD_IDENTITY_FIELDS == {
        "POD_NAME": "metadata.name",
        "POD_UID": "metadata.uid",
        "POD_NAMESPACE": "metadata.namespace",
        "WORKFLOW_NAME": "metadata.labels['workflows.argoproj.io/workflow']",
    }
    env = {"POD_NAME": POD.name, "POD_UID": POD.uid, "POD_NAMESPACE": "team-a"}
    assert owner_pod_from_env(env) == Owner(POD.name, POD.uid, "team-a")
    assert owner_pod_from_env({"POD_NAME": POD.name, "POD_UID": POD.uid}) == POD
    # a local run: none, or only part, of the variables
    assert owner_pod_from_env({}) is None
    assert owner_pod_from_env({"POD_NAME": POD.name}) is None
    assert owner_pod_from_env({"POD_NAME": " ", "POD_UID": POD.uid}) is None


def test_the_runs_workflow_as_owner_and_when_it_is_being_stopped() -> None:
    from conductor_core.cluster.trainjob import (
        workflow_name_from_env,
        workflow_owner,
        workflow_shutting_down,
    )

    workflow = {"metadata": {"name": "training-abc", "uid": "u-1", "namespace": "team-a"}}
    owner = workflow_owner(workflow)
    assert owner.reference() == {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "name": "training-abc",
        "uid": "u-1",
        "blockOwnerDeletion": False,
    }
    manifests = build_manifests(request(), load_cluster_settings(None), "team-a", owner=owner)
    assert manifests.trainjob["metadata"]["ownerReferences"] == [owner.reference()]
    assert workflow_name_from_env({"WORKFLOW_NAME": "training-abc"}) == "training-abc"
    assert workflow_name_from_env({"WORKFLOW_NAME": " "}) is None
    assert not workflow_shutting_down({**workflow, "spec": {"activeDeadlineSeconds": 3600}})
    assert workflow_shutting_down({**workflow, "spec": {"activeDeadlineSeconds": 0}})  # KFP
    assert workflow_shutting_down({**workflow, "spec": {"shutdown": "Terminate"}})  # argo
    assert not workflow_shutting_down(workflow)
