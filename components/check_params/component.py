"""The training pipeline's first task: check its parameters."""

from kfp import dsl

from components._settings import COMPONENT_OPTIONS


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
) -> str:
    """Check the run's parameters (profile, launcher, metric, baselines, pool, curation config,
    shard counts, step and warm-up step counts) and stop the run with one line naming every bad
    one."""
    from conductor_core.pipeline.params import check_training_params

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
        },
    )
    return ", ".join(f"{k}={v}" for k, v in checked.items())
