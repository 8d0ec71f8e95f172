"""Evaluation records made by hand, for tests of what is done with them (aggregation, logging)."""

from __future__ import annotations

from typing import Any

from conductor_core.evaluate.records import EvalRecord


def eval_record(pid: str, method: str, *, benchmark: str = "held-out", **fields: Any) -> EvalRecord:
    """The record of ``method`` on problem ``pid`` (repeat 0, correct unless ``fields`` say)."""
    base: dict[str, Any] = {
        "problem_id": pid,
        "benchmark": benchmark,
        "domain": "math",
        "method": method,
        "repeat": 0,
        "sample_index": 0,
        "correct": True,
    }
    return EvalRecord(**{**base, **fields})
