"""Evaluate one shard of a benchmark."""

from kfp import dsl
from kfp.dsl import Artifact, Input, Model, Output

from conductor_components._settings import COMPONENT_OPTIONS, TRAIN_IMAGE, variant


@dsl.component(**COMPONENT_OPTIONS)
def eval_shard(
    shard: str,
    benchmark: str,
    records: Output[Artifact],
    model: Input[Model] = None,
    conductor: str = "",
    split: str = "",
    baselines: str = "",
    pool: str = "bundled",
    repeats: int = 1,
    rounds: int = 1,
    limit: int = 0,
) -> int:
    """Evaluate shard `shard` ("i/n") of `benchmark` (`held-out`, a benchmark name or a problem
    file): the trained Conductor (`model`) or another plan source (`conductor`: a model URI or
    an OpenAI-compatible URL), and the baselines (`single,moa`, ...). The records and the
    shard's report go to the output folder. Returns the number of records."""
    from conductor_core.pipeline_steps.eval_steps import eval_shard_step

    result = eval_shard_step(
        shard=shard,
        out_dir=records.path,
        benchmark=benchmark,
        split=split or None,
        model_manifest=model.path if model is not None else None,
        conductor=conductor or None,
        baselines=baselines,
        pool=pool,
        repeats=repeats,
        rounds=rounds,
        limit=limit or None,
    )
    return int(result["records"])


eval_shard_gpu = variant(eval_shard, TRAIN_IMAGE, "eval-shard-gpu")
"""``eval_shard`` on the CUDA train image: shards evaluating a GPU profile's model (paper)."""
