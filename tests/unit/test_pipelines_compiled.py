"""The committed compiled pipelines: described, and carrying the GPU and Kubernetes settings
(compiling them afresh: tests/integration/test_pipelines_compile.py)."""

from __future__ import annotations

import pytest
import yaml

from conductor_pipelines.registry import COMPILED_DIR, NAMES


def _docs(name: str) -> list[dict]:
    return list(yaml.safe_load_all((COMPILED_DIR / f"{name}.yaml").read_text()))


@pytest.mark.parametrize("name", NAMES)
def test_every_parameter_has_a_default_and_a_description(name):
    spec = _docs(name)[0]
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params
    for key, p in params.items():
        assert "defaultValue" in p, f"{name}.{key} has no default"
        assert len(p.get("description", "")) > 15, f"{name}.{key} has no description"


def test_resources_follow_the_profile_gpu_pods_only_for_gpu_profiles():
    """Each stage is three tasks, one picked by the run's profile and launcher: CPU training on
    the base image (tiny), GPU training on the train image, a small CPU launcher of a TrainJob;
    evaluation and registration likewise on CPU or GPU pods."""
    spec, platform = _docs("training")
    executors = spec["deploymentSpec"]["executors"]
    k8s = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]

    def container(task: str) -> dict:
        return executors[f"exec-{task}"]["container"]

    for n in ("", "-2", "-3"):
        gpu = container(f"train-gpu{n}")
        assert gpu["image"].rsplit("/", 1)[1].startswith("conductor-train:")
        assert gpu["resources"]["accelerator"]["resourceType"] == "nvidia.com/gpu"
        assert int(gpu["resources"]["accelerator"]["resourceCount"]) >= 1
        pod = k8s[f"exec-train-gpu{n}"]
        shm = [m for m in pod["emptyDirMounts"] if m["mountPath"] == "/dev/shm"]
        assert shm and shm[0]["medium"] == "Memory"
        assert any(t.get("key") == "nvidia.com/gpu" for t in pod["tolerations"])
        secrets = {s["secretName"]: s for s in pod["secretAsEnv"]}
        assert {"conductor-api-keys", "conductor-s3"} <= set(secrets)
        envs = {e["envVar"] for s in secrets.values() for e in s["keyToEnv"]}
        assert {"OPENAI_API_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} <= envs
        for cpu_task in (f"train{n}", f"train-launcher{n}"):
            assert "conductor-base" in container(cpu_task)["image"], cpu_task
            assert "accelerator" not in container(cpu_task)["resources"], cpu_task
            assert "tolerations" not in k8s[f"exec-{cpu_task}"], cpu_task
    for task in ("eval-shard", "register", "close-run"):
        assert "conductor-base" in container(task)["image"], task
        assert "accelerator" not in container(task).get("resources", {}), task
    # evaluation pods read the API keys too, but the CPU ones need no GPU settings
    assert "tolerations" not in k8s["exec-eval-shard"]
    for task in ("eval-shard-gpu", "register-gpu"):
        assert "conductor-train" in container(task)["image"], task
        assert container(task)["resources"]["accelerator"]["resourceCount"] == "1", task
        assert any(m["mountPath"] == "/workspace" for m in k8s[f"exec-{task}"]["emptyDirMounts"])


def test_side_effect_steps_are_never_cached_and_training_and_evaluation_are_retried():
    tasks = _all_tasks(_docs("training")[0])
    side_effects = [
        *(f"{t}{n}" for t in ("train", "train-gpu", "train-launcher") for n in ("", "-2", "-3")),
        "register",
        "register-gpu",
        "close-run",
    ]
    for name in side_effects:
        assert tasks[name]["cachingOptions"] == {}, name  # {} = enableCache false
    assert tasks["curate"]["cachingOptions"] == {"enableCache": True}
    retried = {n for n, t in tasks.items() if t.get("retryPolicy", {}).get("maxRetryCount")}
    assert retried == {*side_effects[:9], "eval-shard", "eval-shard-gpu"}


def test_every_training_task_and_the_parameter_check_take_the_runs_seed():
    spec = _docs("training")[0]
    assert spec["root"]["inputDefinitions"]["parameters"]["seed"]["defaultValue"] == -1
    tasks = _all_tasks(spec)
    takers = [
        "check-params",
        *(f"{t}{n}" for t in ("train", "train-gpu", "train-launcher") for n in ("", "-2", "-3")),
    ]
    for name in takers:
        source = tasks[name]["inputs"]["parameters"]["seed"]["componentInputParameter"]
        assert source in ("seed", "pipelinechannel--seed"), name


def test_no_task_starts_before_the_parameter_check_and_an_exit_handler_closes_the_run():
    spec = _docs("training")[0]
    root = spec["root"]["dag"]["tasks"]
    assert set(root) == {"exit-handler-1", "close-run"}
    assert root["close-run"]["inputs"]["parameters"]["status"] == {
        "taskFinalStatus": {"producerTask": "exit-handler-1"}
    }
    tasks = spec["components"]["comp-exit-handler-1"]["dag"]["tasks"]
    roots = [n for n, t in tasks.items() if not t.get("dependentTasks")]
    assert roots == ["check-params"]


def _all_tasks(spec: dict) -> dict[str, dict]:
    """Every task of a compiled pipeline by name, in the root DAG and in every sub-DAG (exit
    handler, conditions, loops)."""
    out = dict(spec["root"]["dag"]["tasks"])
    for component in spec["components"].values():
        out.update(component.get("dag", {}).get("tasks", {}))
    return out


def test_the_s3_secret_is_mounted_optional_on_every_task():
    """A missing conductor-s3 Secret must not hold a pod in CreateContainerConfigError (the run
    would hang, exit handler included): the pods start and the parameter check names it."""
    for name in NAMES:
        k8s = _docs(name)[1]["platforms"]["kubernetes"]["deploymentSpec"]["executors"]
        for executor, pod in k8s.items():
            s3 = [s for s in pod.get("secretAsEnv", []) if s["secretName"] == "conductor-s3"]
            assert s3 and all(s["optional"] is True for s in s3), f"{name}.{executor}"


@pytest.mark.parametrize("name", ["training", "curation"])
def test_the_data_report_survives_a_failed_gate(name):
    """KFP uploads a task's outputs only when it succeeds: validate reports either way and the
    gate after it stops the run, before anything else starts."""
    tasks = _all_tasks(_docs(name)[0])
    assert tasks["gate"]["dependentTasks"] == ["validate"]
    passed = tasks["gate"]["inputs"]["parameters"]["passed"]["taskOutputParameter"]
    assert passed == {"outputParameterKey": "passed", "producerTask": "validate"}
    # whatever depends on the curated dataset besides the gate itself waits for the gate
    for task_name, task in tasks.items():
        if "curate" in task.get("dependentTasks", []) and task_name not in ("validate",):
            assert "gate" in task["dependentTasks"], task_name


@pytest.mark.parametrize("name", ["training", "evaluation"])
def test_the_evaluation_loop_has_a_readable_name(name):
    loops = [t for t in _all_tasks(_docs(name)[0]).values() if "parameterIterator" in t]
    assert loops and all(t["taskInfo"]["name"] == "evaluate shards" for t in loops)


def _source_of(spec: dict, task_name: str, parameter: str) -> dict:
    """Where a task's input parameter comes from, followed up through the DAGs that hold it
    (sub-pipelines, loops) to a pipeline parameter, a constant or another task's output. Task
    names repeat across sub-pipelines (the CPU and GPU branches' loops), so each DAG's holder
    is found by the component it instantiates."""
    dags = [("root", spec["root"]), *spec["components"].items()]
    holders = {  # task name -> (the DAG's component name, the task): the task named here
        name: (component, task)
        for component, body in dags
        for name, task in body.get("dag", {}).get("tasks", {}).items()
    }
    parents = {  # component name -> (the DAG holding a task of it, that task)
        task["componentRef"]["name"]: (component, task)
        for component, body in dags
        for task in body.get("dag", {}).get("tasks", {}).values()
    }
    component, task = holders[task_name]
    source = task["inputs"]["parameters"][parameter]
    while "componentInputParameter" in source and component != "root":
        component, task = parents[component]
        source = task["inputs"]["parameters"][source["componentInputParameter"]]
    return source


def test_the_evaluation_resolves_an_alias_uncached_before_its_cached_shards():
    spec = _docs("evaluation")[0]
    tasks = _all_tasks(spec)
    assert tasks["resolve-model"]["cachingOptions"] == {}  # {} = enableCache false
    assert tasks["eval-shard"]["cachingOptions"] == {"enableCache": True}
    for shard in ("eval-shard", "eval-shard-gpu"):
        assert _source_of(spec, shard, "conductor") == {
            "taskOutputParameter": {
                "outputParameterKey": "conductor",
                "producerTask": "resolve-model",
            }
        }
    # the shards' loop takes the version as an input of its DAG, not as a task output (which
    # KFP's local runner would replace with the loop item)
    loops = [
        task
        for body in [spec["root"], *spec["components"].values()]
        for task in body.get("dag", {}).get("tasks", {}).values()
        if "parameterIterator" in task
    ]
    assert len(loops) == 2  # the CPU and the GPU branch
    for loop in loops:
        outputs = [v for v in loop["inputs"]["parameters"].values() if "taskOutputParameter" in v]
        assert [o["taskOutputParameter"]["producerTask"] for o in outputs] == ["plan-shards"]


def test_a_gpu_profiles_model_is_evaluated_on_gpu_pods():
    """The evaluation's profile switch, as the training pipeline's: the placement the resolving
    task reads from the profile picks the branch; the GPU branch's shards ask for a GPU."""
    spec = _docs("evaluation")[0]
    tasks = _all_tasks(spec)
    conditions = {
        name: task["triggerPolicy"]["condition"]
        for name, task in tasks.items()
        if "triggerPolicy" in task
    }
    assert len(conditions) == 2
    assert all("resolve-model" in c and "placement" in c for c in conditions.values())
    assert tasks["resolve-model"]["inputs"]["parameters"]["profile"] == {
        "componentInputParameter": "profile"
    }
    shard = spec["deploymentSpec"]["executors"]["exec-eval-shard-gpu"]["container"]
    assert int(shard["resources"]["accelerator"]["resourceCount"]) >= 1
    assert "conductor-train" in shard["image"]
    cpu_shard = spec["deploymentSpec"]["executors"]["exec-eval-shard"]["container"]
    assert "accelerator" not in cpu_shard.get("resources", {})
