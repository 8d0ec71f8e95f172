"""Deprecated: moved to :mod:`conductor_core.simulation.json_answers`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.simulation.json_answers import json_answer, value_for_schema

__all__ = ["json_answer", "value_for_schema"]

warn_moved(__name__)
