"""The parameter check tries the code sandbox when the run will grade generated code: a
sandbox that would refuse the code (since KFP 2.16 every task container runs without
capabilities under RuntimeDefault seccomp) stops the run at its first task, with the reason,
instead of deep inside a training stage."""

from __future__ import annotations

import pytest

from conductor_core.errors import ConfigError
from conductor_core.pipeline_steps.params import check_training_params, grades_code
from conductor_core.tasks import sandbox

REFUSAL = "sandbox: refusing to run generated code without bubblewrap (...)"


class RefusingSandbox:
    """A sandbox backend as a pod without namespaces reports itself."""

    name = "local"

    def run(self, *args, **kwargs):  # never reached: the check only asks for the report
        raise AssertionError("the check must not run code")

    def report(self) -> dict:
        return {"backend": "local", "mode": "refused", "refusal": REFUSAL}


@pytest.fixture()
def refusing():
    sandbox.set_backend(RefusingSandbox())
    try:
        yield
    finally:
        sandbox.set_backend(None)


def _params(**over):
    return {
        "profile": "tiny",
        "launcher": "pod",
        "metric": "accuracy",
        "baselines": "single",
        "curation_config": "pipeline",
        **over,
    }


def test_code_benchmarks_in_the_data_or_the_evaluation_mean_code_is_graded():
    assert grades_code("paper-train", "held-out")  # livecodebench among its sources
    assert grades_code("pipeline", "humaneval")
    assert not grades_code("pipeline", "held-out")
    assert not grades_code("no-such-config", "")  # the curation check names that one


def test_a_run_that_grades_code_stops_when_the_sandbox_would_refuse_it(refusing):
    with pytest.raises(ConfigError) as err:
        check_training_params(**_params(eval_benchmark="livecodebench"))
    assert str(err.value) == f"pipeline parameters: this run grades generated code, and {REFUSAL}"


def test_a_run_that_grades_no_code_does_not_ask_the_sandbox(refusing):
    assert check_training_params(**_params(eval_benchmark="held-out"))["placement"] == "cpu"
