"""Sharded, resumable benchmark evaluation with baselines, statistics and reports.

The library entry point: :class:`EvalConfig` (YAML in and out, :func:`load_eval_config`) and
:func:`run_shard`, which runs one shard and writes its records and reports. ``run_shard`` and
:class:`ShardResult` are imported on first use (PEP 562): the command line's help reads
:mod:`.config` and :mod:`.specs`, and :mod:`.shard_job` brings the whole evaluation stack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from conductor_core.evaluate.config import EvalConfig, load_eval_config, parse_eval_config

if TYPE_CHECKING:  # pragma: no cover
    from conductor_core.evaluate.shard_job import ShardResult, run_shard

__all__ = ["EvalConfig", "ShardResult", "load_eval_config", "parse_eval_config", "run_shard"]
_SHARD_JOB = frozenset({"ShardResult", "run_shard"})


def __getattr__(name: str) -> Any:
    """``run_shard`` and ``ShardResult``, imported when first asked for."""
    if name in _SHARD_JOB:
        # lazy: conductor --help imports .config; shard_job adds the evaluation stack (~120 ms)
        from conductor_core.evaluate import shard_job

        return getattr(shard_job, name)
    raise AttributeError(f"module 'conductor_core.evaluate' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_SHARD_JOB})
