"""The evaluation pipeline: a registered Conductor (alias or URI) and chosen baselines on a
benchmark, sharded, then aggregated into one report.

An alias (``models:/NAME@ALIAS``) is resolved to its current version by an uncached task first;
the evaluation tasks after it are cached on that version, so that a moved alias is evaluated
afresh and an unchanged one is not evaluated twice. The same task reads the placement of the
``profile`` the model was trained with: a CPU profile's model is evaluated on CPU pods, a GPU
profile's (``paper``) on GPU pods on the train image, as the training pipeline does."""

from typing import Any

from kfp import dsl

from conductor_components.resolve_model import resolve_model
from conductor_pipelines.describe import ui_description
from conductor_pipelines.kubernetes import apply_pod_settings
from conductor_pipelines.sharded import sharded_evaluation

NAME = "conductor-evaluation"
DEFAULT_EVAL_PARALLELISM = 4


def build(settings: Any = None, eval_parallelism: int = DEFAULT_EVAL_PARALLELISM) -> Any:
    """The evaluation pipeline with the cluster settings (the CPU pods, and the GPU pods of a
    GPU profile's shards) and the parallelism of its shards (fixed when compiled)."""
    from conductor_core.cluster.settings import load_cluster_settings

    cluster = settings or load_cluster_settings()
    on_cpu = version_pipeline("evaluate-model-version", cluster, eval_parallelism)
    on_gpu = version_pipeline("evaluate-model-version-on-gpus", cluster, eval_parallelism, True)

    @dsl.pipeline(name=NAME, description=ui_description(__doc__))
    def evaluation(
        conductor: str = "models:/conductor@champion",
        profile: str = "tiny",
        benchmark: str = "held-out",
        split: str = "test",
        limit: int = 0,
        baselines: str = "single,moa",
        pool: str = "bundled",
        repeats: int = 1,
        rounds: int = 1,
        shards: int = 2,
    ) -> None:
        """Evaluate a Conductor and baselines on a benchmark.

        Args:
            conductor: The Conductor: a registered model (`models:/NAME@ALIAS`, evaluated as
                the version the alias points at when the run starts), a model URI
                (`runs:/...`, `s3://...`), an OpenAI-compatible URL, or `scripted`; empty
                evaluates the baselines only.
            profile: The training profile of the Conductor's model (`tiny`, `small`, `paper`):
                a GPU profile's model is evaluated on GPU pods, others on CPU pods.
            benchmark: `held-out` (the bundled problems' test split), a benchmark name (see
                `conductor tasks list`), or a problem file in the image.
            split: Split of the benchmark (empty: the loader's default).
            limit: Evaluate only the first N problems; 0 evaluates all.
            baselines: Comma-separated baseline specs (`single`, `single:W`, `moa`, `sc:W:N`,
                `reflect:W:N`, `random`, `frontier:W`).
            pool: Worker pool YAML in the image, or `bundled` for the simulated pool.
            repeats: Runs per problem and method (standard errors over repeats).
            rounds: Most Conductor rounds per question (recursion).
            shards: Shards the evaluation is split into (each a task).
        """
        # Never cached: an alias moves, and the cached shards after it key on the version.
        resolved = resolve_model(conductor=conductor, profile=profile)
        resolved.set_display_name("resolve model version")
        resolved.set_caching_options(enable_caching=False)
        apply_pod_settings(resolved, cluster.cpu)
        args = {
            "conductor": resolved.outputs["conductor"],
            "benchmark": benchmark,
            "split": split,
            "limit": limit,
            "baselines": baselines,
            "pool": pool,
            "repeats": repeats,
            "rounds": rounds,
            "shards": shards,
        }
        with dsl.If(resolved.outputs["placement"] == "cpu", name="evaluate on CPU"):
            on_cpu(**args).set_display_name("evaluate the resolved version")
        with dsl.Else(name="evaluate on GPUs"):
            on_gpu(**args).set_display_name("evaluate the resolved version on GPUs")

    return evaluation


def version_pipeline(name: str, cluster: Any, parallelism: int, gpu: bool = False) -> Any:
    """The sub-pipeline ``name``: the sharded evaluation of one concrete Conductor (a model
    version, not an alias), on CPU pods, or with ``gpu`` its shards on the settings' GPU
    evaluation pods (``gpu_eval``: a GPU profile's model)."""

    @dsl.pipeline(name=name)
    def evaluate_version(
        conductor: str,
        benchmark: str,
        split: str,
        limit: int,
        baselines: str,
        pool: str,
        repeats: int,
        rounds: int,
        shards: int,
    ) -> None:
        """The sharded evaluation of one concrete Conductor (a model version, not an alias).

        A sub-pipeline, so that the resolved version reaches the shards as an input of their
        DAG: KFP's local runner (2.17) replaces every task output a ParallelFor takes, other
        than its items, with the loop item.
        """
        sharded_evaluation(
            shards,
            parallelism,
            cluster.cpu,
            {
                "title": "Evaluation",
                "run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                "pipeline": NAME,
                "params": {"conductor": conductor, "pool": pool, "benchmark": benchmark},
            },
            gpu_pod=cluster.gpu_eval if gpu else None,
            benchmark=benchmark,
            split=split,
            conductor=conductor,
            baselines=baselines,
            pool=pool,
            repeats=repeats,
            rounds=rounds,
            limit=limit,
        )

    return evaluate_version
