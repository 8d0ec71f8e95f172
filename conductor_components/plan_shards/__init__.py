"""The `plan_shards` component."""

from conductor_components.plan_shards.component import plan_shards

__all__ = ["plan_shards"]
