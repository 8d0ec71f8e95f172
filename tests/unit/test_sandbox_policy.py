"""The admission policy that gives the graders' pods the sandbox's fields: rendered from the
cluster settings (fixed values, never read from the pod), keyed on the label apply_sandbox puts
on the graders' pods, limited to the pipeline's namespace and service account."""

from __future__ import annotations

import pytest
import yaml
from click.testing import CliRunner

from conductor_core.cluster.sandbox_policy import admission_policy
from conductor_core.cluster.settings import SANDBOX_LABEL, load_cluster_settings
from conductor_core.errors import ConfigError

SANDBOX = {
    "isolation": "namespaces",
    "runtime_class_name": "gvisor",
    "seccomp_profile": {"type": "Localhost", "localhost_profile": "profiles/sandbox.json"},
    "proc_mount": "Unmasked",
    "host_users": False,
}


def _settings(**gpu_sandbox):
    overrides = {"namespace": "team-a", "gpu": {"sandbox": gpu_sandbox}}
    return load_cluster_settings(None, overrides=overrides)


def test_the_policy_applies_the_settings_fields_to_the_labelled_pods_of_the_namespace():
    sandbox = _settings(**SANDBOX).gpu.sandbox
    policy = admission_policy(sandbox, "team-a", service_account="pipeline-runner")
    assert (policy["apiVersion"], policy["kind"]) == ("kyverno.io/v1", "ClusterPolicy")
    (rule,) = policy["spec"]["rules"]
    (match,) = rule["match"]["any"]
    assert match["resources"]["namespaces"] == ["team-a"]
    assert match["resources"]["selector"] == {"matchLabels": {SANDBOX_LABEL: "namespaces"}}
    spec = rule["mutate"]["patchStrategicMerge"]["spec"]
    seccomp = {"type": "Localhost", "localhostProfile": "profiles/sandbox.json"}
    container = {"procMount": "Unmasked", "seccompProfile": seccomp}
    assert spec == {
        "runtimeClassName": "gvisor",
        "hostUsers": False,
        "securityContext": {"seccompProfile": seccomp},
        # KFP sets the container's own RuntimeDefault, which would win over the pod's
        "containers": [{"name": "main", "securityContext": container}],
    }
    (condition,) = rule["preconditions"]["all"]
    assert condition["value"] == "pipeline-runner"
    assert "preconditions" not in admission_policy(sandbox, "team-a")["spec"]["rules"][0]


def test_settings_that_ask_for_nothing_have_no_policy():
    with pytest.raises(ConfigError, match="ask for no pod field"):
        admission_policy(_settings().gpu.sandbox, "team-a")
    with pytest.raises(ConfigError, match="give the pipeline's namespace"):
        admission_policy(_settings(**SANDBOX).gpu.sandbox, "")


def test_the_command_prints_the_policy_for_kubectl(tmp_path):
    from conductor_pipeline_runner.cli import command

    settings = tmp_path / "cluster.yaml"
    settings.write_text(yaml.safe_dump({"namespace": "team-a", "gpu": {"sandbox": SANDBOX}}))
    result = CliRunner().invoke(command, ["sandbox-policy", "--settings", str(settings)])
    assert result.exit_code == 0, result.output
    policy = yaml.safe_load(result.output)
    assert policy == admission_policy(
        _settings(**SANDBOX).gpu.sandbox, "team-a", service_account="pipeline-runner"
    )
    empty = CliRunner().invoke(command, ["sandbox-policy", "--namespace", "x", "--pod-kind", "cpu"])
    assert empty.exit_code != 0 and "no policy to apply (pod kind cpu)" in empty.output
