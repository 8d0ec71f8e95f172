"""The curation pipeline: the data stage alone (curate, validate with Great Expectations, gate)."""

from typing import Any

from kfp import dsl

from conductor_components.curate import curate
from conductor_components.gate import gate as data_gate
from conductor_components.validate import validate
from conductor_pipelines.describe import ui_description
from conductor_pipelines.kubernetes import apply_pod_settings

NAME = "conductor-curation"


def build(settings: Any = None) -> Any:
    """The curation pipeline with the cluster settings (CPU pods)."""
    from conductor_core.cluster.settings import load_cluster_settings

    cluster = settings or load_cluster_settings()

    @dsl.pipeline(name=NAME, description=ui_description(__doc__))
    def curation(curation_config: str = "pipeline") -> None:
        """Curate a training dataset and validate it.

        Args:
            curation_config: Curation config: a YAML path in the image or a bundled name
                (`pipeline`, `example`).
        """
        data = curate(curation_config=curation_config)
        validated = validate(dataset=data.outputs["dataset"]).set_display_name("validate data")
        gate = data_gate(
            passed=validated.outputs["passed"], reason=validated.outputs["reason"]
        ).set_display_name("data gate")
        for task in (data, validated, gate):
            apply_pod_settings(task, cluster.cpu)

    return curation
