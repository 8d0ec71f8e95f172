"""The `validate` component."""

from conductor_components.validate.component import validate

__all__ = ["validate"]
