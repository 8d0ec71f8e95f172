"""One GRPO training stage (base, adaptive pool, recursive)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from components._settings import TRAIN_IMAGE


@dsl.component(base_image=TRAIN_IMAGE, install_kfp_package=False)
def train(
    stage: str,
    profile: str,
    dataset: Input[Dataset],
    run_id: str,
    model: Output[Model],
    init: Input[Model] = None,
    pool: str = "bundled",
    steps: int = 0,
    warmup_steps: int = 0,
    launcher: str = "pod",
    artifact_root: str = "",
    tracking_uri: str = "",
    task_id: str = "",
    pipeline: str = "conductor-training",
) -> str:
    """Train one GRPO stage of the Conductor (`base`, `adaptive` or `recursive`) from `init`
    (the previous stage's model; none for base) on the dataset's train split. Checkpoints and
    the final weights go to `<artifact_root>/<run_id>/<stage>` (a local folder or S3), so a
    retried task resumes from its last checkpoint. `launcher`: `pod` trains in this task's pod;
    `trainjob` runs a Kubeflow Trainer TrainJob across nodes and waits for it. The output Model
    is a manifest: where the weights are, the MLflow run, the prompt style."""
    from conductor_core.pipeline.train_steps import train_step

    manifest = train_step(
        stage=stage,
        profile=profile,
        dataset_dir=dataset.path,
        run_id=run_id,
        manifest_path=model.path,
        pool=pool,
        init_manifest=init.path if init is not None else None,
        steps=steps,
        warmup_steps=warmup_steps,
        launcher=launcher,
        task_id=task_id,
        pipeline=pipeline,
        root=artifact_root,
        tracking_uri=tracking_uri or None,
    )
    model.metadata.update(
        {"stage": stage, "weights": manifest.weights_uri, "steps": manifest.steps}
    )
    return manifest.weights_uri
