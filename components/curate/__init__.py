"""The `curate` component."""

from components.curate.component import curate

__all__ = ["curate"]
