"""Deprecated: moved to :mod:`conductor_core.simulation.provider`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.simulation.provider import (
    FAILURE_KINDS,
    STREAM_CHUNKS,
    ParsedMessage,
    SimulatedProvider,
    VisibleStep,
    parse_worker_message,
    stream_pieces,
)

__all__ = [
    "FAILURE_KINDS",
    "STREAM_CHUNKS",
    "ParsedMessage",
    "SimulatedProvider",
    "VisibleStep",
    "parse_worker_message",
    "stream_pieces",
]

warn_moved(__name__)
