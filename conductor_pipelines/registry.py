"""The pipelines by name, and compiling them."""

from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError

COMPILED_DIR = Path(__file__).resolve().parent / "compiled"
NAMES = ("training", "evaluation", "curation")


def build(
    name: str, settings: Any = None, eval_parallelism: int | None = None, pins: Any = None
) -> Any:
    """The pipeline called ``name`` (see :data:`NAMES`), built with the cluster settings and, for
    the sharded pipelines, the evaluation's parallelism (fixed at compile time in KFP); with
    ``pins`` (:class:`~conductor_core.cluster.images.ImagePins`) every task names its pinned
    image with an explicit pull policy, and so does a TrainJob that takes the release's train
    image (``trainjob.image``)."""
    from concurrent.futures import ThreadPoolExecutor

    # KFP calls inspect.stack() in every task setter (hundreds per pipeline), and a caller's
    # frames without a source file (the import system's, xdist's, a notebook's) each cost a
    # scan of sys.modules: one build took 50 s inside the test run. A new thread's stack is a
    # few frames deep, whoever calls.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kfp-build") as pool:
        return pool.submit(_pinned_build, name, settings, eval_parallelism, pins).result()


def _pinned_build(name: str, settings: Any, eval_parallelism: int | None, pins: Any) -> Any:
    from conductor_pipelines.kubernetes import pinned_images

    if pins is not None:
        settings = _pinned_trainjob(settings, pins)
    with pinned_images(pins):  # in the build's thread: a context variable is per thread
        return _build(name, settings, eval_parallelism)


def _pinned_trainjob(settings: Any, pins: Any) -> Any:
    """The cluster settings with the TrainJob's image pinned, where it is the release's."""
    from conductor_core.cluster.images import image
    from conductor_core.cluster.settings import load_cluster_settings

    cluster = settings or load_cluster_settings()
    if cluster.trainjob.image != image("train"):
        return cluster  # chosen in the settings: kept
    trainjob = cluster.trainjob.model_copy(update={"image": pins.resolve(cluster.trainjob.image)})
    return cluster.model_copy(update={"trainjob": trainjob})


def _build(name: str, settings: Any, eval_parallelism: int | None) -> Any:
    if name == "training":
        from conductor_pipelines import training as module
    elif name == "evaluation":
        from conductor_pipelines import evaluation as module
    elif name == "curation":
        from conductor_pipelines import curation as module

        return module.build(settings)
    else:
        raise ConfigError(f"pipeline {name!r}: unknown; use one of {', '.join(NAMES)}")
    return module.build(settings, eval_parallelism or module.DEFAULT_EVAL_PARALLELISM)


def compile_pipeline(
    name: str,
    out: str | Path | None = None,
    *,
    settings: Any = None,
    eval_parallelism: int | None = None,
    pins: Any = None,
) -> Path:
    """Compile pipeline ``name`` to ``out`` (default ``conductor_pipelines/compiled/<name>.yaml``),
    with ``pins`` naming the images (see :func:`build`).

    Raises:
        ConfigError: with ``pins``, a task was left with another image or no pull policy.
    """
    from kfp import compiler

    target = Path(out) if out is not None else COMPILED_DIR / f"{name}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(build(name, settings, eval_parallelism, pins), str(target))
    if pins is not None:
        unpinned = unpinned_tasks(target, set(pins.references.values()))
        if unpinned:
            target.unlink()
            raise ConfigError(
                f"pipeline {name}: task(s) {', '.join(unpinned)} kept their image or got no pull "
                "policy: every task must go through "
                "conductor_pipelines.kubernetes.apply_pod_settings"
            )
    return target


def unpinned_tasks(path: Path, references: set[str]) -> list[str]:
    """The executors of a compiled pipeline whose image is not one of ``references`` or whose
    pod has no image pull policy."""
    import yaml

    docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    executors = docs[0].get("deploymentSpec", {}).get("executors", {})
    platform = docs[1] if len(docs) > 1 else {}
    pods = platform.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {})
    pods = pods.get("executors", {})
    return sorted(
        name
        for name, executor in executors.items()
        if "container" in executor
        and (
            executor["container"]["image"] not in references
            or "imagePullPolicy" not in pods.get(name, {})
        )
    )
