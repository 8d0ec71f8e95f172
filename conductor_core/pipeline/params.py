"""Checks of a pipeline run's parameters, run by its first task.

The Kubeflow UI's run form takes free text; a typo in an enum-like parameter (a profile, the
launcher, a baseline spec) should stop the run in its first seconds with one line naming the
parameter and the accepted values, not hours later in a training pod.
"""

from __future__ import annotations

from collections.abc import Sequence

from conductor_core.errors import ConfigError

PROFILES = ("tiny", "paper")
LAUNCHERS = ("pod", "trainjob")
METRICS = ("accuracy", "cost_per_question", "calls_per_question")


def _one_of(name: str, value: str, allowed: Sequence[str]) -> list[str]:
    if value in allowed:
        return []
    return [f"{name}: {value!r} is not one of {', '.join(allowed)}"]


def check_training_params(
    *,
    profile: str,
    launcher: str,
    metric: str,
    baselines: str,
    pool: str = "bundled",
    eval_shards: int = 1,
    eval_parallelism: int = 1,
    steps: dict[str, int] | None = None,
    curation_config: str = "pipeline",
) -> dict[str, str]:
    """Check the training pipeline's parameters; raise one :class:`ConfigError` listing every
    bad one. Returns the normalised values that later tasks may print."""
    problems = [
        *_one_of("profile", profile, PROFILES),
        *_one_of("launcher", launcher, LAUNCHERS),
        *_one_of("register_metric", metric, METRICS),
    ]
    if eval_shards < 1:
        problems.append(f"eval_shards: {eval_shards}; give at least 1")
    if eval_parallelism < 1:
        problems.append(f"eval_parallelism: {eval_parallelism}; give at least 1")
    for stage, n in (steps or {}).items():
        if n < 0:
            problems.append(f"{stage}_steps: {n}; give 0 (the profile's) or a positive count")
    problems += _check_pool_and_baselines(pool, baselines)
    problems += _check_curation(curation_config)
    if problems:
        raise ConfigError("pipeline parameters: " + "; ".join(problems))
    return {"profile": profile, "launcher": launcher, "metric": metric, "baselines": baselines}


def _check_pool_and_baselines(pool: str, baselines: str) -> list[str]:
    from conductor_core.errors import ConductorError
    from conductor_core.evaluate.specs import build_baselines
    from conductor_core.pipeline.context import pool_path
    from conductor_core.workers.config import load_pool

    try:
        pool_config = load_pool(pool_path(pool))
    except ConductorError as exc:
        return [f"pool: {exc}"]
    try:
        build_baselines([s for s in baselines.split(",") if s.strip()], pool_config)
    except ConductorError as exc:
        return [f"baselines: {str(exc).splitlines()[0]}"]
    return []


def _check_curation(config: str) -> list[str]:
    from conductor_core.data.config import load_config

    try:
        load_config(config)
    except ConfigError as exc:
        return [f"curation_config: {exc}"]
    return []
