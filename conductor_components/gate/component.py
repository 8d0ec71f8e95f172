"""Stop the run when the check before it failed (the data gate after `validate`)."""

from kfp import dsl

from conductor_components._settings import COMPONENT_OPTIONS


@dsl.component(**COMPONENT_OPTIONS)
def gate(passed: bool, reason: str = "") -> str:
    """Stop the run, with `reason` as its one-line error, unless `passed`: the task after a
    check that reports either way (`validate`), so that the check keeps its report in the UI
    and nothing after the gate starts on data that failed it. Returns "passed"."""
    from conductor_core.pipeline_steps.data_steps import gate_step

    gate_step(passed, reason)
    return "passed"
