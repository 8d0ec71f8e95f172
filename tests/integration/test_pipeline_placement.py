"""The training pipeline as compiled with a cluster settings file (issue 24, §3.2, §3.3, §3.7,
§3.9): which task runs where, on which image, with which resources; the compile-time settings
reaching the TrainJob the launcher task builds; retries, caching and the exit handler.
(Compiling takes about 10 s: once for the module. The branches on KFP's local runner:
tests/integration/test_pipeline_branches_local.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from conductor_core.cluster import images

SETTINGS = """
gpu:
  accelerator_count: 2
  accelerator_type: nvidia-h100-80gb
  workspace: {claim_name: team-workspace, mount_path: /workspace}
  env: {HF_HOME: /workspace/hf}
gpu_eval:
  node_selector: {pool: gpu-eval}
trainjob: {num_nodes: 3, runtime_name: torch-team}
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> tuple[dict, dict, dict[str, dict]]:
    from conductor_core.cluster.settings import load_cluster_settings
    from conductor_pipelines.registry import compile_pipeline

    folder = tmp_path_factory.mktemp("compiled")
    (folder / "cluster.yaml").write_text(SETTINGS)
    settings = load_cluster_settings(folder / "cluster.yaml")
    path = compile_pipeline("training", folder / "training.yaml", settings=settings)
    spec, platform = yaml.safe_load_all(Path(path).read_text())
    return spec, platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"], tasks(spec)


def tasks(spec: dict) -> dict[str, dict]:
    """Every task of the pipeline, at any depth (conditions, loops, the exit handler), by name."""
    out = dict(spec["root"]["dag"]["tasks"])
    for comp in spec["components"].values():
        out.update(comp.get("dag", {}).get("tasks", {}))
    return out


def container(spec: dict, task: str) -> dict[str, Any]:
    return spec["deploymentSpec"]["executors"][f"exec-{task}"]["container"]


def conditions_of(spec: dict, task: str) -> str:
    """The condition of the branch ``task`` is in."""
    for comp in spec["components"].values():
        for t in comp.get("dag", {}).get("tasks", {}).values():
            ref = spec["components"][t["componentRef"]["name"]]
            if task in ref.get("dag", {}).get("tasks", {}):
                return t.get("triggerPolicy", {}).get("condition", "")
    raise AssertionError(f"{task} is in no branch")


STAGES = {"base": "", "adaptive": "-2", "recursive": "-3"}
LAUNCHER = "inputs.parameter_values['pipelinechannel--launcher'] == 'trainjob'"
ON_CPU = "inputs.parameter_values['pipelinechannel--check-params-placement'] == 'cpu'"
"""The branches test the parameter check's ``placement`` output, not the profile's name."""


def taken(condition: str, values: dict[str, str]) -> bool:
    """Whether a compiled condition holds for ``values`` (parameter channel: value). The
    conditions KFP writes here are ``==`` of a channel and a string, ``!(...)`` and ``&&``."""
    expr = condition.replace("&&", " and ").replace("!(", " not (")
    for channel, value in values.items():
        expr = expr.replace(f"inputs.parameter_values['pipelinechannel--{channel}']", repr(value))
    assert "inputs." not in expr, f"a channel without a value: {condition}"
    return bool(eval(expr, {"__builtins__": {}}))  # our own compiled strings


def test_each_stage_trains_on_cpu_on_gpus_or_through_a_trainjob_by_the_run_parameters(compiled):
    spec, _, all_tasks = compiled
    for stage, n in STAGES.items():
        for task in (f"train{n}", f"train-gpu{n}", f"train-launcher{n}"):
            assert all_tasks[task]["taskInfo"]["name"] == f"train {stage}"
            assert all_tasks[task]["inputs"]["parameters"]["stage"]["runtimeValue"] == {
                "constant": stage
            }
        assert conditions_of(spec, f"train-launcher{n}") == LAUNCHER
        assert conditions_of(spec, f"train{n}") == f"!({LAUNCHER}) && {ON_CPU}"
        assert conditions_of(spec, f"train-gpu{n}") == f"!({LAUNCHER}) && !({ON_CPU})"


@pytest.mark.parametrize(("profile", "on_cpu"), [("tiny", True), ("small", True), ("paper", False)])
@pytest.mark.parametrize("launcher", ["pod", "trainjob"])
def test_each_profile_takes_the_branches_its_device_says(compiled, profile, on_cpu, launcher):
    """The placement the check task outputs for the profile picks exactly one task of each
    stage and one registration: ``small`` (SmolLM2 with LoRA, ``device: cpu``) trains,
    evaluates and registers on CPU pods as ``tiny`` does; ``paper`` on GPU pods."""
    from conductor_components.check_params import check_params
    from conductor_core.train.config import bundled_pool

    spec, _, _ = compiled
    pool = bundled_pool("paper") if profile == "paper" else "bundled"  # paper refuses simulated
    placement = check_params.python_func(
        profile=profile,
        launcher="pod",  # trainjob needs an s3:// root: the branch is the launcher's either way
        register_metric="accuracy",
        baselines="single,moa",
        pool=pool,
        curation_config="pipeline",
        eval_shards=2,
        eval_parallelism=2,
        base_steps=0,
        adaptive_steps=0,
        recursive_steps=0,
        shared_paths=["/"],
    ).placement
    assert placement == ("cpu" if on_cpu else "gpu")
    # no profile among them: a branch that read it would fail `taken`
    values = {"launcher": launcher, "check-params-placement": placement}
    for n in STAGES.values():
        ran = [
            t
            for t in ("train-launcher", "train", "train-gpu")
            if taken(conditions_of(spec, f"{t}{n}"), values)
        ]
        if launcher == "trainjob":
            assert ran == ["train-launcher"], n
        else:
            assert ran == (["train"] if on_cpu else ["train-gpu"]), (profile, n)
    registered = [t for t in ("register", "register-gpu") if taken(conditions_of(spec, t), values)]
    assert registered == (["register"] if on_cpu else ["register-gpu"])


def test_a_cpu_profile_trains_in_a_cpu_pod_on_the_base_image(compiled):
    spec, k8s, _ = compiled
    for n in STAGES.values():
        train = container(spec, f"train{n}")
        assert train["image"] == images.image("base")
        assert "accelerator" not in train["resources"]
        assert train["resources"]["resourceCpuRequest"] == "4"
        assert "tolerations" not in k8s[f"exec-train{n}"]
        assert "nodeSelector" not in k8s[f"exec-train{n}"]


def test_a_gpu_profile_trains_in_a_gpu_pod_on_the_train_image(compiled):
    spec, k8s, _ = compiled
    for n in STAGES.values():
        train = container(spec, f"train-gpu{n}")
        assert train["image"] == images.image("train")
        assert train["resources"]["accelerator"]["resourceCount"] == "2"
        labels = k8s[f"exec-train-gpu{n}"]["nodeSelector"]["labels"]
        assert labels == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
        assert k8s[f"exec-train-gpu{n}"]["pvcMount"][0]["mountPath"] == "/workspace"


def test_the_trainjob_launcher_is_a_small_cpu_pod_that_knows_its_own_pod(compiled):
    spec, k8s, _ = compiled
    for n in STAGES.values():
        launcher = container(spec, f"train-launcher{n}")
        assert launcher["image"] == images.image("base")
        assert "accelerator" not in launcher["resources"]
        assert launcher["resources"]["resourceCpuRequest"] == "250m"
        pod = k8s[f"exec-train-launcher{n}"]
        assert "tolerations" not in pod and "pvcMount" not in pod
        assert {e["name"] for e in pod["fieldPathAsEnv"]} == {
            "POD_NAME",
            "POD_UID",
            "POD_NAMESPACE",
            "WORKFLOW_NAME",  # the run's Workflow: the TrainJob's owner
        }


def test_stages_hand_their_branchs_model_to_the_next(compiled):
    spec, _, all_tasks = compiled
    for prev, n in (("2", "-2"), ("6", "-3")):
        for task in (f"train{n}", f"train-gpu{n}", f"train-launcher{n}"):
            init = all_tasks[task]["inputs"]["artifacts"]["init"]["componentInputArtifact"]
            assert f"condition-branches-{prev}-oneof" in init
    outputs = spec["components"]["comp-condition-branches-2"]["dag"]["outputs"]["artifacts"]
    (selectors,) = [o["artifactSelectors"] for o in outputs.values()]
    assert {s["outputArtifactKey"] for s in selectors} == {
        "pipelinechannel--train-model",
        "pipelinechannel--train-gpu-model",
        "pipelinechannel--train-launcher-model",
    }


def test_a_gpu_profiles_model_is_evaluated_and_registered_on_gpu_pods_with_the_workspace(
    compiled,
):
    spec, k8s, _ = compiled
    for task in ("eval-shard-gpu", "register-gpu"):
        c = container(spec, task)
        assert c["image"] == images.image("train"), task
        assert c["resources"]["accelerator"]["resourceCount"] == "1", task
        assert {"name": "CONDUCTOR_WORKDIR", "value": "/workspace"} in c["env"], task
        pod = k8s[f"exec-{task}"]
        assert pod["pvcMount"][0]["constant"] == "team-workspace", task
        assert pod["nodeSelector"]["labels"] == {
            "pool": "gpu-eval",
            "cloud.google.com/gke-accelerator": "nvidia-h100-80gb",
        }
        assert any(t.get("key") == "nvidia.com/gpu" for t in pod["tolerations"]), task
    for task in ("eval-shard", "register"):
        c = container(spec, task)
        assert c["image"] == images.image("base") and "accelerator" not in c["resources"]
    assert conditions_of(spec, "register") == ON_CPU
    assert conditions_of(spec, "register-gpu") == f"!({ON_CPU})"


def test_the_compile_time_settings_reach_the_trainjob_the_launcher_builds(
    compiled, monkeypatch, tmp_path
):
    """What the compiled launcher task receives, handed to the training step as the component
    does, builds a TrainJob with the settings file's nodes, GPU type, volume and env."""
    import conductor_core.cluster.launcher as launcher
    import conductor_core.pipeline_steps.train_steps as steps
    import conductor_core.track.storage as storage
    from conductor_components.train import train_launcher
    from conductor_core.cluster.trainjob import build_manifests

    _, _, all_tasks = compiled
    params = all_tasks["train-launcher"]["inputs"]["parameters"]
    received = params["cluster_settings"]["runtimeValue"]["constant"]
    for task in ("train", "train-gpu"):
        assert "cluster_settings" not in all_tasks[task]["inputs"]["parameters"]

    seen = {}
    monkeypatch.setattr(steps, "parent_run", lambda *a, **k: None)
    monkeypatch.setattr(storage.Storage, "upload_dir", lambda self, src, dst: dst)

    class Outcome:
        name, condition, duration_s = "job", "Complete", 1.0

    monkeypatch.setattr(
        launcher, "launch_and_wait", lambda r, s, log=print: seen.update(r=r, s=s) or Outcome
    )

    class Artifact:
        def __init__(self, path: Path) -> None:
            self.path, self.metadata = str(path), {}

    (tmp_path / "dataset").mkdir()
    train_launcher.python_func(
        stage="base",
        profile="paper",
        dataset=Artifact(tmp_path / "dataset"),
        run_id="run-1",
        model=Artifact(tmp_path / "model.json"),
        pool="conductor_core/resources/pools/paper.yaml",
        launcher="trainjob",
        artifact_root="s3://bucket/prefix",
        task_id="task-1",
        cluster_settings=received,
    )
    job = build_manifests(seen["r"], seen["s"]).trainjob
    trainer = job["spec"]["trainer"]
    assert trainer["numNodes"] == 3 and trainer["numProcPerNode"] == 2
    assert trainer["image"] == images.image("train")
    assert trainer["image"].endswith(":" + images.default_tag())
    assert {"name": "HF_HOME", "value": "/workspace/hf"} in trainer["env"]
    assert trainer["resourcesPerNode"]["limits"]["nvidia.com/gpu"] == "2"
    assert job["spec"]["runtimeRef"]["name"] == "torch-team"
    patch = json.dumps(job["spec"]["runtimePatches"])
    assert '"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"' in patch
    assert '"claimName": "team-workspace"' in patch


def test_training_and_evaluation_are_retried_and_side_effects_never_cached(compiled):
    _, _, all_tasks = compiled
    retried = [n for n, t in all_tasks.items() if "retryPolicy" in t]
    assert sorted(retried) == sorted(
        [f"{t}{n}" for t in ("train", "train-gpu", "train-launcher") for n in STAGES.values()]
        + ["eval-shard", "eval-shard-gpu"]
    )
    policy = all_tasks["train"]["retryPolicy"]
    assert policy["maxRetryCount"] == 2 and policy["backoffDuration"] == "60s"
    for name, task in all_tasks.items():
        if name.startswith(("train", "register", "close-run")):
            assert task["cachingOptions"] == {}, name  # {} = enableCache false


def test_an_exit_handler_closes_the_mlflow_run_with_the_pipelines_final_state(compiled):
    spec, _, _ = compiled
    root = spec["root"]["dag"]["tasks"]
    assert set(root) == {"close-run", "exit-handler-1"}
    close = root["close-run"]
    assert close["triggerPolicy"]["strategy"] == "ALL_UPSTREAM_TASKS_COMPLETED"
    assert close["inputs"]["parameters"]["status"] == {
        "taskFinalStatus": {"producerTask": "exit-handler-1"}
    }
    assert container(spec, "close-run")["image"] == images.image("base")
    inside = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    assert [n for n, t in inside.items() if not t.get("dependentTasks")] == ["check-params"]
