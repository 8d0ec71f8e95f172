"""Cluster settings: the bundled default, user files merged over it, and the checks that name the
field of a bad value."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor_core.cluster.settings import (
    ENV_VAR,
    ClusterSettings,
    PodSettings,
    SecretEnv,
    Toleration,
    WorkspaceSettings,
    load_cluster_settings,
)
from conductor_core.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "cluster.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_bundled_default_loads_with_gpu_training_and_secret_references(monkeypatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    settings = load_cluster_settings()
    assert settings.gpu.accelerator_count >= 1
    assert settings.cpu.accelerator_count == 0
    assert settings.trainjob.runtime_name == "torch-distributed"
    assert settings.trainjob.runtime_kind == "ClusterTrainingRuntime"
    secrets = {item.env: (item.secret_name, item.secret_key) for item in settings.gpu.secret_env}
    assert secrets["OPENAI_API_KEY"] == ("conductor-api-keys", "OPENAI_API_KEY")
    assert secrets["ANTHROPIC_API_KEY"][0] == "conductor-api-keys"
    assert secrets["GEMINI_API_KEY"][0] == "conductor-api-keys"
    assert secrets["AWS_ACCESS_KEY_ID"][0] == "conductor-s3"
    assert secrets["AWS_SECRET_ACCESS_KEY"][0] == "conductor-s3"
    # the CPU tasks get the same credentials (YAML anchors in the default)
    assert [s.env for s in settings.cpu.secret_env] == [s.env for s in settings.gpu.secret_env]
    assert "MLFLOW_TRACKING_URI" in settings.gpu.env


def test_user_file_is_deep_merged_over_the_default(tmp_path) -> None:
    path = write(
        tmp_path,
        "gpu:\n  accelerator_type: nvidia-h100-80gb\n  accelerator_count: 4\n"
        "trainjob:\n  num_nodes: 4\nnamespace: team-a\n",
    )
    settings = load_cluster_settings(path)
    assert settings.gpu.accelerator_type == "nvidia-h100-80gb"
    assert settings.gpu.accelerator_count == 4
    assert settings.trainjob.num_nodes == 4
    assert settings.namespace == "team-a"
    # untouched fields keep the default
    default = load_cluster_settings(None)
    assert settings.gpu.shm_size == default.gpu.shm_size
    assert settings.gpu.tolerations == default.gpu.tolerations
    assert settings.trainjob.runtime_name == default.trainjob.runtime_name


def test_env_var_names_the_user_file_and_overrides_win(tmp_path, monkeypatch) -> None:
    path = write(tmp_path, "trainjob:\n  num_nodes: 3\n")
    monkeypatch.setenv(ENV_VAR, str(path))
    assert load_cluster_settings().trainjob.num_nodes == 3
    settings = load_cluster_settings(overrides={"trainjob": {"num_nodes": 5}})
    assert settings.trainjob.num_nodes == 5


def test_missing_file_and_non_mapping_give_one_clear_error(tmp_path) -> None:
    with pytest.raises(ConfigError, match="cluster settings file not found"):
        load_cluster_settings(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="must be a YAML mapping"):
        load_cluster_settings(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_cluster_settings(write(tmp_path, "gpu: [unclosed\n"))


@pytest.mark.parametrize(
    ("text", "field", "hint"),
    [
        ("gpu:\n  shm_size: lots\n", "gpu.shm_size", "Kubernetes quantity"),
        ("gpu:\n  memory_request: 600Gi\n", "gpu", "memory_request (600Gi) is above"),
        ("gpu:\n  gpus: 8\n", "gpu.gpus", "unknown field"),
        ("trainjob:\n  num_nodes: 0\n", "trainjob.num_nodes", "greater than or equal to 1"),
        ("trainjob:\n  runtime_kind: Job\n", "trainjob.runtime_kind", "ClusterTrainingRuntime"),
        ("cpu:\n  accelerator_count: 1\n", "(root)", "cpu.accelerator_count must be 0"),
        ("gpu:\n  env:\n    HF_TOKEN: abc\n", "gpu.env", "put it in secret_env"),
        ("namespace: Team_A\n", "namespace", "not a valid namespace"),
        (
            "gpu:\n  tolerations:\n    - {key: a, operator: Exists, value: b}\n",
            "gpu.tolerations.0",
            "value must be empty",
        ),
        (
            "gpu:\n  secret_env:\n    - {env: X, secret_name: Bad_Name, secret_key: k}\n",
            "gpu.secret_env.0.secret_name",
            "not a valid Secret name",
        ),
    ],
)
def test_invalid_values_name_the_field(tmp_path, text: str, field: str, hint: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_cluster_settings(path)
    message = str(info.value)
    assert message.startswith(str(path))
    assert f"{field}:" in message
    assert hint in message


def test_resources_limits_and_node_selector() -> None:
    pod = PodSettings(
        accelerator_count=2,
        accelerator_type="nvidia-l4",
        accelerator_label="cloud.google.com/gke-accelerator",
        cpu_request="8",
        cpu_limit="16",
        memory_request="32Gi",
        memory_limit="64Gi",
        node_selector={"pool": "train"},
    )
    assert pod.resource_requests() == {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "2"}
    assert pod.resource_limits() == {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "2"}
    assert pod.effective_node_selector() == {
        "pool": "train",
        "cloud.google.com/gke-accelerator": "nvidia-l4",
    }
    cpu_only = PodSettings(cpu_request="500m")
    assert cpu_only.resource_limits() == {}
    assert cpu_only.resources() == {"requests": {"cpu": "500m"}}
    assert cpu_only.effective_node_selector() == {}


def test_quantities_compare_across_units() -> None:
    assert PodSettings(cpu_request="500m", cpu_limit="1").cpu_request == "500m"
    assert PodSettings(memory_request="1Gi", memory_limit="2G").memory_limit == "2G"
    with pytest.raises(ValueError, match="cpu_request"):
        PodSettings(cpu_request="2", cpu_limit="1500m")
    with pytest.raises(ValueError, match="accelerator_count is 0"):
        PodSettings(accelerator_type="nvidia-l4")


def test_env_vars_plain_sorted_then_secret_refs_without_values() -> None:
    pod = PodSettings(
        env={"Z_VAR": "1", "A_VAR": "2"},
        secret_env=[SecretEnv(env="OPENAI_API_KEY", secret_name="keys", secret_key="openai")],
    )
    env = pod.env_vars({"MLFLOW_RUN_ID": "abc", "A_VAR": "3"})
    assert env[:3] == [
        {"name": "A_VAR", "value": "3"},
        {"name": "MLFLOW_RUN_ID", "value": "abc"},
        {"name": "Z_VAR", "value": "1"},
    ]
    assert env[3] == {
        "name": "OPENAI_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "keys", "key": "openai", "optional": True}},
    }
    with pytest.raises(ConfigError, match="Secret-backed"):
        pod.env_vars({"OPENAI_API_KEY": "sk-leak"})
    with pytest.raises(ValueError, match="defined more than once"):
        PodSettings(
            env={"X": "1"}, secret_env=[SecretEnv(env="X", secret_name="s", secret_key="k")]
        )


def test_toleration_and_workspace_as_kubernetes_objects() -> None:
    assert Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule").as_k8s() == {
        "key": "nvidia.com/gpu",
        "operator": "Exists",
        "effect": "NoSchedule",
    }
    assert Toleration(operator="Exists").as_k8s() == {"operator": "Exists"}
    with pytest.raises(ValueError, match="key is required"):
        Toleration(operator="Equal", value="x")
    with pytest.raises(ValueError, match="toleration_seconds"):
        Toleration(key="a", operator="Exists", toleration_seconds=5)
    assert WorkspaceSettings(claim_name="ckpt").as_volume() == {
        "name": "workspace",
        "persistentVolumeClaim": {"claimName": "ckpt"},
    }
    assert WorkspaceSettings(size_limit="10Gi").as_volume("w") == {
        "name": "w",
        "emptyDir": {"sizeLimit": "10Gi"},
    }
    with pytest.raises(ValueError, match="other than / and /dev/shm"):
        WorkspaceSettings(mount_path="/dev/shm")


def test_procs_per_node_defaults_to_one_per_gpu() -> None:
    settings = ClusterSettings(gpu=PodSettings(accelerator_count=4))
    assert settings.procs_per_node() == 4
    settings = ClusterSettings(
        gpu=PodSettings(accelerator_count=4), trainjob={"num_proc_per_node": 1}
    )
    assert settings.procs_per_node() == 1
    assert ClusterSettings(gpu=PodSettings(accelerator_count=0)).procs_per_node() is None


def test_every_config_field_has_a_description() -> None:
    for model in (ClusterSettings, PodSettings, SecretEnv, Toleration, WorkspaceSettings):
        for name, info in model.model_fields.items():
            assert info.description, f"{model.__name__}.{name} has no description"
    from conductor_core.cluster.settings import TrainJobSettings

    for name, info in TrainJobSettings.model_fields.items():
        assert info.description, f"TrainJobSettings.{name} has no description"
