"""The evaluation pipeline: a registered Conductor (alias or URI) and chosen baselines on a
benchmark, sharded, then aggregated into one report.

An alias (``models:/NAME@ALIAS``) is resolved to its current version by an uncached task first;
the evaluation tasks after it are cached on that version, so that a moved alias is evaluated
afresh and an unchanged one is not evaluated twice."""

from typing import Any

from kfp import dsl

from components.resolve_model import resolve_model
from pipelines.describe import ui_description
from pipelines.kubernetes import apply_pod_settings
from pipelines.sharded import sharded_evaluation

NAME = "conductor-evaluation"
DEFAULT_EVAL_PARALLELISM = 4


def build(settings: Any = None, eval_parallelism: int = DEFAULT_EVAL_PARALLELISM) -> Any:
    """The evaluation pipeline with the cluster settings (CPU pods) and the parallelism of its
    shards (fixed when compiled)."""
    from conductor_core.cluster.settings import load_cluster_settings

    cluster = settings or load_cluster_settings()

    @dsl.pipeline(name="evaluate-model-version")
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
            eval_parallelism,
            cluster.cpu,
            {
                "title": "Evaluation",
                "run_id": dsl.PIPELINE_JOB_ID_PLACEHOLDER,
                "pipeline": NAME,
                "params": {"conductor": conductor, "pool": pool, "benchmark": benchmark},
            },
            benchmark=benchmark,
            split=split,
            conductor=conductor,
            baselines=baselines,
            pool=pool,
            repeats=repeats,
            rounds=rounds,
            limit=limit,
        )

    @dsl.pipeline(name=NAME, description=ui_description(__doc__))
    def evaluation(
        conductor: str = "models:/conductor@champion",
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
        resolved = resolve_model(conductor=conductor).set_display_name("resolve model version")
        resolved.set_caching_options(enable_caching=False)
        apply_pod_settings(resolved, cluster.cpu)
        evaluate_version(
            conductor=resolved.output,
            benchmark=benchmark,
            split=split,
            limit=limit,
            baselines=baselines,
            pool=pool,
            repeats=repeats,
            rounds=rounds,
            shards=shards,
        ).set_display_name("evaluate the resolved version")

    return evaluation
