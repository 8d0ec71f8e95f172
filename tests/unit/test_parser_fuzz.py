"""Property tests of the parser: render -> parse round trip, and nothing but PlanFormatError."""

from __future__ import annotations

import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor_core.workflow.errors import PlanFormatError
from conductor_core.workflow.model import ALL, AccessMode, Step, Workflow
from conductor_core.workflow.parser import parse_plan, try_parse_plan

FUZZ = settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

# Subtasks stress the tokenizer: quotes of every kind, brackets, backslashes, newlines, unicode.
_TRICKY = st.sampled_from(
    ['"', "'", "“", "”", "‘", "’", "[", "]", "\\", "\n", "#", "model_id = [", "],", "é", "𝔘", "```"]
)
SUBTASK = (
    st.lists(st.one_of(st.text(min_size=1, max_size=12), _TRICKY), min_size=1, max_size=8)
    .map("".join)
    .filter(lambda s: s.strip() != "" and "think" not in s.lower())
)


@st.composite
def workflows(draw: st.DrawFn, mode: AccessMode) -> tuple[Workflow, int]:
    num_workers = draw(st.integers(min_value=1, max_value=8))
    n = draw(st.integers(min_value=1, max_value=5))
    steps = []
    for i in range(n):
        if mode is AccessMode.BINARY:
            access = draw(st.sampled_from([(), ALL]))
        else:
            access = draw(
                st.one_of(
                    st.just(ALL),
                    st.lists(st.integers(0, i - 1), max_size=4).map(tuple) if i else st.just(()),
                )
            )
        steps.append(
            Step(
                worker=draw(st.integers(0, num_workers - 1)),
                subtask=draw(SUBTASK),
                access=access,
            )
        )
    return Workflow(steps=tuple(steps), access_mode=mode), num_workers


@FUZZ
@given(workflows(AccessMode.BINARY))
def test_round_trip_binary(case: tuple[Workflow, int]) -> None:
    wf, n = case
    assert parse_plan(wf.render(), workers=n) == wf


@FUZZ
@given(workflows(AccessMode.INDEX), st.text(max_size=80))
def test_round_trip_index_after_reasoning(case: tuple[Workflow, int], reasoning: str) -> None:
    wf, n = case
    text = f"<think>{reasoning.replace('<', '(')}</think>\n{wf.render()}"
    assert parse_plan(text, workers=n, access_mode=AccessMode.INDEX) == wf


@FUZZ
@given(st.text(max_size=400), st.sampled_from(list(AccessMode)), st.booleans())
def test_arbitrary_text_only_raises_plan_format_error(
    text: str, mode: AccessMode, allow_empty: bool
) -> None:
    wf, err = try_parse_plan(text, workers=4, access_mode=mode, allow_empty=allow_empty)
    assert (wf is None) != (err is None)


_ALPHABET = st.sampled_from(
    list("[](){}\"'“”‘’#\\,:= \n0123456789-.allmodel_idsubtasksaccess_list<>/think`")
)


@FUZZ
@given(workflows(AccessMode.INDEX), st.data())
def test_mutated_plans_only_raise_plan_format_error(
    case: tuple[Workflow, int], data: st.DataObject
) -> None:
    wf, n = case
    text = wf.render()
    for _ in range(data.draw(st.integers(1, 6))):
        pos = data.draw(st.integers(0, len(text)))
        op = data.draw(st.sampled_from(["insert", "delete", "replace", "duplicate"]))
        chunk = data.draw(st.text(_ALPHABET, min_size=1, max_size=6))
        if op == "insert":
            text = text[:pos] + chunk + text[pos:]
        elif op == "delete":
            text = text[:pos] + text[pos + len(chunk) :]
        elif op == "replace":
            text = text[:pos] + chunk + text[pos + len(chunk) :]
        else:
            text = text[:pos] + text[pos : pos + 40] + text[pos:]
    mode = data.draw(st.sampled_from(list(AccessMode)))
    try:
        result = parse_plan(text, workers=n, access_mode=mode)
    except PlanFormatError as exc:
        assert exc.message
    else:
        assert isinstance(result, Workflow)
        assert all(0 <= w < n for w in result.worker_ids())
        assert 1 <= len(result) <= 5


def _timed(text: str) -> float:
    start = time.perf_counter()
    try_parse_plan(text, workers=3)
    return time.perf_counter() - start


def test_deeply_nested_brackets_finish_quickly() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    for text in (
        f"model_id = {deep}\nsubtasks = {deep}\naccess_list = {deep}",
        "model_id = " + "[" * 150_000,
        'model_id = [0]\nsubtasks = ["a"]\naccess_list = [' + "(" * 50_000 + ")" * 50_000 + "]",
    ):
        assert _timed(text) < 2.0


def test_huge_adversarial_inputs_finish_quickly() -> None:
    tails = 'subtasks = ["a"]\naccess_list = [[]]'
    cases = [
        "x" * 5_000_000 + 'model_id = [0]\nsubtasks = ["a"]\naccess_list = [[]]',
        ("model_id = [" + '"", ' * 40) * 2_000 + tails,
        ("model_id = ['" + "it's, " * 30) * 1_000 + tails,
        ('subtasks = ["x", ' * 10_000) + "]" * 10_000 + "\nmodel_id = [0]\naccess_list = [[]]",
        ("model_id = [‘" + "’ a ’ b" * 50) * 600 + tails,
        "<think>" * 30_000 + "</think>" * 30_000 + "model_id = [0]\n" + tails,
    ]
    for text in cases:
        assert _timed(text) < 3.0
