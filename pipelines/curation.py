"""The curation pipeline: the data stage alone (curate, then the Great Expectations gate)."""

from typing import Any

from kfp import dsl

from components.curate import curate
from components.validate import validate
from pipelines.kubernetes import apply_pod_settings

NAME = "conductor-curation"


def build(settings: Any = None) -> Any:
    """The curation pipeline with the cluster settings (CPU pods)."""
    from conductor_core.cluster.settings import load_cluster_settings

    cluster = settings or load_cluster_settings()

    @dsl.pipeline(name=NAME, description=__doc__.splitlines()[0])
    def curation(curation_config: str = "pipeline") -> None:
        """Curate a training dataset and validate it.

        Args:
            curation_config: Curation config: a YAML path in the image or a bundled name
                (`pipeline`, `example`).
        """
        data = curate(curation_config=curation_config)
        gate = validate(dataset=data.outputs["dataset"]).set_display_name("validate data")
        for task in (data, gate):
            apply_pod_settings(task, cluster.cpu)

    return curation


curation = build()
