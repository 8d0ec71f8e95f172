"""Resolve a registry alias to the model version it points at now (run uncached), and where the
evaluation runs."""

from typing import NamedTuple

from kfp import dsl

from conductor_components._settings import COMPONENT_OPTIONS


@dsl.component(**COMPONENT_OPTIONS)
def resolve_model(conductor: str, profile: str = "tiny", tracking_uri: str = "") -> NamedTuple(
    "Outputs", [("conductor", str), ("placement", str)]
):
    """Resolve the Conductor to evaluate: a registered model's alias (`models:/NAME@ALIAS`)
    becomes the version it points at now (`models:/NAME/VERSION`); any other model URI, URL or
    `scripted` passes as it is. The pipeline runs this task uncached and hands the version on,
    so that the cached evaluation tasks after it never answer a moved alias from cache. Also
    returns the placement of `profile`, the profile the model was trained with (`cpu` or
    `gpu`: its training config's device), which the pipeline's branches follow."""
    from collections import namedtuple

    from conductor_core.pipeline_steps.eval_steps import evaluation_target

    outputs = namedtuple("Outputs", ["conductor", "placement"])
    return outputs(*evaluation_target(conductor, profile, tracking_uri=tracking_uri or None))
