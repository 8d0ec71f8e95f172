"""Lineage in MLflow: the dataset a run trained on (an MLflow dataset input with a digest of its
content) and the tags of a registered model version (git commit, KFP run, training profile,
dataset digest).

``mlflow`` is imported on first use.

- :func:`content_digest`: a digest of records (JSON-like mappings) that depends on their content
  and order only, not on the file format, the path or the time: the same curated problems give
  the same digest in every run.
- :func:`log_dataset_input`: the dataset as an input of the active run (a meta dataset: its
  source and digest; no rows are uploaded).
- :func:`set_version_tags`: tags on a registered model version, scrubbed like every tag.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from conductor_core.track.mlflow_run import configure, mlflow_module, restores_tracking_uri
from conductor_core.track.pipeline_runs import TAG_GIT_COMMIT, TAG_KFP_RUN_ID
from conductor_core.track.scrub import is_secret_key, scrub_value, secret_values

DIGEST_CHARS = 32
"""Hex characters of a dataset digest (MLflow stores at most 36)."""

TAG_DATASET_DIGEST = "conductor.dataset_digest"
TAG_TRAINING_PROFILE = "conductor.training_profile"
TAG_TRAINING_STAGE = "conductor.training_stage"
TAG_TRAINING_RUN = "conductor.training_run_id"
"""Model version tags (with ``conductor.git_commit`` and ``conductor.kfp_run_id``)."""


def content_digest(records: Iterable[Mapping[str, Any]]) -> str:
    """SHA-256 (first :data:`DIGEST_CHARS` hex characters) of ``records`` as canonical JSON
    lines (keys sorted), in their order."""
    digest = hashlib.sha256()
    for record in records:
        line = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
        digest.update(line.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()[:DIGEST_CHARS]


def _clean(tags: Mapping[str, Any] | None) -> dict[str, str]:
    """Tags stringified and scrubbed; keys that look like secrets and empty values dropped."""
    secrets = secret_values()
    return {
        str(k): scrub_value(str(v), secrets)
        for k, v in (tags or {}).items()
        if v not in (None, "") and not is_secret_key(str(k))
    }


def log_dataset_input(
    source: str,
    digest: str,
    *,
    name: str,
    context: str = "training",
    tags: Mapping[str, Any] | None = None,
) -> None:
    """Log the dataset at ``source`` (a local path or an ``s3://`` URI) with ``digest`` as an
    input of the active run, in ``context`` (MLflow's ``mlflow.data.context`` tag); ``tags`` go
    on the input (scrubbed). Logging the same dataset again (a resumed run) changes nothing."""
    mlflow = mlflow_module()
    from mlflow.data.dataset_source_registry import resolve_dataset_source
    from mlflow.data.meta_dataset import MetaDataset

    secrets = secret_values()
    with warnings.catch_warnings():  # a local path matches two of MLflow's source kinds
        warnings.simplefilter("ignore", UserWarning)
        resolved = resolve_dataset_source(scrub_value(source, secrets))
    dataset = MetaDataset(
        source=resolved,
        name=scrub_value(name, secrets),
        digest=digest,
    )
    mlflow.log_input(dataset, context=context, tags=_clean(tags) or None)


@restores_tracking_uri
def set_version_tags(
    name: str, version: str, tags: Mapping[str, Any], *, uri: str | None = None
) -> dict[str, str]:
    """Set ``tags`` on version ``version`` of the registered model ``name`` (stringified and
    scrubbed; empty values and secret-looking keys skipped); returns what was set."""
    client = configure(uri).MlflowClient()
    clean = _clean(tags)
    for key, value in clean.items():
        client.set_model_version_tag(name, version, key, value)
    return clean


@restores_tracking_uri
def run_lineage(run_id: str, *, uri: str | None = None) -> dict[str, str]:
    """What a training run records of its lineage: ``git_commit``, ``kfp_run_id``, ``profile``
    (its param) and ``dataset_digest`` (its training dataset input); missing ones are left
    out."""
    run = configure(uri).MlflowClient().get_run(run_id)
    found = {
        "git_commit": run.data.tags.get(TAG_GIT_COMMIT),
        "kfp_run_id": run.data.tags.get(TAG_KFP_RUN_ID),
        "profile": run.data.params.get("profile"),
    }
    for item in getattr(run.inputs, "dataset_inputs", None) or []:
        contexts = {t.key: t.value for t in item.tags or []}
        if contexts.get("mlflow.data.context") == "training":
            found["dataset_digest"] = item.dataset.digest
    return {k: v for k, v in found.items() if v}


__all__ = [
    "DIGEST_CHARS",
    "TAG_DATASET_DIGEST",
    "TAG_TRAINING_PROFILE",
    "TAG_TRAINING_RUN",
    "TAG_TRAINING_STAGE",
    "content_digest",
    "log_dataset_input",
    "run_lineage",
    "set_version_tags",
]
