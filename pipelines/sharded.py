"""The sharded evaluation both pipelines end with: plan shards -> evaluate each (ParallelFor)
-> aggregate."""

from typing import Any

from kfp import dsl

from components.aggregate import aggregate
from components.eval_shard import eval_shard
from components.plan_shards import plan_shards
from pipelines.kubernetes import apply_pod_settings


def sharded_evaluation(
    count: Any,
    parallelism: int,
    pod: Any,
    aggregate_args: dict[str, Any],
    after: Any = None,
    **shard_args: Any,
) -> Any:
    """Wire ``count`` evaluation shards (``shard_args`` go to each ``eval_shard``; at most
    ``parallelism`` run at once) and their aggregate (``aggregate_args``), every task on CPU pods
    (``pod``), planning only once task ``after`` (if any: the parameter check) succeeded.
    Returns the aggregate task."""
    planned = plan_shards(count=count).set_display_name("plan evaluation shards")
    if after is not None:
        planned.after(after)
    apply_pod_settings(planned, pod)
    with dsl.ParallelFor(planned.output, parallelism=parallelism) as shard:
        evaluated = eval_shard(shard=shard, **shard_args).set_display_name("evaluate shard")
        apply_pod_settings(evaluated, pod)
    report = aggregate(
        shards=dsl.Collected(evaluated.outputs["records"]), **aggregate_args
    ).set_display_name("aggregate")
    return apply_pod_settings(report, pod)
