"""Sharded, resumable benchmark evaluation with baselines, statistics and reports.

The library entry point: :class:`EvalConfig` (YAML in and out, :func:`load_eval_config`) and
:func:`run_shard`, which runs one shard and writes its records and reports.
"""

from conductor_core.evaluate.config import EvalConfig, load_eval_config, parse_eval_config
from conductor_core.evaluate.shard_job import ShardResult, run_shard

__all__ = ["EvalConfig", "ShardResult", "load_eval_config", "parse_eval_config", "run_shard"]
