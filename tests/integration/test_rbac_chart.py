"""The conductor-training-rbac Helm chart: ``helm lint``, ``helm template`` validated strictly
against the Kubernetes schemas, Roles that grant every call the TrainJob launcher makes and no
more, bound to the account Kubeflow Pipelines runs the tasks as (``pipeline-runner`` standalone,
``default-editor`` multi-user, or a named one); pod logs in a Role of their own bound to service
accounts only; cluster-scoped runtimes read through a ClusterRole (its values read without helm:
tests/unit/test_rbac_chart.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import run_helm

CHART = Path(__file__).resolve().parents[2] / "charts" / "conductor-training-rbac"
K8S_VERSION = "1.33.0"

# (apiGroup, resource, verb) of every API call in conductor_core/cluster/launcher.py.
LAUNCHER_CALLS = [
    ("trainer.kubeflow.org", "trainjobs", "create"),
    ("trainer.kubeflow.org", "trainjobs", "get"),
    ("trainer.kubeflow.org", "trainjobs", "list"),
    ("trainer.kubeflow.org", "trainjobs", "watch"),
    ("trainer.kubeflow.org", "trainjobs", "patch"),  # a retried task adds its pod as an owner
    ("trainer.kubeflow.org", "trainjobs", "delete"),
    ("argoproj.io", "workflows", "get"),  # the run's Workflow: the job's owner, terminated?
    ("", "configmaps", "create"),
    ("", "configmaps", "patch"),
    ("", "configmaps", "delete"),
    ("", "pods", "list"),  # the rank-0 pod, by label
    ("", "pods/log", "get"),
]
# (apiGroup, resource, verb) of the parameter check's runtime lookup (cluster/runtime.py).
RUNTIME_CALLS = [
    ("trainer.kubeflow.org", "clustertrainingruntimes", "get"),
    ("trainer.kubeflow.org", "trainingruntimes", "get"),
]
RUNNER = {"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"}


def template(helm: Path, home: Path, *args: str, namespace: str = "team-a") -> list[dict[str, Any]]:
    done = run_helm(helm, ["template", "rel", str(CHART), "--namespace", namespace, *args], home)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_name(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == kind}


def grants(role: dict[str, Any], group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
        for rule in role["rules"]
    )


def roles_of(docs: list[dict[str, Any]], subject: dict[str, str]) -> list[dict[str, Any]]:
    """The Roles and ClusterRoles bound to ``subject`` by the rendered bindings."""
    roles = {(d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"].endswith("Role")}
    return [
        roles[(b["roleRef"]["kind"], b["roleRef"]["name"])]
        for b in docs
        if b["kind"].endswith("RoleBinding") and subject in b["subjects"]
    ]


def test_helm_lint_strict_passes(helm, tmp_path) -> None:
    done = run_helm(helm, ["lint", "--strict", str(CHART)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_rendered_manifests_validate_strictly(helm, tmp_path) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    variants = [
        (),
        ("--set", "kfp.mode=multi-user", "--set", "readPodLogs=false"),
        ("--set", "readTrainingRuntimes=false", "--set", "trainingNamespace=training"),
        (
            "--set",
            "serviceAccount.create=true",
            "--set",
            "serviceAccount.name=conductor-runner",
            "--set",
            "extraSubjects[0].kind=ServiceAccount",
            "--set",
            "extraSubjects[0].name=default-editor",
            "--set",
            "extraSubjects[0].namespace=team-a",
            "--set",
            "serviceAccount.annotations.iam\\.gke\\.io/gcp-service-account=a@b.iam",
        ),
    ]
    for args in variants:
        docs = template(helm, tmp_path, *args)
        assert docs
        for doc in docs:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    broken = dict(docs[0])
    broken["metadata"] = {**broken["metadata"], "nmae": "typo"}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_role_grants_what_the_launcher_calls_and_binds_kfps_runner(helm, tmp_path) -> None:
    from conductor_core.cluster.settings import ClusterSettings

    docs = template(helm, tmp_path, namespace="kubeflow")
    # KFP's account exists: bound, not created; cluster-scoped only the runtimes' read
    assert sorted(d["kind"] for d in docs) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "Role",
        "RoleBinding",
        "RoleBinding",
    ]
    bound = roles_of(docs, RUNNER)
    assert len(bound) == 3
    for group, resource, verb in LAUNCHER_CALLS + RUNTIME_CALLS:
        assert any(grants(role, group, resource, verb) for role in bound), (group, resource, verb)
    for role in bound:
        # least privilege: no wildcards, no secrets, namespaced Roles in the tasks' namespace
        assert all("*" not in rule["verbs"] + rule["resources"] for rule in role["rules"])
        assert not any("secrets" in rule["resources"] for rule in role["rules"])
        assert role["metadata"].get("namespace", "kubeflow") == "kubeflow"
    # standalone KFP (the default) runs every task as pipeline-runner in its own namespace
    for binding in by_name(docs, "RoleBinding").values():
        assert binding["subjects"] == [RUNNER]
    assert ClusterSettings.model_fields["service_account"].default == "pipeline-runner"


def test_roles_grant_no_more_than_the_launcher_calls(helm, tmp_path) -> None:
    # Every (group, resource, verb) granted is one the launcher or the parameter check makes: no
    # reading ConfigMaps (KFP keeps its configuration in its namespace's), no get/watch of pods,
    # no listing runtimes.
    docs = template(helm, tmp_path, namespace="kubeflow")
    granted = {
        (group, resource, verb)
        for role in roles_of(docs, RUNNER)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert granted == set(LAUNCHER_CALLS + RUNTIME_CALLS)


def test_pod_logs_are_a_role_of_their_own_bound_to_service_accounts_only(helm, tmp_path) -> None:
    other = {"kind": "ServiceAccount", "name": "other-runner", "namespace": "kubeflow"}
    docs = template(
        helm,
        tmp_path,
        *("--set", "extraSubjects[0].kind=User", "--set", "extraSubjects[0].name=alice"),
        *("--set", "extraSubjects[1].kind=ServiceAccount"),
        *("--set", "extraSubjects[1].name=other-runner"),
        *("--set", "extraSubjects[1].namespace=kubeflow"),
        namespace="kubeflow",
    )
    alice = {"kind": "User", "name": "alice"}
    assert not any(grants(r, "", "pods/log", "get") for r in roles_of(docs, alice))
    assert any(
        grants(r, "trainer.kubeflow.org", "trainjobs", "create") for r in roles_of(docs, alice)
    )
    for account in (RUNNER, other):
        logs = [r for r in roles_of(docs, account) if grants(r, "", "pods/log", "get")]
        assert len(logs) == 1
        assert [rule["resources"] for rule in logs[0]["rules"]] == [["pods"], ["pods/log"]]

    without = template(helm, tmp_path, "--set", "readPodLogs=false", namespace="kubeflow")
    assert not any(grants(r, "", "pods/log", "get") for r in roles_of(without, RUNNER))
    assert not any(grants(r, "", "pods", "list") for r in roles_of(without, RUNNER))


def test_cluster_runtimes_are_read_through_a_cluster_role(helm, tmp_path) -> None:
    docs = template(helm, tmp_path, namespace="kubeflow")
    bound = roles_of(docs, RUNNER)
    (cluster_role,) = [r for r in bound if r["kind"] == "ClusterRole"]
    assert cluster_role["rules"] == [
        {
            "apiGroups": ["trainer.kubeflow.org"],
            "resources": ["clustertrainingruntimes"],
            "verbs": ["get"],
        }
    ]
    for role in (r for r in bound if r["kind"] == "Role"):  # a Role cannot grant it
        assert not grants(role, "trainer.kubeflow.org", "clustertrainingruntimes", "get")
    assert any(grants(r, "trainer.kubeflow.org", "trainingruntimes", "get") for r in bound)
    # one per release and namespace: cluster-scoped names must not collide
    assert cluster_role["metadata"]["name"] == "kubeflow-rel-trainjob-launcher-runtimes"

    without = template(helm, tmp_path, "--set", "readTrainingRuntimes=false", namespace="kubeflow")
    assert not [d for d in without if d["kind"].startswith("Cluster")]
    assert not any("runtimes" in str(r["rules"]) for r in roles_of(without, RUNNER))


def test_training_namespace_holds_the_roles_for_the_tasks_account(helm, tmp_path) -> None:
    docs = template(helm, tmp_path, "--set", "trainingNamespace=training", namespace="kubeflow")
    namespaced = [d for d in docs if d["kind"] in ("Role", "RoleBinding")]
    assert len(namespaced) == 4
    assert {d["metadata"]["namespace"] for d in namespaced} == {"training"}
    assert len(roles_of(docs, RUNNER)) == 3  # the account stays in KFP's namespace


def test_multi_user_binds_default_editor_in_the_profile_namespace(helm, tmp_path) -> None:
    docs = template(helm, tmp_path, "--set", "kfp.mode=multi-user", namespace="kubeflow-user-a")
    editor = {"kind": "ServiceAccount", "name": "default-editor", "namespace": "kubeflow-user-a"}
    assert all(b["subjects"] == [editor] for b in by_name(docs, "RoleBinding").values())
    namespaced = [r for r in roles_of(docs, editor) if r["kind"] == "Role"]
    assert [r["metadata"]["namespace"] for r in namespaced] == ["kubeflow-user-a"] * 2


def test_a_named_account_is_bound_and_created_only_when_asked(helm, tmp_path) -> None:
    runner = {"kind": "ServiceAccount", "name": "conductor-runner", "namespace": "team-a"}
    named = template(helm, tmp_path, "--set", "serviceAccount.name=conductor-runner")
    assert not by_name(named, "ServiceAccount")
    assert all(b["subjects"] == [runner] for b in by_name(named, "RoleBinding").values())

    created = template(
        helm,
        tmp_path,
        "--set",
        "serviceAccount.name=conductor-runner",
        "--set",
        "serviceAccount.create=true",
        "--set",
        "kfp.mode=multi-user",  # a name wins over the mode's default
    )
    (account,) = by_name(created, "ServiceAccount").values()
    assert account["metadata"] == {
        **account["metadata"],
        "name": "conductor-runner",
        "namespace": "team-a",
    }
    assert all(b["subjects"] == [runner] for b in by_name(created, "RoleBinding").values())


def test_creating_an_account_needs_its_name(helm, tmp_path) -> None:
    done = run_helm(
        helm, ["template", "rel", str(CHART), "--set", "serviceAccount.create=true"], tmp_path
    )
    assert done.returncode != 0
    assert "serviceAccount.name" in done.stderr


def test_values_schema_rejects_typos(helm, tmp_path) -> None:
    for args, word in (
        (["--set", "serviceAccount.nmae=x"], "nmae"),
        (["--set", "kfp.mode=single-user"], "kfp.mode"),
    ):
        done = run_helm(helm, ["template", "rel", str(CHART), *args], tmp_path)
        assert done.returncode != 0
        assert word in done.stderr
