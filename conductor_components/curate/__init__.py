"""The `curate` component."""

from conductor_components.curate.component import curate

__all__ = ["curate"]
