"""The training pipeline: curate -> validate -> base -> adaptive -> recursive -> evaluation shards
-> aggregate -> register.

Resources follow the launcher and the profile's placement, chosen at run time with ``dsl.If``/
``Elif``/``Else`` on the run's ``launcher`` and the parameter check's ``placement`` output (the
profile's training config's device; each branch a task the UI shows under its condition): a
stage trains in a CPU pod on the base image for a CPU profile (``device: cpu``: ``tiny``,
``small``), in a GPU pod on the train image for a GPU profile (``paper``), or, with
``launcher=trainjob``, from a small CPU pod that launches and watches a TrainJob; ``dsl.OneOf``
hands the branch's model to the next stage. Evaluation and registration load the model: on CPU
pods for a CPU profile, on GPU pods with the workspace volume for a GPU one. An exit handler
closes the run's MLflow parent run with the pipeline's final state, whatever happened before it.
"""

from typing import Any

from kfp import dsl

from conductor_components.check_params import check_params
from conductor_components.close_run import close_run
from conductor_components.curate import curate
from conductor_components.gate import gate as data_gate
from conductor_components.register import register, register_gpu
from conductor_components.train import train, train_gpu, train_launcher
from conductor_components.validate import validate
from conductor_pipelines.describe import ui_description
from conductor_pipelines.kubernetes import (
    apply_pod_settings,
    apply_sandbox,
    expose_pod_identity,
    retried,
    side_effects,
)
from conductor_pipelines.sharded import sharded_evaluation

NAME = "conductor-training"
DEFAULT_EVAL_PARALLELISM = 4
TRAINJOB = "trainjob"
"""The ``launcher`` value that trains in a Kubeflow Trainer TrainJob."""
CPU = "cpu"
"""The parameter check's ``placement`` of a profile that trains, is evaluated and is registered
on CPU pods (its training config says ``device: cpu``); the other value, ``gpu``, gets GPU pods."""


def train_stage(cluster: Any, stage: str, *, after: Any, placement: Any, **args: Any) -> Any:
    """One training stage as three tasks of which the run's parameters pick one (each retried,
    never cached, after task ``after``): ``launcher=trainjob``: ``train-launcher`` in a
    ``cluster.launcher`` pod, with the compile-time cluster settings as JSON to build the
    TrainJob from; else, where ``placement`` (the parameter check's output) is ``cpu``:
    ``train`` in a ``cluster.cpu_train`` pod (base image); else ``train-gpu`` in a
    ``cluster.gpu`` pod (train image). ``args`` go to each task (they include ``profile`` and
    ``launcher``). Returns the stage's model, ``dsl.OneOf`` of the three."""
    launcher = args["launcher"]
    common = {"stage": stage, "task_id": dsl.PIPELINE_TASK_ID_PLACEHOLDER, **args}
    with dsl.If(launcher == TRAINJOB, name=f"train {stage} as a TrainJob"):
        launched = train_launcher(cluster_settings=cluster.model_dump_json(), **common)
        apply_pod_settings(expose_pod_identity(launched), cluster.launcher)
    with dsl.Elif(placement == CPU, name=f"train {stage} on CPU"):
        on_cpu = train(**common)
        apply_sandbox(apply_pod_settings(on_cpu, cluster.cpu_train), cluster.cpu_train)
    with dsl.Else(name=f"train {stage} on GPUs"):
        on_gpu = train_gpu(**common)
        apply_sandbox(apply_pod_settings(on_gpu, cluster.gpu), cluster.gpu)
    for task in (launched, on_cpu, on_gpu):
        side_effects(retried(task.set_display_name(f"train {stage}").after(after)))
    return dsl.OneOf(launched.outputs["model"], on_cpu.outputs["model"], on_gpu.outputs["model"])


def build(settings: Any = None, eval_parallelism: int = DEFAULT_EVAL_PARALLELISM) -> Any:
    """The training pipeline, with the cluster settings (the pods of each kind of task, and the
    TrainJob's, which reach the launcher task as JSON; default: the bundled ones) and the
    evaluation's parallelism, both fixed when the pipeline is compiled."""
    from conductor_core.cluster.runtime import runtime_reference
    from conductor_core.cluster.settings import load_cluster_settings

    cluster = settings or load_cluster_settings()

    @dsl.pipeline(name=NAME, description=ui_description(__doc__))
    def training(
        profile: str = "tiny",
        curation_config: str = "pipeline",
        pool: str = "bundled",
        base_steps: int = 0,
        adaptive_steps: int = 0,
        recursive_steps: int = 0,
        warmup_steps: int = 0,
        expert_start_steps: int = 0,
        seed: int = -1,
        launcher: str = "pod",
        artifact_root: str = cluster.artifact_root or "",  # the UI shows the default
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
            profile: Training profile: `tiny` (a tiny random model on CPU, minutes), `small`
                (the paper's recipe in miniature: SmolLM2-135M-Instruct with LoRA on CPU) or
                `paper` (the paper's 7B recipe on GPUs). Tasks run on CPU or GPU pods as the
                profile's training config's `device` says.
            curation_config: Curation config: a YAML path in the image or a bundled name
                (`pipeline`: the bundled synthetic problems the simulated pool knows).
            pool: Worker pool YAML (path in the image), or `bundled` for the simulated pool
                (the paper profile refuses a simulated pool; tiny and small train on it).
            base_steps: GRPO steps of the base stage; 0 keeps the profile's.
            adaptive_steps: Steps of the adaptive-pool fine-tune; 0 keeps the profile's.
            recursive_steps: Steps of the recursive fine-tune; 0 keeps the profile's.
            warmup_steps: Steps of the format warm-up before a stage that has one (the tiny
                profile's base stage); 0 keeps the profile's.
            expert_start_steps: Steps of the expert start before a stage that has one (the tiny
                profile's recursive stage: imitating the better of keeping and a new plan); 0
                keeps the profile's.
            seed: Training seed of every stage (data order, sampling, and the initial weights
                of the tiny profile's random model); -1 keeps the profile's.
            launcher: Where training runs: `pod` (the task's own pod: CPU for a profile whose
                device is `cpu`, GPU otherwise) or `trainjob` (a Kubeflow Trainer TrainJob
                across GPU nodes, launched and watched from a small CPU pod).
            artifact_root: Where checkpoints, models and reports go: `s3://bucket/prefix` (pods
                share no disk) or a folder on a volume the cluster settings declare shared;
                defaults to the cluster settings' artifact_root the pipeline was compiled
                with; empty: $CONDUCTOR_ARTIFACT_ROOT, else ./runs/pipelines (a local run).
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
        tracked = {"run_id": run_id, "pipeline": NAME, "tracking_uri": tracking_uri}
        # Runs last, whatever happened inside the handler: ends the MLflow parent run with
        # the pipeline's final state.
        closing = close_run(**tracked).set_display_name("close MLflow run")
        apply_pod_settings(side_effects(closing), cluster.cpu)
        with dsl.ExitHandler(closing, name="training run"):
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
                expert_start_steps=expert_start_steps,
                seed=seed,
                artifact_root=artifact_root,
                default_artifact_root=cluster.artifact_root or "",
                shared_paths=list(cluster.shared_paths),
                s3_secret=cluster.s3_secret() or "",
                trainjob_runtime=runtime_reference(cluster),
                namespace=cluster.namespace or "",
                eval_benchmark=eval_benchmark,
            ).set_display_name("check parameters")
            data = curate(curation_config=curation_config, **tracked).after(checked)
            validated = validate(dataset=data.outputs["dataset"], **tracked).set_display_name(
                "validate data"
            )
            gate = data_gate(
                passed=validated.outputs["passed"], reason=validated.outputs["reason"]
            ).set_display_name("data gate")
            for cpu_task in (checked, data, validated, gate):
                apply_pod_settings(cpu_task, cluster.cpu)
            # the check tries the code sandbox as the GPU graders get it (their isolation and,
            # through the admission policy keyed on this label, their pod fields)
            apply_sandbox(checked, cluster.gpu)
            placement = checked.outputs["placement"]

            train_args = {
                "profile": profile,
                "dataset": data.outputs["dataset"],
                "pool": pool,
                "warmup_steps": warmup_steps,
                "expert_start_steps": expert_start_steps,
                "seed": seed,
                "launcher": launcher,
                "artifact_root": artifact_root,
                **tracked,
            }
            model = None
            for stage, steps in (
                ("base", base_steps),
                ("adaptive", adaptive_steps),
                ("recursive", recursive_steps),
            ):
                init = {"init": model} if model is not None else {}
                model = train_stage(
                    cluster,
                    stage,
                    after=gate,
                    placement=placement,
                    steps=steps,
                    **train_args,
                    **init,
                )

            evaluate = {
                "count": eval_shards,
                "parallelism": eval_parallelism,
                "aggregate_args": {
                    "title": "Trained Conductor vs baselines (held-out)",
                    "params": {"profile": profile, "pool": pool, "benchmark": eval_benchmark},
                    **tracked,
                },
                "after": checked,
                "benchmark": eval_benchmark,
                "split": eval_split,
                "model": model,
                "baselines": baselines,
                "pool": pool,
                "limit": eval_limit,
            }
            registration = {
                "model": model,
                "model_name": model_name,
                "alias": alias,
                "metric": register_metric,
                **tracked,
            }
            with dsl.If(placement == CPU, name="evaluate and register on CPU"):
                report = sharded_evaluation(pod=cluster.cpu, **evaluate)
                registered = register(comparison=report.outputs["comparison"], **registration)
                apply_pod_settings(
                    side_effects(registered.set_display_name("register")), cluster.cpu
                )
            with dsl.Else(name="evaluate and register on GPUs"):
                report = sharded_evaluation(pod=cluster.cpu, gpu_pod=cluster.gpu_eval, **evaluate)
                registered = register_gpu(comparison=report.outputs["comparison"], **registration)
                registered.set_display_name("register")
                apply_pod_settings(side_effects(registered), cluster.gpu_eval)

    return training
