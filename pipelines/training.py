"""The training pipeline: curate -> validate -> base -> adaptive -> recursive -> evaluation shards
-> aggregate -> register."""

from typing import Any

from kfp import dsl

from components.check_params import check_params
from components.curate import curate
from components.register import register
from components.train import train
from components.validate import validate
from pipelines.kubernetes import apply_pod_settings, side_effects
from pipelines.sharded import sharded_evaluation

NAME = "conductor-training"
DEFAULT_EVAL_PARALLELISM = 4


def build(settings: Any = None, eval_parallelism: int = DEFAULT_EVAL_PARALLELISM) -> Any:
    """The training pipeline, with the cluster settings (GPU pods for training, CPU pods for the
    rest; default: the bundled ones) and the evaluation's parallelism, which KFP fixes when the
    pipeline is compiled."""
    from conductor_core.cluster.settings import load_cluster_settings

    cluster = settings or load_cluster_settings()

    @dsl.pipeline(name=NAME, description=__doc__.splitlines()[0])
    def training(
        profile: str = "tiny",
        curation_config: str = "pipeline",
        pool: str = "bundled",
        base_steps: int = 0,
        adaptive_steps: int = 0,
        recursive_steps: int = 0,
        warmup_steps: int = 0,
        launcher: str = "pod",
        artifact_root: str = "",
        tracking_uri: str = "",
        eval_benchmark: str = "held-out",
        eval_split: str = "test",
        eval_limit: int = 0,
        baselines: str = "single,moa",
        eval_shards: int = 2,
        model_name: str = "conductor",
        alias: str = "champion",
        register_metric: str = "accuracy",
    ) -> None:
        """Train a Conductor and compare it with the best single worker and MoA.

        Args:
            profile: Training profile: `tiny` (a tiny model on CPU, minutes) or `paper` (the
                paper's 7B recipe on GPUs).
            curation_config: Curation config: a YAML path in the image or a bundled name
                (`pipeline`: the bundled synthetic problems the simulated pool knows).
            pool: Worker pool YAML (path in the image), or `bundled` for the simulated pool.
            base_steps: GRPO steps of the base stage; 0 keeps the profile's.
            adaptive_steps: Steps of the adaptive-pool fine-tune; 0 keeps the profile's.
            recursive_steps: Steps of the recursive fine-tune; 0 keeps the profile's.
            warmup_steps: Steps of the format warm-up before a stage that has one (the tiny
                profile's base stage); 0 keeps the profile's.
            launcher: Where training runs: `pod` (this task's GPU pod) or `trainjob` (a
                Kubeflow Trainer TrainJob across nodes).
            artifact_root: Where checkpoints, models and reports go: `s3://bucket/prefix` or a
                folder; empty uses $CONDUCTOR_ARTIFACT_ROOT, else ./runs/pipelines.
            tracking_uri: MLflow tracking URI; empty uses $MLFLOW_TRACKING_URI.
            eval_benchmark: Evaluation set: `held-out` (the bundled problems' test split), a
                benchmark name, or a problem file.
            eval_split: Split of the evaluation set to use (empty: the loader's default).
            eval_limit: Evaluate only the first N problems; 0 evaluates all.
            baselines: Baselines compared with the Conductor (comma-separated specs such as
                `single` (every worker alone), `moa`, `sc:0:5`).
            eval_shards: Shards the evaluation is split into (each a task).
            model_name: Registered model name in MLflow.
            alias: Registry alias moved to the new version when it beats the current one.
            register_metric: Metric that decides the promotion: `accuracy`,
                `cost_per_question` or `calls_per_question` (lower wins for the last two).
        """
        run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER
        checked = check_params(
            profile=profile,
            launcher=launcher,
            register_metric=register_metric,
            baselines=baselines,
            pool=pool,
            curation_config=curation_config,
            eval_shards=eval_shards,
            eval_parallelism=eval_parallelism,
            base_steps=base_steps,
            adaptive_steps=adaptive_steps,
            recursive_steps=recursive_steps,
            warmup_steps=warmup_steps,
        ).set_display_name("check parameters")
        tracked = {"run_id": run_id, "pipeline": NAME, "tracking_uri": tracking_uri}
        data = curate(curation_config=curation_config, **tracked).after(checked)
        gate = validate(dataset=data.outputs["dataset"], **tracked).set_display_name(
            "validate data"
        )
        for cpu_task in (checked, data, gate):
            apply_pod_settings(cpu_task, cluster.cpu)

        model = None
        for stage, steps in (
            ("base", base_steps),
            ("adaptive", adaptive_steps),
            ("recursive", recursive_steps),
        ):
            inputs = {"init": model.outputs["model"]} if model is not None else {}
            task = train(
                stage=stage,
                profile=profile,
                dataset=data.outputs["dataset"],
                pool=pool,
                steps=steps,
                warmup_steps=warmup_steps,
                launcher=launcher,
                artifact_root=artifact_root,
                task_id=dsl.PIPELINE_TASK_ID_PLACEHOLDER,
                **tracked,
                **inputs,
            ).set_display_name(f"train {stage}")
            task.after(gate)
            apply_pod_settings(side_effects(task), cluster.gpu)
            model = task

        report = sharded_evaluation(
            eval_shards,
            eval_parallelism,
            cluster.cpu,
            {
                "title": "Trained Conductor vs baselines (held-out)",
                "params": {"profile": profile, "pool": pool, "benchmark": eval_benchmark},
                **tracked,
            },
            after=checked,
            benchmark=eval_benchmark,
            split=eval_split,
            model=model.outputs["model"],
            baselines=baselines,
            pool=pool,
            limit=eval_limit,
        )
        registered = register(
            model=model.outputs["model"],
            comparison=report.outputs["comparison"],
            model_name=model_name,
            alias=alias,
            metric=register_metric,
            **tracked,
        ).set_display_name("register")
        apply_pod_settings(side_effects(registered), cluster.cpu)

    return training


training = build()
