"""Where the training pipeline's tasks run (issue 24, §3.2, §3.3, §3.7): the pod kinds of the
cluster settings, the pinned TrainJob image, the compile-time settings handed to the TrainJob
launcher, the paper-profile-with-simulated-pool refusal in the parameter check, each profile's
placement (CPU or GPU pods, from its training config's device), and model downloads into the
pod's workspace. (The compiled structure: tests/integration/
test_pipeline_placement.py.)"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from conductor_core.cluster import images
from conductor_core.cluster.settings import (
    DERIVED_PODS,
    ClusterSettings,
    TrainJobSettings,
    load_cluster_settings,
)
from conductor_core.errors import ConfigError

# -- pod kinds ------------------------------------------------------------------------------------


def test_cpu_training_and_the_launcher_hold_no_gpu_and_gpu_evaluation_holds_one():
    s = load_cluster_settings()
    for kind in ("cpu_train", "launcher"):
        pod = getattr(s, kind)
        assert pod.accelerator_count == 0 and not pod.tolerations, kind
        assert "nvidia.com/gpu" not in pod.resource_limits(), kind
    assert s.gpu.accelerator_count >= 1
    assert s.gpu_eval.accelerator_count == 1
    assert s.gpu_eval.tolerations == s.gpu.tolerations  # it schedules on the GPU nodes
    assert s.gpu_eval.workspace is not None  # the 7B weights are downloaded there
    # the launcher is small: it only creates and watches the TrainJob
    assert s.launcher.resource_requests() == {"cpu": "250m", "memory": "512Mi"}
    assert s.cpu_train.workspace is not None and s.cpu_train.shm_size is None


def test_a_derived_pod_follows_its_base_and_keeps_its_own_values(tmp_path):
    user = tmp_path / "cluster.yaml"
    user.write_text(
        "cpu:\n  env: {MLFLOW_TRACKING_URI: http://mlflow.team:5000}\n"
        "gpu:\n  accelerator_type: nvidia-h100-80gb\n  node_selector: {pool: gpu-a}\n"
        "gpu_eval:\n  node_selector: {pool: gpu-eval}\n"
    )
    s = load_cluster_settings(user)
    assert DERIVED_PODS == {"cpu_train": "cpu", "launcher": "cpu", "gpu_eval": "gpu"}
    for kind in ("cpu_train", "launcher"):
        assert getattr(s, kind).env["MLFLOW_TRACKING_URI"] == "http://mlflow.team:5000"
        assert getattr(s, kind).secret_env == s.cpu.secret_env
    assert s.gpu_eval.accelerator_type == "nvidia-h100-80gb"
    assert s.gpu_eval.node_selector == {"pool": "gpu-eval"}
    assert s.gpu_eval.accelerator_count == 1  # the bundled difference, not gpu's 8
    # the settings travel to the launcher task as JSON and come back the same
    assert ClusterSettings.model_validate(json.loads(s.model_dump_json())) == s


def test_a_cpu_training_pod_may_not_ask_for_a_gpu(tmp_path):
    user = tmp_path / "cluster.yaml"
    user.write_text("cpu_train:\n  accelerator_count: 1\n")
    with pytest.raises(ConfigError, match=r"cpu_train\.accelerator_count must be 0"):
        load_cluster_settings(user)


# -- the TrainJob's image -------------------------------------------------------------------------


def test_the_trainjob_image_is_the_releases_pinned_train_image():
    assert load_cluster_settings().trainjob.image == images.image("train")
    assert TrainJobSettings().image == images.image("train")
    assert images.image("train").endswith(":" + images.default_tag())
    assert not images.image("train").endswith(":latest")


@pytest.mark.parametrize(
    "ref", ["ghcr.io/x/conductor-train:latest", "ghcr.io/x/conductor-train", "localhost:5000/t"]
)
def test_an_unpinned_trainjob_image_is_refused(ref):
    with pytest.raises(ValueError, match="not pinned"):
        TrainJobSettings(image=ref)


def test_a_pinned_trainjob_image_is_kept():
    for ref in ("registry:5000/conductor-train:1.2.3", "ghcr.io/x/t@sha256:" + "a" * 64):
        assert TrainJobSettings(image=ref).image == ref


# -- compile-time settings reach the TrainJob -----------------------------------------------------


@dataclass
class _Outcome:
    name: str = "conductor-base-abc"
    condition: str = "Complete"
    duration_s: float = 12.0


def launched_with(monkeypatch, tmp_path, cluster_settings, **step):
    """Run ``train_step(launcher="trainjob")`` with the Kubernetes and S3 calls replaced;
    returns the (request, settings) it launched with."""
    import conductor_core.cluster.launcher as launcher
    import conductor_core.pipeline_steps.train_steps as steps
    import conductor_core.track.storage as storage

    seen = {}
    monkeypatch.setattr(steps, "parent_run", lambda *a, **k: None)
    monkeypatch.setattr(storage.Storage, "upload_dir", lambda self, src, dst: dst)

    def launch(request, settings, log=print):
        seen.update(request=request, settings=settings)
        return _Outcome()

    monkeypatch.setattr(launcher, "launch_and_wait", launch)
    dataset = tmp_path / "dataset"
    dataset.mkdir(exist_ok=True)
    steps.train_step(
        stage="base",
        profile="tiny",
        dataset_dir=dataset,
        run_id="run-1",
        manifest_path=tmp_path / "model.json",
        launcher="trainjob",
        task_id="task-1",
        root="s3://bucket/prefix",
        cluster_settings=cluster_settings,
        log=lambda _: None,
        **step,
    )
    return seen["request"], seen["settings"]


def test_the_launcher_builds_the_trainjob_from_the_compile_time_settings(monkeypatch, tmp_path):
    from conductor_core.cluster.trainjob import build_manifests

    user = tmp_path / "cluster.yaml"
    user.write_text(
        "gpu:\n  accelerator_type: nvidia-h100-80gb\n"
        "  workspace: {claim_name: team-workspace, mount_path: /workspace}\n"
        "  env: {HF_HOME: /workspace/hf}\n"
        "trainjob: {num_nodes: 3, runtime_name: torch-team}\n"
    )
    compiled = load_cluster_settings(user).model_dump_json()  # what the pipeline passes
    request, settings = launched_with(monkeypatch, tmp_path, compiled, seed=7)
    job = build_manifests(request, settings).trainjob
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 3
    assert job["spec"]["runtimeRef"]["name"] == "torch-team"
    assert trainer["image"] == images.image("train")
    assert {"name": "HF_HOME", "value": "/workspace/hf"} in trainer["env"]
    pod = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"][
        "replicatedJobs"
    ][0]["template"]["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["cloud.google.com/gke-accelerator"] == "nvidia-h100-80gb"
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == ["team-workspace"]
    # the stage writes under the workspace the settings give the nodes, with the run's seed
    staged = yaml.safe_load(request.stage_config)
    assert staged["output_dir"] == "/workspace/base"
    assert (staged["seed"], staged["model"]["tiny"]["seed"]) == (7, 7)


def test_without_compile_time_settings_the_launcher_reads_the_bundled_ones(monkeypatch, tmp_path):
    monkeypatch.delenv("CONDUCTOR_CLUSTER_SETTINGS", raising=False)
    _, settings = launched_with(monkeypatch, tmp_path, None)
    assert settings == load_cluster_settings()
    with pytest.raises(ConfigError, match="cluster_settings: not valid JSON"):
        launched_with(monkeypatch, tmp_path, "{nope")
    with pytest.raises(ConfigError, match="num_nodes"):
        launched_with(monkeypatch, tmp_path, json.dumps({"trainjob": {"num_nodes": 0}}))


# -- the paper profile and a simulated pool: refused by the parameter check ----------------------


def _params(**over):
    args = {
        "profile": "tiny",
        "launcher": "pod",
        "metric": "accuracy",
        "baselines": "single,moa",
        "pool": "bundled",
        "eval_shards": 2,
        "eval_parallelism": 2,
        "steps": {"base": 0, "adaptive": 0, "recursive": 0},
    }
    return {**args, **over}


def test_the_paper_profile_on_the_simulated_pool_stops_at_the_parameter_check():
    from conductor_core.pipeline_steps.params import check_training_params

    with pytest.raises(ConfigError) as err:
        check_training_params(**_params(profile="paper"))
    assert str(err.value) == (
        "pipeline parameters: pool: 'bundled' is a simulated pool, and the paper profile trains "
        "a real model on GPUs (it would learn a toy routing); give a pool YAML of real workers"
    )
    assert check_training_params(**_params())["profile"] == "tiny"


def test_the_paper_profile_on_real_workers_and_the_tiny_profile_pass_the_pool_check():
    from conductor_core.pipeline_steps.params import check_profile_pool
    from conductor_core.train.config import bundled_pool

    assert check_profile_pool("paper", bundled_pool("paper")) == []
    assert check_profile_pool("tiny", "bundled") == []
    assert check_profile_pool("tinny", "bundled") == []  # the profile check names that one


def test_the_small_profile_on_the_simulated_pool_passes_the_parameter_check():
    from conductor_core.pipeline_steps.params import check_profile_pool, check_training_params

    assert check_profile_pool("small", "bundled") == []  # data.allow_simulated_pool: true
    checked = check_training_params(**_params(profile="small"))
    assert (checked["profile"], checked["placement"]) == ("small", "cpu")


@pytest.mark.parametrize("profile", ["tiny", "small"])
def test_a_cpu_profile_with_the_trainjob_launcher_stops_at_the_parameter_check(profile):
    """Not sent to the cluster's GPU nodes as a TrainJob that never touches a GPU."""
    from conductor_core.pipeline_steps.params import check_training_params
    from conductor_core.train.config import bundled_pool

    with pytest.raises(ConfigError) as err:
        check_training_params(**_params(profile=profile, launcher="trainjob"))
    assert str(err.value) == (
        f"pipeline parameters: launcher: trainjob runs on the cluster's GPU nodes, and profile "
        f"'{profile}' trains on CPU; use launcher=pod"
    )
    paper = _params(profile="paper", launcher="trainjob", pool=bundled_pool("paper"))
    assert check_training_params(**paper)["placement"] == "gpu"


# -- placement: from the profile's device, not its name -----------------------------------------


@pytest.mark.parametrize(
    ("profile", "placement"), [("tiny", "cpu"), ("small", "cpu"), ("paper", "gpu")]
)
def test_a_profile_is_placed_by_its_training_configs_device(profile, placement):
    from conductor_core.pipeline_steps.params import check_training_params, profile_placement
    from conductor_core.train.config import bundled_pool

    assert profile_placement(profile) == placement
    pool = {"pool": bundled_pool("paper")} if profile == "paper" else {}  # real workers
    assert check_training_params(**_params(profile=profile, **pool))["placement"] == placement


def test_every_profile_is_placed_as_each_of_its_stages_says():
    """The placement is read from the base stage; a stage that changed the device would train
    on the wrong pods (the pipeline places the three stages alike)."""
    from conductor_core.pipeline_steps.params import PROFILES, profile_placement
    from conductor_core.train.config import PROFILES as CONFIG_PROFILES
    from conductor_core.train.config import STAGES, build_config

    assert PROFILES is CONFIG_PROFILES  # one list: every profile file is accepted
    assert {"tiny", "small", "paper"} <= set(PROFILES)
    for profile in PROFILES:
        placement = profile_placement(profile)
        for stage in STAGES:
            device = build_config({}, stage=stage, profile=profile).device
            assert (device == "cpu") == (placement == "cpu"), (profile, stage, device)


def test_an_unknown_profile_has_no_placement():
    from conductor_core.pipeline_steps.params import PROFILES, profile_placement

    with pytest.raises(ConfigError) as err:
        profile_placement("tinny")
    assert str(err.value) == f"profile: 'tinny' is not one of {', '.join(PROFILES)}"


def test_a_dropped_in_profile_is_placed_by_its_device(monkeypatch):
    """A profile YAML added to resources/train/profiles is accepted and placed by its device."""
    import conductor_core.pipeline_steps.params as params
    import conductor_core.train.config as config

    for device, placement in (("cpu", "cpu"), ("cuda", "gpu"), ("auto", "gpu")):
        values = {"device": device, "model": {"path": "tiny"}}
        monkeypatch.setattr(config, "_load_profile", lambda name, v=values: (dict(v), {}))
        monkeypatch.setattr(config, "PROFILES", ("extra",))
        monkeypatch.setattr(params, "PROFILES", ("extra",))
        assert params.profile_placement("extra") == placement, device


# -- a GPU profile's model is downloaded into the pod's workspace --------------------------------


def test_remote_weights_are_downloaded_into_the_workspace_when_the_pod_has_one(
    monkeypatch, tmp_path
):
    import conductor_core.track.registry as registry
    from conductor_core.pipeline_steps.manifest import ModelManifest, local_weights

    seen = []
    monkeypatch.setattr(registry, "load_model_dir", lambda uri, dst: seen.append(dst) or dst)
    manifest = ModelManifest(
        weights_uri="s3://bucket/run/base/model", stage="base", prompt_style="compact"
    )
    monkeypatch.setenv("CONDUCTOR_WORKDIR", str(tmp_path / "ws"))
    local_weights(manifest)
    assert (tmp_path / "ws") in Path(seen[-1]).parents
    # the same folder on every try (a retried stage logs the path to the same MLflow run)
    local_weights(manifest)
    assert seen[-1] == seen[-2]
    other = manifest.model_copy(update={"weights_uri": "s3://bucket/run/adaptive/model"})
    local_weights(other)
    assert seen[-1] != seen[-2]
    monkeypatch.delenv("CONDUCTOR_WORKDIR")
    local_weights(manifest)
    assert seen[-1] is None  # no workspace: a temporary folder, as before
    folder = tmp_path / "weights"
    folder.mkdir()
    monkeypatch.setenv("CONDUCTOR_WORKDIR", str(tmp_path / "ws"))
    local_weights(ModelManifest(weights_uri=str(folder), stage="base", prompt_style="compact"))
    assert seen[-1] is None  # a local folder is used where it is
