"""Deprecated: moved to :mod:`conductor_core.simulation.routing_problems`.

This alias re-exports its public names and warns when imported; it goes in the next release.

The bundled paths it also held are in :mod:`conductor_core.workers.bundled`.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.simulation.routing_problems import synthetic_problems
from conductor_core.workers.bundled import bundled_train_pool_path, bundled_train_problems_path

__all__ = ["bundled_train_pool_path", "bundled_train_problems_path", "synthetic_problems"]

warn_moved(__name__)
