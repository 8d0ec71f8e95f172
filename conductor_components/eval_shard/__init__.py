"""The `eval_shard` component and its GPU variant (`eval-shard-gpu`)."""

from conductor_components.eval_shard.component import eval_shard, eval_shard_gpu

__all__ = ["eval_shard", "eval_shard_gpu"]
