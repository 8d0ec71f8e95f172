"""The control flow of the training pipeline on KFP's local runner, on a small pipeline of the
same shape (the real one trains for minutes: tests/e2e/test_pipeline_local.py runs it):

- the real parameter check runs first, and each stage is ``dsl.If``/``Elif``/``Else`` over its
  ``placement`` output (the profile's device: ``tiny`` and ``small`` on CPU, ``paper`` on GPUs),
  with one function as two components on different images, joined by ``dsl.OneOf`` of their
  Model artifacts and handed to the next stage (kfp's local runner needs
  ``conductor_pipeline_runner.local._oneof_artifacts`` for that: without it the run stops);
- the evaluation is a ``ParallelFor`` with a ``dsl.Collected`` fan-in inside a condition;
- an exit handler receives the pipeline's final state as ``dsl.PipelineTaskFinalStatus``, after
  a success and after a failure.
"""

from pathlib import Path

import pytest
from kfp import dsl
from kfp.dsl import Input, Model, Output

from conductor_components.check_params import check_params

LOCAL = {"base_image": "python:3.11", "install_kfp_package": False}
# the check task's image is conductor-base; here it runs in this venv, as the local runner
# (conductor_pipeline_runner.local) runs it
pytestmark = pytest.mark.filterwarnings("ignore:.*custom or non-Python base image")


def work(stage: str, flag: str, model: Output[Model], init: Input[Model] = None) -> str:
    """A stage: writes which stage ran on which branch, after the previous stage's."""
    from pathlib import Path

    before = Path(init.path).read_text() + " > " if init is not None else ""
    if flag == "fail":
        raise RuntimeError("the stage failed")
    with open(model.path, "w") as f:
        f.write(f"{before}{stage}")
    return stage


on_cpu = dsl.component(**LOCAL)(work)
on_gpu = dsl.component(base_image="python:3.11-slim", install_kfp_package=False)(work)
# as conductor_components._settings.variant does
on_gpu.component_spec.name = on_gpu.name = "work-gpu"


@dsl.component(**LOCAL)
def shards(n: int) -> list:
    return [str(i) for i in range(n)]


@dsl.component(**LOCAL)
def shard(i: str, model: Input[Model]) -> str:
    from pathlib import Path

    return f"{i}:{Path(model.path).read_text()}"


@dsl.component(**LOCAL)
def collect(results: list, out: str) -> None:
    with open(out, "w") as f:
        f.write("\n".join(sorted(results)))


@dsl.component(**LOCAL)
def closing(status: dsl.PipelineTaskFinalStatus, out: str) -> None:
    with open(out, "w") as f:
        f.write(status.state)


def stage(name: str, placement, flag: str, init=None):
    extra = {"init": init} if init is not None else {}
    with dsl.If(placement == "cpu", name=f"{name} on CPU"):
        a = on_cpu(stage=name, flag=flag, **extra)
    with dsl.Else(name=f"{name} on GPUs"):
        b = on_gpu(stage=name, flag=flag, **extra)
    return dsl.OneOf(a.outputs["model"], b.outputs["model"])


@dsl.pipeline(name="branches")
def branches(profile: str, flag: str, out: str, status_out: str, pool: str = "bundled") -> None:
    exit_task = closing(out=status_out)
    with dsl.ExitHandler(exit_task):
        checked = check_params(
            profile=profile,
            launcher="pod",
            register_metric="accuracy",
            baselines="single,moa",
            pool=pool,
            curation_config="pipeline",
            eval_shards=2,
            eval_parallelism=2,
            base_steps=0,
            adaptive_steps=0,
            recursive_steps=0,
            shared_paths=["/"],  # the local run's rule (every task on this machine)
        )
        placement = checked.outputs["placement"]
        base = stage("base", placement, flag)
        adaptive = stage("adaptive", placement, "ok", init=base)
        with dsl.If(placement == "cpu", name="evaluate on CPU"):
            planned = shards(n=2)
            with dsl.ParallelFor(planned.output) as i:
                done = shard(i=i, model=adaptive)
            collect(results=dsl.Collected(done.output), out=out)
        with dsl.Else(name="evaluate on GPUs"):
            collect(results=["gpu"], out=out)


def run(tmp_path: Path, shim: bool = True, **params: str) -> tuple[str, str, Exception | None]:
    import contextlib

    import kfp.local

    from conductor_pipeline_runner.local import _oneof_artifacts

    out, status = tmp_path / "out.txt", tmp_path / "status.txt"
    kfp.local.init(
        runner=kfp.local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path / "root"),
        raise_on_error=True,
    )
    error = None
    with _oneof_artifacts() if shim else contextlib.nullcontext():
        try:
            branches(out=str(out), status_out=str(status), **params)
        except Exception as exc:  # the local runner raises when a task failed
            error = exc
    read = lambda p: p.read_text() if p.is_file() else ""  # noqa: E731
    return read(out), read(status), error


@pytest.mark.parametrize("profile", ["tiny", "small"])
def test_the_cpu_branch_hands_its_model_on_and_the_exit_handler_sees_success(tmp_path, profile):
    """Both CPU profiles (``device: cpu``) take the CPU branches, ``small`` by its device, not
    by its name."""
    out, status, error = run(tmp_path, profile=profile, flag="ok")
    assert error is None
    assert out.splitlines() == ["0:base > adaptive", "1:base > adaptive"]
    assert status == "SUCCEEDED"
    assert list((tmp_path / "root").glob("*/work/")) and not list(
        (tmp_path / "root").glob("*/work-gpu*")
    )


def test_the_gpu_branch_runs_the_other_component(tmp_path):
    from conductor_core.train.config import bundled_pool

    # the paper profile refuses the simulated pool at the check: its real workers' pool
    out, status, error = run(tmp_path, profile="paper", flag="ok", pool=bundled_pool("paper"))
    assert error is None and out == "gpu" and status == "SUCCEEDED"
    assert list((tmp_path / "root").glob("*/work-gpu*"))  # the GPU variant's task ran
    assert not list((tmp_path / "root").glob("*/work/"))


def test_a_failure_still_runs_the_exit_handler_with_the_failed_state(tmp_path):
    out, status, error = run(tmp_path, profile="tiny", flag="fail")
    assert error is not None and "'work'" in str(error)
    assert out == "" and status == "FAILED"


def test_without_the_shim_the_local_runner_cannot_join_artifacts(tmp_path):
    _, _, error = run(tmp_path, shim=False, profile="tiny", flag="ok")
    assert error is not None and "Expected 1 artifact" in str(error)
