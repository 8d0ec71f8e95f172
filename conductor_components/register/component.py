"""Register the trained model; promote it only when it beats the champion."""

from kfp import dsl
from kfp.dsl import Artifact, Input, Model, Output

from conductor_components._settings import COMPONENT_OPTIONS, TRAIN_IMAGE, variant


@dsl.component(**COMPONENT_OPTIONS)
def register(
    model: Input[Model],
    comparison: Input[Artifact],
    registered: Output[Model],
    model_name: str = "conductor",
    alias: str = "champion",
    metric: str = "accuracy",
    tracking_uri: str = "",
    run_id: str = "",
    pipeline: str = "conductor-training",
) -> str:
    """Register the trained Conductor as a new version of `model_name` in MLflow and move
    `alias` to it only when it beats the alias's current version on `metric` (from the
    evaluation); says which happened and why. Returns that sentence."""
    from pathlib import Path

    from conductor_core.pipeline_steps.register_step import register_step

    decision = register_step(
        model_manifest=model.path,
        comparison_file=Path(comparison.path) / "comparison.json",
        name=model_name,
        alias=alias,
        metric=metric,
        tracking_uri=tracking_uri or None,
        out_manifest=registered.path,
        run_id=run_id,
        pipeline=pipeline,
    )
    registered.metadata.update(
        {"version": decision["version"], "promoted": decision["promoted"], "alias": alias}
    )
    return decision["reason"]


register_gpu = variant(register, TRAIN_IMAGE, "register-gpu")
"""``register`` on the CUDA train image: registering a GPU profile's model (it loads it)."""
