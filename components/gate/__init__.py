"""The `gate` component."""

from components.gate.component import gate

__all__ = ["gate"]
