"""The `aggregate` component."""

from components.aggregate.component import aggregate

__all__ = ["aggregate"]
