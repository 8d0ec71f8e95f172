"""Deprecated: moved to :mod:`conductor_core.simulation.problem_bank`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.simulation.problem_bank import (
    ProblemBank,
    bank_for,
    clear_bank_cache,
    known_problem,
    known_problems,
    normalize_text,
)

__all__ = [
    "ProblemBank",
    "bank_for",
    "clear_bank_cache",
    "known_problem",
    "known_problems",
    "normalize_text",
]

warn_moved(__name__)
