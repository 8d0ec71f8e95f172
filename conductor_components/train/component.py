"""One GRPO training stage (base, adaptive pool, recursive), as three components of one function:
``train`` (CPU profiles, base image), ``train-gpu`` (GPU profiles, CUDA train image) and
``train-launcher`` (``launcher=trainjob``: creates and watches a TrainJob from a small CPU pod on
the base image). The pipeline picks one per stage with ``dsl.If``/``Elif``/``Else``."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from conductor_components._settings import BASE_IMAGE, COMPONENT_OPTIONS, TRAIN_IMAGE, variant


@dsl.component(**COMPONENT_OPTIONS)
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
    expert_start_steps: int = 0,
    seed: int = -1,
    launcher: str = "pod",
    artifact_root: str = "",
    tracking_uri: str = "",
    task_id: str = "",
    pipeline: str = "conductor-training",
    cluster_settings: str = "",
) -> str:
    """Train one GRPO stage of the Conductor (`base`, `adaptive` or `recursive`) from `init`
    (the previous stage's model; none for base) on the dataset's train split, with training seed
    `seed` (-1: the profile's). Checkpoints and the final weights go to
    `<artifact_root>/<run_id>/<stage>` (a local folder or S3), so a retried task resumes from its
    last checkpoint. `launcher`: `pod` trains in this task's pod;
    `trainjob` runs a Kubeflow Trainer TrainJob across nodes and waits for it, built from
    `cluster_settings` (the cluster settings the pipeline was compiled with, as JSON). The output
    Model is a manifest: where the weights are, the MLflow run, the prompt style."""
    from conductor_core.pipeline_steps.train_steps import train_step

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
        expert_start_steps=expert_start_steps,
        seed=seed if seed >= 0 else None,
        launcher=launcher,
        task_id=task_id,
        pipeline=pipeline,
        root=artifact_root,
        tracking_uri=tracking_uri or None,
        cluster_settings=cluster_settings or None,
    )
    model.metadata.update(
        {"stage": stage, "weights": manifest.weights_uri, "steps": manifest.steps}
    )
    return manifest.weights_uri


train_gpu = variant(train, TRAIN_IMAGE, "train-gpu")
"""``train`` on the CUDA train image: training tasks of GPU profiles (``paper``)."""
train_launcher = variant(train, BASE_IMAGE, "train-launcher")
"""``train`` on the base image, for ``launcher=trainjob``: the task only launches and watches."""
