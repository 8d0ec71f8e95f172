"""Deprecated: moved to :mod:`conductor_core.pipeline_steps`.

This alias package warns when imported, as each of its modules does; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved

warn_moved(__name__)
