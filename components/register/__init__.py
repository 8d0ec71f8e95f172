"""The `register` component."""

from components.register.component import register

__all__ = ["register"]
