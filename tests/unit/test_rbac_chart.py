"""The conductor-training-rbac Helm chart's values, read without helm: the defaults bind the
account Kubeflow Pipelines runs tasks as, and values.schema.json is strict (the chart rendered
by helm: tests/integration/test_rbac_chart.py)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parents[2] / "charts" / "conductor-training-rbac"


def values() -> dict[str, Any]:
    return yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))


def schema_errors(data: dict[str, Any]) -> list[str]:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    return [err.message for err in validator.iter_errors(data)]


def test_defaults_bind_kfps_account_which_cluster_settings_name() -> None:
    from conductor_core.cluster.settings import ClusterSettings

    data = values()
    assert data["kfp"]["mode"] == "standalone"
    assert data["serviceAccount"] == {"name": "", "create": False, "annotations": {}}
    # standalone KFP runs tasks as pipeline-runner (the chart's helper picks it for an empty
    # name), and that is the cluster settings' default account
    helpers = (CHART / "templates" / "_helpers.tpl").read_text(encoding="utf-8")
    assert "pipeline-runner" in helpers and "default-editor" in helpers
    assert ClusterSettings.model_fields["service_account"].default == "pipeline-runner"


def test_values_yaml_satisfies_the_schema() -> None:
    assert schema_errors(values()) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda v: v.update(nmae=1), "Additional properties"),
        (lambda v: v["kfp"].update(mode="single-user"), "is not one of"),
        (lambda v: v["kfp"].update(namespace="x"), "Additional properties"),
        (lambda v: v["serviceAccount"].update(nmae="x"), "Additional properties"),
        (lambda v: v["serviceAccount"].update(name="Not_Valid"), "does not match"),
        (lambda v: v["serviceAccount"].update(create=True), "non-empty"),
        (
            lambda v: v.update(extraSubjects=[{"kind": "ServiceAccount", "name": "a"}]),
            "'namespace' is a required property",
        ),
        (
            lambda v: v.update(extraSubjects=[{"kind": "User", "name": "a", "nmae": "b"}]),
            "Additional properties",
        ),
        (lambda v: v.update(readTrainingRuntimes="yes"), "is not of type"),
        (lambda v: v.update(readPodLogs="yes"), "is not of type"),
        (lambda v: v.update(trainingNamespace="Not_Valid"), "does not match"),
    ],
)
def test_schema_rejects_typos_and_inconsistent_values(change: Any, expected: str) -> None:
    data = copy.deepcopy(values())
    change(data)
    errors = schema_errors(data)
    assert any(expected in error for error in errors), errors


def test_schema_accepts_the_documented_setups() -> None:
    multi_user = copy.deepcopy(values())
    multi_user["kfp"]["mode"] = "multi-user"
    own = copy.deepcopy(values())
    own["serviceAccount"].update(name="conductor-runner", create=True, annotations={"a/b": "c"})
    own["extraSubjects"] = [
        {"kind": "ServiceAccount", "name": "default-editor", "namespace": "team-a"},
        {"kind": "Group", "name": "ml-team", "apiGroup": "rbac.authorization.k8s.io"},
    ]
    assert schema_errors(multi_user) == []
    assert schema_errors(own) == []
