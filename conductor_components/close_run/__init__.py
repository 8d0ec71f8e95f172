"""The `close_run` component (the training pipeline's exit handler)."""

from conductor_components.close_run.component import close_run

__all__ = ["close_run"]
