"""The `aggregate` component."""

from conductor_components.aggregate.component import aggregate

__all__ = ["aggregate"]
