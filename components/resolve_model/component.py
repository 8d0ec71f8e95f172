"""Resolve a registry alias to the model version it points at now (run uncached)."""

from kfp import dsl

from components._settings import COMPONENT_OPTIONS


@dsl.component(**COMPONENT_OPTIONS)
def resolve_model(conductor: str, tracking_uri: str = "") -> str:
    """Resolve the Conductor to evaluate: a registered model's alias (`models:/NAME@ALIAS`)
    becomes the version it points at now (`models:/NAME/VERSION`); any other model URI, URL or
    `scripted` passes as it is. The pipeline runs this task uncached and hands the version on,
    so that the cached evaluation tasks after it never answer a moved alias from cache."""
    from conductor_core.pipeline_tasks.eval_steps import resolve_conductor_step

    return resolve_conductor_step(conductor, tracking_uri=tracking_uri or None)
