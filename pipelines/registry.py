"""The pipelines by name, and compiling them."""

from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError

COMPILED_DIR = Path(__file__).resolve().parent / "compiled"
NAMES = ("training", "evaluation", "curation")


def build(name: str, settings: Any = None, eval_parallelism: int | None = None) -> Any:
    """The pipeline called ``name`` (see :data:`NAMES`), built with the cluster settings and, for
    the sharded pipelines, the evaluation's parallelism (fixed at compile time in KFP)."""
    from concurrent.futures import ThreadPoolExecutor

    # KFP calls inspect.stack() in every task setter (hundreds per pipeline), and a caller's
    # frames without a source file (the import system's, xdist's, a notebook's) each cost a
    # scan of sys.modules: one build took 50 s inside the test run. A new thread's stack is a
    # few frames deep, whoever calls.
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="kfp-build") as pool:
        return pool.submit(_build, name, settings, eval_parallelism).result()


def _build(name: str, settings: Any, eval_parallelism: int | None) -> Any:
    if name == "training":
        from pipelines import training as module
    elif name == "evaluation":
        from pipelines import evaluation as module
    elif name == "curation":
        from pipelines import curation as module

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
) -> Path:
    """Compile pipeline ``name`` to ``out`` (default ``pipelines/compiled/<name>.yaml``)."""
    from kfp import compiler

    target = Path(out) if out is not None else COMPILED_DIR / f"{name}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    compiler.Compiler().compile(build(name, settings, eval_parallelism), str(target))
    return target
