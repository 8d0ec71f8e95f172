"""The `check_params` component."""

from conductor_components.check_params.component import check_params

__all__ = ["check_params"]
