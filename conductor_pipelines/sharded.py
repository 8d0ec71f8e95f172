"""The sharded evaluation both pipelines end with: plan shards -> evaluate each (ParallelFor)
-> aggregate."""

from typing import Any

from kfp import dsl

from conductor_components.aggregate import aggregate
from conductor_components.eval_shard import eval_shard, eval_shard_gpu
from conductor_components.plan_shards import plan_shards
from conductor_pipelines.kubernetes import apply_pod_settings, apply_sandbox, retried


def sharded_evaluation(
    count: Any,
    parallelism: int,
    pod: Any,
    aggregate_args: dict[str, Any],
    after: Any = None,
    gpu_pod: Any = None,
    **shard_args: Any,
) -> Any:
    """Wire ``count`` evaluation shards (``shard_args`` go to each ``eval_shard``; at most
    ``parallelism`` run at once, each retried on failure) and their aggregate
    (``aggregate_args``), every task on CPU pods (``pod``), planning only once task ``after``
    (if any: the parameter check) succeeded. With ``gpu_pod`` (a model that needs a GPU: a GPU
    profile's) the shards run ``eval-shard-gpu`` on the CUDA image in those pods instead.
    Returns the aggregate task."""
    planned = plan_shards(count=count).set_display_name("plan evaluation shards")
    if after is not None:
        planned.after(after)
    apply_pod_settings(planned, pod)
    with dsl.ParallelFor(planned.output, name="evaluate shards", parallelism=parallelism) as shard:
        shard_component = eval_shard if gpu_pod is None else eval_shard_gpu
        evaluated = shard_component(shard=shard, **shard_args).set_display_name("evaluate shard")
        shard_pod = pod if gpu_pod is None else gpu_pod
        apply_sandbox(apply_pod_settings(retried(evaluated), shard_pod), shard_pod)
    report = aggregate(
        shards=dsl.Collected(evaluated.outputs["records"]), **aggregate_args
    ).set_display_name("aggregate")
    return apply_pod_settings(report, pod)
