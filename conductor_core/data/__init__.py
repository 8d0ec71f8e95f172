"""Dataset curation: load, normalise, de-duplicate, decontaminate, difficulty-filter, mix, split,
and gate the result with Great Expectations (``conductor curate``).

Each step is a plain function on lists of :class:`~conductor_core.tasks.problem.Problem` so that a
pipeline component can read a file, call one step and write the result; :func:`curate` runs them
all and writes the output folder atomically (see :mod:`conductor_core.data.curation`). Heavy
dependencies (pandas, numpy, great_expectations) are imported only when a step needs them.
"""

from __future__ import annotations

from conductor_core.data.config import CurationConfig, load_config, parse_config
from conductor_core.data.curation import CurationFailed, CurationResult, curate
from conductor_core.data.difficulty import difficulty_filter
from conductor_core.data.expectations import ValidationOutcome, validate
from conductor_core.data.mixture import mix, split
from conductor_core.data.records import Filtered, Removal
from conductor_core.data.steps import decontaminate, deduplicate, load_sources, normalise

__all__ = [
    "CurationConfig",
    "CurationFailed",
    "CurationResult",
    "Filtered",
    "Removal",
    "ValidationOutcome",
    "curate",
    "decontaminate",
    "deduplicate",
    "difficulty_filter",
    "load_config",
    "load_sources",
    "mix",
    "normalise",
    "parse_config",
    "split",
    "validate",
]
