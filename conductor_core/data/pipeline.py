"""Deprecated: moved to :mod:`conductor_core.data.curation`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.data.curation import (
    STAT_EXAMPLES,
    CurationFailed,
    CurationResult,
    counts,
    curate,
    failed_report_paths,
    removal_stats,
)

__all__ = [
    "STAT_EXAMPLES",
    "CurationFailed",
    "CurationResult",
    "counts",
    "curate",
    "failed_report_paths",
    "removal_stats",
]

warn_moved(__name__)
