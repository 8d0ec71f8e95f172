"""Deprecated: moved to :mod:`conductor_core.pipeline_steps.manifest`.

This alias re-exports its public names and warns when imported; it goes in the next release.
"""

from conductor_core._deprecated import warn_moved
from conductor_core.pipeline_steps.manifest import (
    MANIFEST_VERSION,
    ModelManifest,
    local_weights,
    read_manifest,
)

__all__ = ["MANIFEST_VERSION", "ModelManifest", "local_weights", "read_manifest"]

warn_moved(__name__)
