"""The registration step: a new model version, promoted only when it beats the champion."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conductor_core.errors import ConductorError
from conductor_core.pipeline_steps.context import TRAINING_PIPELINE, Log, log_stage, print_line
from conductor_core.pipeline_steps.manifest import local_weights, read_manifest
from conductor_core.track.lineage import (
    TAG_DATASET_DIGEST,
    TAG_TRAINING_PROFILE,
    TAG_TRAINING_RUN,
    TAG_TRAINING_STAGE,
    run_lineage,
    set_version_tags,
)
from conductor_core.track.pipeline_runs import TAG_GIT_COMMIT, TAG_KFP_RUN_ID, git_commit
from conductor_core.track.registry import promote_if_better


def register_step(
    *,
    model_manifest: str | Path,
    comparison_file: str | Path,
    name: str,
    alias: str = "champion",
    metric: str = "accuracy",
    tracking_uri: str | None = None,
    out_manifest: str | Path | None = None,
    run_id: str = "",
    pipeline: str = TRAINING_PIPELINE,
    log: Log = print_line,
) -> dict[str, Any]:
    """Register the trained model and move ``alias`` to it only when it beats the model the
    alias points at now on ``metric`` (of the comparison). Says what it did either way.

    The candidate's score is the Conductor's row of ``comparison_file``; the champion's score is
    the ``conductor.<metric>`` tag set on its version when it was promoted. The new version is
    tagged with its lineage (:func:`version_lineage`). Returns
    ``{"promoted", "version", "score", "champion_score", "reason"}``.
    """
    table = json.loads(Path(comparison_file).read_text(encoding="utf-8"))
    row = next((r for r in table["rows"] if r["label"] == "trained Conductor"), None)
    if row is None or metric not in row:
        raise ConductorError(
            f"register: the comparison holds no trained Conductor row with {metric!r}"
        )
    manifest = read_manifest(model_manifest)
    weights = local_weights(manifest)
    decision = promote_if_better(
        weights,
        name,
        alias,
        metric=metric,
        score=float(row[metric]),
        higher_is_better=metric == "accuracy",
        run_id=manifest.run_id,
        uri=tracking_uri,
    )

    set_version_tags(
        name, decision["version"], version_lineage(manifest, run_id, tracking_uri), uri=tracking_uri
    )
    log(decision["reason"])
    log_stage(
        run_id,
        pipeline,
        "register",
        params={"model_name": name, "alias": alias, "metric": metric},
        metrics={"promoted": float(decision["promoted"]), "score": decision["score"]},
        tracking_uri=tracking_uri,
    )
    if out_manifest:
        manifest.registered_model = name
        manifest.model_version = decision["version"]
        manifest.write(out_manifest)
    return decision


def version_lineage(manifest: Any, kfp_run_id: str, tracking_uri: str | None) -> dict[str, str]:
    """The tags of a registered version: where it came from.

    ``conductor.git_commit`` (the training run's, else this code's), ``conductor.kfp_run_id``
    (``kfp_run_id``, else the training run's), ``conductor.training_profile`` and
    ``conductor.dataset_digest`` (the manifest's, else the training run's param and dataset
    input), ``conductor.training_stage`` and ``conductor.training_run_id``. Unknown ones are left
    out."""
    run: dict[str, str] = {}
    if manifest.run_id:
        try:
            run = run_lineage(manifest.run_id, uri=tracking_uri)
        except Exception as exc:  # a training run in another store: the manifest still tells
            print_line(f"register: could not read the training run {manifest.run_id}: {exc}")
    tags = {
        TAG_GIT_COMMIT: run.get("git_commit") or git_commit(),
        TAG_KFP_RUN_ID: kfp_run_id or run.get("kfp_run_id"),
        TAG_TRAINING_PROFILE: manifest.profile or run.get("profile"),
        TAG_DATASET_DIGEST: manifest.dataset_digest or run.get("dataset_digest"),
        TAG_TRAINING_STAGE: manifest.stage,
        TAG_TRAINING_RUN: manifest.run_id,
    }
    return {k: v for k, v in tags.items() if v}
