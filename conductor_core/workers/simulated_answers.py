"""Deprecated: moved to :mod:`conductor_core.simulation.answers`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.simulation.answers import (
    HEDGES,
    broken_code,
    generic_answer,
    hedge_answer,
    is_right_text,
    render_answer,
    wrong_math,
)

__all__ = [
    "HEDGES",
    "broken_code",
    "generic_answer",
    "hedge_answer",
    "is_right_text",
    "render_answer",
    "wrong_math",
]

warn_moved(__name__)
