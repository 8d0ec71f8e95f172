"""Deprecated: moved to :mod:`conductor_core.simulation.server`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.simulation.server import (
    MALFORMED_BODY,
    SimulatorState,
    create_app,
    running_app,
    running_simulator,
    serve,
)

__all__ = [
    "MALFORMED_BODY",
    "SimulatorState",
    "create_app",
    "running_app",
    "running_simulator",
    "serve",
]

warn_moved(__name__)
