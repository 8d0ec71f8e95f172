"""The `validate` component."""

from components.validate.component import validate

__all__ = ["validate"]
