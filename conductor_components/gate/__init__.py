"""The `gate` component."""

from conductor_components.gate.component import gate

__all__ = ["gate"]
