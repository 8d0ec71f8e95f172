"""Old import paths of moved modules and names, kept for one release (the CHANGELOG lists the
moves).

:data:`MOVED` maps each old module path to its new one. The old path holds a small alias module
that re-exports the new module's public names and calls :func:`warn_moved` when imported.
:data:`MOVED_NAMES` maps each old ``module.name`` to its new one; the old module's ``__getattr__``
(PEP 562) returns :func:`moved_name`. The alias modules, the ``__getattr__`` hooks and these
tables go in the next release.
"""

from __future__ import annotations

import importlib
import warnings
from typing import Any

__all__ = ["MOVED", "MOVED_NAMES", "moved_name", "warn_moved"]

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

MOVED_NAMES: dict[str, str] = {
    # the sample-index streams in one module (sample_streams)
    "conductor_core.solve.ROUND_STRIDE": "conductor_core.sample_streams.ROUND_STRIDE",
    "conductor_core.solve.round_sample_index": "conductor_core.sample_streams.round_index",
}
"""Old ``module.name`` -> the ``module.name`` it moved to."""


def warn_moved(old: str) -> None:
    """Warn (``DeprecationWarning``, pointing at the line that imported ``old``) that module
    ``old`` moved to ``MOVED[old]`` and that its old path goes in the next release."""
    warnings.warn(
        f"{old} moved to {MOVED[old]}: import it from there; the old path goes in the next release",
        DeprecationWarning,
        stacklevel=3,  # this function, the alias module, then (past importlib) the importer
    )


def moved_name(module: str, name: str) -> Any:
    """``name`` of ``module`` when it is in :data:`MOVED_NAMES`: what its new path holds, with a
    ``DeprecationWarning`` pointing at the line that asked for it (call it from the module's
    ``__getattr__``). Any other name raises ``AttributeError``, as a missing attribute does."""
    old = f"{module}.{name}"
    if old not in MOVED_NAMES:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new = MOVED_NAMES[old]
    warnings.warn(
        f"{old} moved to {new}: import it from there; the old name goes in the next release",
        DeprecationWarning,
        stacklevel=3,  # this function, the module's __getattr__, then the line that asked
    )
    new_module, _, new_name = new.rpartition(".")
    return getattr(importlib.import_module(new_module), new_name)
