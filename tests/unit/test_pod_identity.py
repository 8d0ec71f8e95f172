"""``conductor_pipelines.kubernetes.expose_pod_identity`` puts the pod's name, uid and namespace and
its Argo Workflow's name in a task's environment through the downward API, in the compiled
pipeline's Kubernetes platform spec (what the KFP backend's driver turns into
``env[].valueFrom.fieldRef``).

No ``from __future__ import annotations`` here: kfp reads the component's annotations as types.
"""

from typing import Any

from conductor_core.cluster.trainjob import owner_pod_from_env, workflow_name_from_env


def _platform_spec(tmp_path: Any, expose: bool) -> dict:
    import yaml
    from kfp import compiler, dsl

    from conductor_pipelines.kubernetes import expose_pod_identity

    @dsl.component(base_image="python:3.11", install_kfp_package=False)
    def launch() -> None:
        pass

    @dsl.pipeline(name="pod-identity")
    def pipe() -> None:
        task = launch()
        if expose:
            expose_pod_identity(task)

    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(pipeline_func=pipe, package_path=str(path))
    docs = list(yaml.safe_load_all(path.read_text()))
    platform = docs[1] if len(docs) > 1 else {}
    return platform


def test_expose_pod_identity_sets_the_downward_api_variables(tmp_path) -> None:
    platform = _platform_spec(tmp_path, expose=True)
    executor = platform["platforms"]["kubernetes"]["deploymentSpec"]["executors"]["exec-launch"]
    assert executor["fieldPathAsEnv"] == [
        {"name": "POD_NAME", "fieldPath": "metadata.name"},
        {"name": "POD_UID", "fieldPath": "metadata.uid"},
        {"name": "POD_NAMESPACE", "fieldPath": "metadata.namespace"},
        # Argo's label on every pod of a Workflow: the run the TrainJob is owned by
        {"name": "WORKFLOW_NAME", "fieldPath": "metadata.labels['workflows.argoproj.io/workflow']"},
    ]
    # the launcher reads exactly these variables
    env = {item["name"]: f"<{item['fieldPath']}>" for item in executor["fieldPathAsEnv"]}
    assert workflow_name_from_env(env) == "<metadata.labels['workflows.argoproj.io/workflow']>"
    owner = owner_pod_from_env(env)
    assert owner is not None
    assert (owner.name, owner.uid, owner.namespace) == (
        "<metadata.name>",
        "<metadata.uid>",
        "<metadata.namespace>",
    )


def test_without_it_a_task_has_no_pod_identity(tmp_path) -> None:
    assert not _platform_spec(tmp_path, expose=False)
