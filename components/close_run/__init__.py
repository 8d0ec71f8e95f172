"""The `close_run` component (the training pipeline's exit handler)."""

from components.close_run.component import close_run

__all__ = ["close_run"]
