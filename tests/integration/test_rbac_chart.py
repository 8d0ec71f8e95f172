"""The conductor-training-rbac Helm chart: ``helm lint``, ``helm template`` validated strictly
against the Kubernetes schemas, a Role that grants every call the TrainJob launcher makes, bound
to the account Kubeflow Pipelines runs the tasks as (``pipeline-runner`` standalone,
``default-editor`` multi-user, or a named one) (its values read without helm:
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
    ("", "configmaps", "create"),
    ("", "configmaps", "patch"),
    ("", "configmaps", "delete"),
    ("", "pods", "list"),
    ("", "pods/log", "get"),
]


def template(helm: Path, home: Path, *args: str, namespace: str = "team-a") -> list[dict[str, Any]]:
    done = run_helm(helm, ["template", "rel", str(CHART), "--namespace", namespace, *args], home)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    kinds = {doc["kind"]: doc for doc in docs}
    assert len(kinds) == len(docs)
    return kinds


def grants(role: dict[str, Any], group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and (verb in rule.get("verbs", []) or "*" in rule.get("verbs", []))
        for rule in role["rules"]
    )


def test_helm_lint_strict_passes(helm, tmp_path) -> None:
    done = run_helm(helm, ["lint", "--strict", str(CHART)], tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


def test_rendered_manifests_validate_strictly(helm, tmp_path) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    variants = [
        (),
        ("--set", "kfp.mode=multi-user", "--set", "readTrainingRuntimes=false"),
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

    kinds = by_kind(template(helm, tmp_path, namespace="kubeflow"))
    assert set(kinds) == {"Role", "RoleBinding"}  # KFP's account exists: bound, not created
    role, binding = kinds["Role"], kinds["RoleBinding"]
    for group, resource, verb in LAUNCHER_CALLS:
        assert grants(role, group, resource, verb), (group, resource, verb)
    # least privilege: nothing cluster-wide, no wildcards, no secrets
    assert all("*" not in rule["verbs"] + rule["resources"] for rule in role["rules"])
    assert not any("secrets" in rule["resources"] for rule in role["rules"])
    assert role["metadata"]["namespace"] == "kubeflow"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    # standalone KFP (the default) runs every task as pipeline-runner in its own namespace
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "pipeline-runner", "namespace": "kubeflow"}
    ]
    assert ClusterSettings.model_fields["service_account"].default == "pipeline-runner"


def test_multi_user_binds_default_editor_in_the_profile_namespace(helm, tmp_path) -> None:
    kinds = by_kind(
        template(helm, tmp_path, "--set", "kfp.mode=multi-user", namespace="kubeflow-user-a")
    )
    assert set(kinds) == {"Role", "RoleBinding"}
    assert kinds["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "default-editor", "namespace": "kubeflow-user-a"}
    ]
    assert kinds["Role"]["metadata"]["namespace"] == "kubeflow-user-a"


def test_a_named_account_is_bound_and_created_only_when_asked(helm, tmp_path) -> None:
    named = by_kind(template(helm, tmp_path, "--set", "serviceAccount.name=conductor-runner"))
    assert "ServiceAccount" not in named
    assert named["RoleBinding"]["subjects"][0]["name"] == "conductor-runner"

    created = by_kind(
        template(
            helm,
            tmp_path,
            "--set",
            "serviceAccount.name=conductor-runner",
            "--set",
            "serviceAccount.create=true",
            "--set",
            "kfp.mode=multi-user",  # a name wins over the mode's default
        )
    )
    account = created["ServiceAccount"]
    assert account["metadata"] == {
        **account["metadata"],
        "name": "conductor-runner",
        "namespace": "team-a",
    }
    assert created["RoleBinding"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "conductor-runner", "namespace": "team-a"}
    ]


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
