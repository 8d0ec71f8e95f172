"""The code sandbox's isolation in the cluster pod settings (``PodSettings.sandbox``) and what
``conductor_pipelines.kubernetes.apply_sandbox`` renders into a compiled pipeline: the grader's
fallback variable, the pod label and the annotation an admission policy applies (kfp-kubernetes
2.17 has no runtimeClassName or seccomp API). The sandbox's refusal itself:
tests/unit/test_sandbox.py.

No ``from __future__ import annotations`` here: kfp reads the component's annotations as types.
"""

import json
from typing import Any

import pytest

from conductor_core.cluster.settings import (
    SANDBOX_FALLBACK_ENV,
    SandboxSettings,
    load_cluster_settings,
)
from conductor_core.errors import ConfigError

GVISOR_UNMASKED = {
    "runtime_class_name": "gvisor",
    "seccomp_profile": {"type": "Localhost", "localhost_profile": "profiles/sandbox.json"},
    "apparmor_profile": {"type": "Unconfined"},
    "proc_mount": "Unmasked",
    "host_users": False,
}


def test_by_default_graders_refuse_limits_only_and_the_pod_is_left_alone() -> None:
    settings = load_cluster_settings()
    for kind in ("gpu", "cpu", "cpu_train", "launcher", "gpu_eval"):
        sandbox = getattr(settings, kind).sandbox
        assert sandbox.isolation == "namespaces"
        assert sandbox.task_env() == {SANDBOX_FALLBACK_ENV: "refuse"}
        assert sandbox.pod_spec() == {}


def test_pod_fields_render_as_kubernetes_writes_them() -> None:
    sandbox = SandboxSettings.model_validate(GVISOR_UNMASKED)
    assert sandbox.pod_spec() == {
        "runtimeClassName": "gvisor",
        "hostUsers": False,
        "securityContext": {
            "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/sandbox.json"},
            "appArmorProfile": {"type": "Unconfined"},
        },
        "containers": [{"securityContext": {"procMount": "Unmasked"}}],
    }
    assert sandbox.container_security_context() == {"procMount": "Unmasked"}


def test_limits_only_is_said_in_words_and_derived_pods_follow_their_base() -> None:
    settings = load_cluster_settings(
        overrides={"cpu": {"sandbox": {"isolation": "limits-only"}}, "gpu_eval": {}}
    )
    assert settings.cpu.sandbox.task_env() == {SANDBOX_FALLBACK_ENV: "limits-only"}
    assert settings.cpu_train.sandbox.isolation == "limits-only"  # given as cpu's differences
    assert settings.gpu.sandbox.isolation == "namespaces"


@pytest.mark.parametrize(
    ("sandbox", "message"),
    [
        ({"isolation": "weak"}, "cpu.sandbox.isolation"),
        ({"seccomp_profile": {"type": "Localhost"}}, "localhost_profile is required"),
        ({"seccomp_profile": {"type": "Unconfined", "localhost_profile": "x"}}, "only then"),
        ({"proc_mount": "Unmasked"}, "host_users: false"),
        ({"runtime_class_name": "gVisor!"}, "RuntimeClass"),
    ],
)
def test_bad_sandbox_settings_name_the_field(sandbox: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_cluster_settings(overrides={"cpu": {"sandbox": sandbox}})


def test_the_fallback_variable_is_set_through_sandbox_isolation_only() -> None:
    with pytest.raises(ConfigError, match=r"set sandbox\.isolation instead"):
        load_cluster_settings(overrides={"gpu": {"env": {SANDBOX_FALLBACK_ENV: "limits-only"}}})


def _executor(tmp_path: Any, pod: Any) -> dict:
    import yaml
    from kfp import compiler, dsl

    from conductor_pipelines.kubernetes import apply_sandbox

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def grade() -> None:
        pass

    @dsl.pipeline(name="sandbox")
    def pipe() -> None:
        apply_sandbox(grade(), pod)

    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline_func=pipe, package_path=str(path))
    docs = list(yaml.safe_load_all(path.read_text()))
    spec = docs[0]["deploymentSpec"]["executors"]["exec-grade"]["container"]
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-grade"]
    return {"env": spec.get("env", []), **platform}


def test_apply_sandbox_renders_the_fallback_the_label_and_the_wanted_pod_fields(
    tmp_path: Any,
) -> None:
    from conductor_pipelines.kubernetes import SANDBOX_SPEC_ANNOTATION

    settings = load_cluster_settings(
        overrides={
            "gpu": {"sandbox": GVISOR_UNMASKED},
            "cpu": {"sandbox": {"isolation": "limits-only"}},
        }
    )
    rendered = _executor(tmp_path, settings.gpu)
    assert {"name": SANDBOX_FALLBACK_ENV, "value": "refuse"} in rendered["env"]
    metadata = rendered["podMetadata"]
    assert metadata["labels"] == {"conductor.dev/sandbox": "namespaces"}
    wanted = json.loads(metadata["annotations"][SANDBOX_SPEC_ANNOTATION])
    assert wanted == settings.gpu.sandbox.pod_spec()

    rendered = _executor(tmp_path, settings.cpu)
    assert {"name": SANDBOX_FALLBACK_ENV, "value": "limits-only"} in rendered["env"]
    assert rendered["podMetadata"] == {"labels": {"conductor.dev/sandbox": "limits-only"}}
