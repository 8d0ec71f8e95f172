"""The conductor-training-rbac Helm chart: ``helm lint``, ``helm template`` validated strictly
against the Kubernetes schemas, and a Role that grants every call the TrainJob launcher makes (its
values read without helm: tests/unit/test_rbac_chart.py)."""

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
    ("trainer.kubeflow.org", "trainjobs", "delete"),
    ("", "configmaps", "create"),
    ("", "configmaps", "patch"),
    ("", "configmaps", "delete"),
    ("", "pods", "list"),
    ("", "pods/log", "get"),
]


def template(helm: Path, home: Path, *args: str) -> list[dict[str, Any]]:
    done = run_helm(helm, ["template", "rel", str(CHART), "--namespace", "team-a", *args], home)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


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
        ("--set", "serviceAccount.create=false", "--set", "readTrainingRuntimes=false"),
        (
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


def test_role_grants_what_the_launcher_calls_and_binds_the_service_account(helm, tmp_path) -> None:
    docs = template(helm, tmp_path)
    kinds = {doc["kind"]: doc for doc in docs}
    assert set(kinds) == {"ServiceAccount", "Role", "RoleBinding"}
    role, binding, account = kinds["Role"], kinds["RoleBinding"], kinds["ServiceAccount"]
    for group, resource, verb in LAUNCHER_CALLS:
        assert grants(role, group, resource, verb), (group, resource, verb)
    # least privilege: nothing cluster-wide, no wildcards, no secrets
    assert all("*" not in rule["verbs"] + rule["resources"] for rule in role["rules"])
    assert not any("secrets" in rule["resources"] for rule in role["rules"])
    assert role["metadata"]["namespace"] == "team-a"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "team-a"}
    ]
    assert account["metadata"]["name"] == "conductor-pipeline"  # ClusterSettings default


def test_existing_service_account_is_bound_not_created(helm, tmp_path) -> None:
    docs = template(
        helm,
        tmp_path,
        "--set",
        "serviceAccount.create=false",
        "--set",
        "serviceAccount.name=default-editor",
    )
    kinds = {doc["kind"]: doc for doc in docs}
    assert "ServiceAccount" not in kinds
    assert kinds["RoleBinding"]["subjects"][0]["name"] == "default-editor"


def test_values_schema_rejects_typos(helm, tmp_path) -> None:
    done = run_helm(
        helm, ["template", "rel", str(CHART), "--set", "serviceAccount.nmae=x"], tmp_path
    )
    assert done.returncode != 0
    assert "nmae" in done.stderr
