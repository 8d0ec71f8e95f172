"""The `eval_shard` component."""

from components.eval_shard.component import eval_shard

__all__ = ["eval_shard"]
