"""Split an evaluation into shards."""

from kfp import dsl

from conductor_components._settings import COMPONENT_OPTIONS


@dsl.component(**COMPONENT_OPTIONS)
def plan_shards(count: int) -> list[str]:
    """The shard specs of an evaluation split into `count` shards ("0/N" ... "N-1/N"); each
    problem belongs to one shard by a hash of its id."""
    from conductor_core.pipeline_steps.eval_steps import shard_specs

    return shard_specs(count)
