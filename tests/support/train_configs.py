"""A small GRPO training config on the tiny CPU model, for the tests that build one
(``tests/unit/test_train_grpo.py``, ``tests/unit/test_trl_contract.py``,
``tests/integration/test_train_grpo.py``)."""

from __future__ import annotations

from pathlib import Path

from conductor_core.train.config import build_config


def small(out: Path, stage: str = "base", **extra):
    data = {
        "output_dir": str(out),
        "steps": 2,
        "questions_per_step": 4,
        "plans_per_question": 2,
        "model": {"tiny": {"hidden": 64, "heads": 2, "kv_heads": 1, "layers": 1, "vocab": 400}},
        "generation": {"max_completion_length": 24},
        "warmup": {"steps": 2, "batch_size": 4},
        # where a stage's profile turns the expert start on (recursive), a small one
        "expert_start": {"executions": 2, "steps": 2, "batch_size": 4},
        "data": {"max_problems": 40},
        "checkpoint": {"save_steps": 1},
        "tracking": {"backend": "none"},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    return build_config(data, stage=stage, profile="tiny")
