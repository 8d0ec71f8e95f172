"""Deprecated: moved to :mod:`conductor_core.pipeline_steps.eval_steps`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.pipeline_steps.eval_steps import (
    CONDUCTOR_METHOD,
    aggregate_step,
    comparison,
    comparison_markdown,
    eval_shard_step,
    evaluation_target,
    inline_images,
    resolve_conductor_step,
    shard_specs,
    summary_markdown,
)

__all__ = [
    "CONDUCTOR_METHOD",
    "aggregate_step",
    "comparison",
    "comparison_markdown",
    "eval_shard_step",
    "evaluation_target",
    "inline_images",
    "resolve_conductor_step",
    "shard_specs",
    "summary_markdown",
]

warn_moved(__name__)
