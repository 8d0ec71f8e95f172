"""Deprecated: moved to :mod:`conductor_core.evaluate.shard_job`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.evaluate.shard_job import ShardResult, load_eval_problems, run_shard

__all__ = ["ShardResult", "load_eval_problems", "run_shard"]

warn_moved(__name__)
