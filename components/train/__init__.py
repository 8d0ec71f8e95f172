"""The `train` component."""

from components.train.component import train

__all__ = ["train"]
