"""Paths of the bundled files the simulated workers use: the simulated pool, the demo problems,
the training problems and their pool, and the workflow world's pool and questions (under
``conductor_core/resources``)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = [
    "bundled_pool_path",
    "bundled_problems_path",
    "bundled_train_pool_path",
    "bundled_train_problems_path",
    "bundled_workflow_pool_path",
    "bundled_workflow_problems_path",
]


def bundled_pool_path() -> Path:
    """Path of the bundled simulated pool (four workers with distinct strengths)."""
    return Path(str(resources.files("conductor_core.resources") / "pools" / "simulated.yaml"))


def bundled_problems_path() -> Path:
    """Path of the bundled demo problems (math, mcq, code, freeform; JSONL)."""
    return Path(str(resources.files("conductor_core.resources") / "problems" / "demo.jsonl"))


def bundled_train_problems_path() -> Path:
    """Path of the bundled training problems (math, mcq, freeform; JSONL)."""
    return Path(str(resources.files("conductor_core.resources") / "train" / "problems.jsonl"))


def bundled_train_pool_path() -> Path:
    """Path of the simulated pool that matches the bundled training problems."""
    return Path(str(resources.files("conductor_core.resources") / "train" / "pool.yaml"))


def bundled_workflow_pool_path() -> Path:
    """Path of the workflow world's simulated pool (:mod:`conductor_core.simulation`)."""
    return Path(str(resources.files("conductor_core.resources") / "workflows" / "pool.yaml"))


def bundled_workflow_problems_path() -> Path:
    """Path of the workflow world's questions (train, validation and test splits; JSONL)."""
    return Path(str(resources.files("conductor_core.resources") / "workflows" / "problems.jsonl"))
