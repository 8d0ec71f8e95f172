"""The training pipeline's first task: check its parameters."""

from typing import NamedTuple

from kfp import dsl

from conductor_components._settings import COMPONENT_OPTIONS


@dsl.component(**COMPONENT_OPTIONS)
def check_params(
    profile: str,
    launcher: str,
    register_metric: str,
    baselines: str,
    pool: str,
    curation_config: str,
    eval_shards: int,
    eval_parallelism: int,
    base_steps: int,
    adaptive_steps: int,
    recursive_steps: int,
    warmup_steps: int = 0,
    expert_start_steps: int = 0,
    seed: int = -1,
    artifact_root: str = "",
    default_artifact_root: str = "",
    shared_paths: list = [],  # noqa: B006 (KFP reads the default from the signature; never mutated)
    s3_secret: str = "",
    trainjob_runtime: str = "",
    namespace: str = "",
    eval_benchmark: str = "",
) -> NamedTuple("Outputs", [("checked", str), ("placement", str)]):
    """Check the run's parameters (profile, launcher, metric, baselines, pool, curation config,
    shard counts, step, warm-up and expert-start step counts, the training seed, and an artifact
    root the run's pods can share: `s3://` with S3 credentials, or a folder under the cluster
    settings' `shared_paths`) and stop the run with one line naming every bad one.
    With `launcher=trainjob` it looks the Kubeflow Trainer runtime up in the cluster
    (`trainjob_runtime`, `Kind/name`; a TrainingRuntime in `namespace`, else the pod's own) and
    stops the run when it does not exist, before any GPU node is asked for. A run that grades
    generated code (a code benchmark among the curation config's sources, or `eval_benchmark`)
    runs the code sandbox's isolation check in this pod, which carries the GPU graders' sandbox
    settings, and stops when the sandbox would refuse the code.
    `default_artifact_root`, `shared_paths`, `s3_secret`, `trainjob_runtime` and `namespace`
    come from the cluster settings the pipeline was compiled with. Returns the checked values as
    `key=value, ...` and the profile's placement (`cpu` or `gpu`: its training config's
    device), which the pipeline's branches follow."""
    from collections import namedtuple

    from conductor_core.pipeline_steps.params import check_training_params

    checked = check_training_params(
        profile=profile,
        launcher=launcher,
        metric=register_metric,
        baselines=baselines,
        pool=pool,
        curation_config=curation_config,
        eval_shards=eval_shards,
        eval_parallelism=eval_parallelism,
        steps={
            "base": base_steps,
            "adaptive": adaptive_steps,
            "recursive": recursive_steps,
            "warmup": warmup_steps,
            "expert_start": expert_start_steps,
        },
        seed=seed,
        artifact_root=artifact_root,
        default_artifact_root=default_artifact_root,
        shared_paths=shared_paths,
        s3_secret=s3_secret,
        trainjob_runtime=trainjob_runtime,
        namespace=namespace,
        eval_benchmark=eval_benchmark,
    )
    outputs = namedtuple("Outputs", ["checked", "placement"])
    return outputs(", ".join(f"{k}={v}" for k, v in checked.items()), checked["placement"])
