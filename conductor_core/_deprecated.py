"""Old import paths of moved modules, kept for one release (the CHANGELOG lists the moves).

:data:`MOVED` maps each old module path to its new one. The old path holds a small alias module
that re-exports the new module's public names and calls :func:`warn_moved` when imported; the
alias modules and this table go in the next release.
"""

from __future__ import annotations

import warnings

__all__ = ["MOVED", "warn_moved"]

MOVED: dict[str, str] = {
    # the simulated worlds in one place
    "conductor_core.workers.simulated": "conductor_core.simulation.provider",
    "conductor_core.workers.simulated_answers": "conductor_core.simulation.answers",
    "conductor_core.workers.simulated_json": "conductor_core.simulation.json_answers",
    "conductor_core.workers.problem_bank": "conductor_core.simulation.problem_bank",
    "conductor_core.serve.simulator": "conductor_core.simulation.server",
    "conductor_core.train.problems": "conductor_core.simulation.routing_problems",
    # the pipelines' steps as library calls
    "conductor_core.pipeline_tasks": "conductor_core.pipeline_steps",
    "conductor_core.pipeline_tasks.context": "conductor_core.pipeline_steps.context",
    "conductor_core.pipeline_tasks.data_steps": "conductor_core.pipeline_steps.data_steps",
    "conductor_core.pipeline_tasks.eval_steps": "conductor_core.pipeline_steps.eval_steps",
    "conductor_core.pipeline_tasks.manifest": "conductor_core.pipeline_steps.manifest",
    "conductor_core.pipeline_tasks.params": "conductor_core.pipeline_steps.params",
    "conductor_core.pipeline_tasks.register_step": "conductor_core.pipeline_steps.register_step",
    "conductor_core.pipeline_tasks.train_steps": "conductor_core.pipeline_steps.train_steps",
    # one name, one thing
    "conductor_core.data.pipeline": "conductor_core.data.curation",
    "conductor_core.evaluate.job": "conductor_core.evaluate.shard_job",
    "conductor_core.track.tracker": "conductor_core.track.run_tracker",
    "conductor_core.tasks.sandbox.outcome": "conductor_core.tasks.sandbox.run_outcome",
}
"""Old module path -> the module it moved to."""


def warn_moved(old: str) -> None:
    """Warn (``DeprecationWarning``, pointing at the line that imported ``old``) that module
    ``old`` moved to ``MOVED[old]`` and that its old path goes in the next release."""
    warnings.warn(
        f"{old} moved to {MOVED[old]}: import it from there; the old path goes in the next release",
        DeprecationWarning,
        stacklevel=3,  # this function, the alias module, then (past importlib) the importer
    )
