"""The model manifest: what a pipeline's `Model` artifact holds.

A training task does not pass weights between pipeline steps (they would be copied into every
artifact store and pod): it passes this small JSON file, which says where the weights live (a
local folder or an ``s3://`` prefix), the stage that produced them, the MLflow run that logged
them and, once registered, the model version.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from conductor_core.errors import ConfigError
from conductor_core.pipeline_steps.context import WORKDIR_ENV, local_workdir
from conductor_core.track import registry

MANIFEST_VERSION = 1


class ModelManifest(BaseModel):
    """Where a trained Conductor's weights are, and where it came from."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(default=MANIFEST_VERSION, description="Manifest format version.")
    weights_uri: str = Field(
        description="The model folder (save_pretrained output): a local path or `s3://...`."
    )
    stage: str = Field(description="The training stage that wrote the weights.")
    prompt_style: str = Field(description="The prompt style the model learned (full | compact).")
    run_id: str | None = Field(default=None, description="The MLflow run of the stage.")
    profile: str | None = Field(
        default=None, description="The training profile of the stage (`tiny`, `paper`...)."
    )
    dataset_digest: str | None = Field(
        default=None,
        description="Content digest of the problems the stage trained on (the digest of the "
        "stage run's MLflow dataset input).",
    )
    steps: int = Field(default=0, description="Optimiser steps of the stage.")
    seconds: float = Field(default=0.0, description="Wall time of the stage.")
    registered_model: str | None = Field(
        default=None, description="Registered model name, once registered."
    )
    model_version: str | None = Field(
        default=None, description="Registered model version, once registered."
    )

    def write(self, path: str | Path) -> Path:
        """Write the manifest as JSON to ``path`` (a file; its folder is created)."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(self.model_dump_json(indent=2) + "\n", encoding="utf-8")
        return target


def read_manifest(path: str | Path) -> ModelManifest:
    """Read a manifest file (a folder holding ``manifest.json`` is accepted too)."""
    source = Path(path)
    if source.is_dir():
        source = source / "manifest.json"
    try:
        return ModelManifest.model_validate_json(source.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"model manifest: {source} does not exist") from None
    except (ValidationError, json.JSONDecodeError) as exc:
        raise ConfigError(f"model manifest {source}: not a model manifest ({exc})") from exc


def local_weights(manifest: ModelManifest, cache_dir: str | Path | None = None) -> Path:
    """A local folder holding the manifest's weights: their own folder, or a download of weights
    that live in S3 into ``cache_dir``; by default a folder in the pod's workspace volume when
    it has one (``$CONDUCTOR_WORKDIR``: a 7B model does not fit a container's own disk), named
    after the weights' URI, else a temporary folder.

    The name is the same on every try of a task: the stage config records the path (its
    ``init_from``), and a retried or resumed stage logs its params to the MLflow run the first
    try opened, which refuses a changed value. A download overwrites whatever a killed try left.
    """
    import hashlib
    import os

    remote = not Path(manifest.weights_uri).is_dir()
    if cache_dir is None and remote and os.environ.get(WORKDIR_ENV):
        digest = hashlib.sha256(manifest.weights_uri.encode()).hexdigest()[:16]
        cache_dir = Path(local_workdir("models")) / f"model-{digest}"
    return registry.load_model_dir(manifest.weights_uri, cache_dir)
