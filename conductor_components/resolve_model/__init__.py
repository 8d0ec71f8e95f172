"""The `resolve_model` component."""

from conductor_components.resolve_model.component import resolve_model

__all__ = ["resolve_model"]
