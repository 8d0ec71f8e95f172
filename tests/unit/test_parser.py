"""The Conductor-output parser: accepted shapes, every rejection code, and the round trip."""

from __future__ import annotations

import time

import pytest

from conductor_core.workflow.errors import FormatErrorCode, PlanFormatError
from conductor_core.workflow.model import ALL, AccessMode, Step, Workflow
from conductor_core.workflow.parser import (
    MAX_SCAN_CHARS,
    parse_plan,
    strip_reasoning,
    try_parse_plan,
)

PLAN = 'model_id = [2, 0]\nsubtasks = ["Solve it.", "Check it."]\naccess_list = [[], ["all"]]'
EXPECTED = Workflow(
    steps=(Step(worker=2, subtask="Solve it."), Step(worker=0, subtask="Check it.", access=ALL))
)


def code_of(text: str, **kw) -> FormatErrorCode:
    kw.setdefault("workers", 3)
    with pytest.raises(PlanFormatError) as info:
        parse_plan(text, **kw)
    assert info.value.message, "every rejection carries a human message"
    return info.value.code


def lists(ids: str, subtasks: str, access: str) -> str:
    return f"model_id = {ids}\nsubtasks = {subtasks}\naccess_list = {access}"


# --- accepted shapes ---------------------------------------------------------------------------


def test_plain_plan() -> None:
    assert parse_plan(PLAN, workers=3) == EXPECTED


def test_reasoning_before_plan_is_ignored() -> None:
    text = "I think model 2 is strongest at algebra, so it goes first.\n\n" + PLAN
    assert parse_plan(text, workers=3) == EXPECTED


def test_think_block_with_a_draft_plan_is_stripped() -> None:
    draft = lists("[1, 1, 1]", '["x", "y", "z"]', "[[], [], []]")
    assert parse_plan(f"<think>{draft}</think>\n{PLAN}", workers=3) == EXPECTED
    assert parse_plan(f"<THINK>\n{draft}\n</ think >{PLAN}", workers=3) == EXPECTED


def test_unmatched_closing_think_drops_everything_before_it() -> None:
    # The chat template opened the think block; only the closing tag is in the completion.
    bad_draft = lists("[9]", '["x"]', "[[]]")
    assert parse_plan(f"{bad_draft}\n</think>\n{PLAN}", workers=3) == EXPECTED


def test_unclosed_leading_think_block_means_no_plan() -> None:
    with pytest.raises(PlanFormatError) as info:
        parse_plan(f"<think>\n{PLAN}\nstill thinking", workers=3)
    assert info.value.code is FormatErrorCode.MISSING_LIST
    assert "think" in info.value.message


def test_strip_reasoning_keeps_text_between_blocks() -> None:
    assert strip_reasoning("<think>a</think>keep<think>b</think> this") == "keep this"
    assert strip_reasoning("junk</think>after") == "after"
    assert strip_reasoning("before<think>never closed") == "before"


def test_format_mentioned_early_then_real_plan_last() -> None:
    text = (
        "The answer format is model_id = [0, 1], subtasks = ['a', 'b'], access_list = [[], []].\n"
        "Let me now decide.\n" + PLAN
    )
    assert parse_plan(text, workers=3) == EXPECTED


def test_incomplete_last_occurrence_falls_back_to_last_complete_one() -> None:
    text = PLAN + "\nmodel_id = [1, 2"
    assert parse_plan(text, workers=3) == EXPECTED


def test_fenced_block() -> None:
    text = f"Here is my plan:\n```python\n{PLAN}\n```\nGood luck."
    assert parse_plan(text, workers=3) == EXPECTED


def test_colon_instead_of_equals_and_no_spaces() -> None:
    text = 'model_id:[2,0]\nsubtasks:["Solve it.","Check it."]\naccess_list:[[],["all"]]'
    assert parse_plan(text, workers=3) == EXPECTED


def test_json_style_keys() -> None:
    text = (
        '```json\n{"model_id": [2, 0], "subtasks": ["Solve it.", "Check it."], '
        '"access_list": [[], ["all"]]}\n```'
    )
    assert parse_plan(text, workers=3) == EXPECTED


def test_markdown_bold_keys_and_type_annotations() -> None:
    text = (
        '**model_id** = [2, 0]\nsubtasks: list[str] = ["Solve it.", "Check it."]\n'
        'access_list = [[], ["all"]]'
    )
    assert parse_plan(text, workers=3) == EXPECTED


def test_smart_quotes() -> None:
    text = lists("[2, 0]", "[“Solve it.”, ‘Check it.’]", "[[], [“all”]]")
    assert parse_plan(text, workers=3) == EXPECTED


def test_smart_single_quotes_with_apostrophe_inside() -> None:
    text = lists("[0]", "[‘Don’t round the result’]", "[[]]")
    assert parse_plan(text, workers=3).steps[0].subtask == "Don’t round the result"


def test_trailing_commas() -> None:
    text = lists("[2, 0,]", '["Solve it.", "Check it.",]', '[[], ["all",],]')
    assert parse_plan(text, workers=3) == EXPECTED


def test_apostrophes_inside_double_quotes() -> None:
    text = lists("[0]", "[\"Don't stop until it's checked.\"]", "[[]]")
    assert parse_plan(text, workers=1).steps[0].subtask == "Don't stop until it's checked."


def test_unescaped_apostrophe_in_single_quotes_is_accepted() -> None:
    text = lists("[0, 1]", "['Don't guess', 'It's fine']", "[[], ['all']]")
    wf = parse_plan(text, workers=2)
    assert [s.subtask for s in wf.steps] == ["Don't guess", "It's fine"]


def test_brackets_and_quotes_inside_strings() -> None:
    subtasks = '["Compute a[i] for i in [0, 3]] and say \\"done\\"", "Check ]]] ["]'
    wf = parse_plan(lists("[0, 1]", subtasks, '[[], ["all"]]'), workers=2)
    assert wf.steps[0].subtask == 'Compute a[i] for i in [0, 3]] and say "done"'
    assert wf.steps[1].subtask == "Check ]]] ["


def test_key_text_quoted_inside_a_subtask_does_not_count() -> None:
    text = lists("[1]", '["Explain what model_id = [5] and access_list = [[0]] mean."]', "[[]]")
    wf = parse_plan(text, workers=2)
    assert wf.worker_ids() == [1]
    assert wf.steps[0].access == ()


def test_comments_inside_lists() -> None:
    text = 'model_id = [2, # the solver\n 0]  # checker\nsubtasks = ["Solve it.", "Check it."]\n'
    text += 'access_list = [[], ["all"]]'
    assert parse_plan(text, workers=3) == EXPECTED


def test_multiline_strings_with_escapes() -> None:
    text = lists("[0]", '["Line one\\nline two\\ttab"]', "[[]]")
    assert parse_plan(text, workers=1).steps[0].subtask == "Line one\nline two\ttab"


def test_workers_none_skips_the_pool_check() -> None:
    wf = parse_plan(lists("[17]", '["x"]', "[[]]"), workers=None)
    assert wf.worker_ids() == [17]


def test_all_on_step_zero_is_fine_in_binary_mode() -> None:
    wf = parse_plan(lists("[0]", '["x"]', '[["all"]]'), workers=1)
    assert wf.steps[0].access == ALL
    assert wf.dependencies() == [()]


def test_index_mode() -> None:
    text = lists("[0, 1, 2, 0]", '["a", "b", "c", "d"]', '[[], [0], [0, 1], ["all"]]')
    wf = parse_plan(text, workers=3, access_mode=AccessMode.INDEX)
    assert wf.access_mode is AccessMode.INDEX
    assert [s.access for s in wf.steps] == [(), (0,), (0, 1), ALL]
    assert wf.dependencies() == [(), (0,), (0, 1), (0, 1, 2)]


def test_empty_plan_allowed_means_keep() -> None:
    wf = parse_plan(lists("[]", "[]", "[]"), workers=3, allow_empty=True)
    assert wf == Workflow(steps=())
    assert wf.is_keep


def test_try_parse_plan() -> None:
    wf, err = try_parse_plan(PLAN, workers=3)
    assert wf == EXPECTED and err is None
    wf, err = try_parse_plan("no plan here", workers=3)
    assert wf is None and err is not None and err.code is FormatErrorCode.MISSING_LIST


@pytest.mark.parametrize("mode", list(AccessMode))
def test_round_trip_of_render(mode: AccessMode) -> None:
    access = [(), ALL, (0, 1)] if mode is AccessMode.INDEX else [(), ALL, ALL]
    wf = Workflow(
        steps=tuple(
            Step(worker=w, subtask=s, access=a)
            for w, s, a in zip(
                [1, 0, 1],
                ['Say "hi" [x]', "Don't\nstop \\ here", "Ünïcödé ‘quoted’ “text”"],
                access,
                strict=True,
            )
        ),
        access_mode=mode,
    )
    assert parse_plan(wf.render(), workers=2, access_mode=mode) == wf


# --- rejection codes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("I will not write a plan.", "model_id, subtasks and access_list"),
        ('model_id = [0]\nsubtasks = ["x"]', "access_list"),
        ('subtasks = ["x"]\naccess_list = [[]]', "model_id"),
        ('model_id = [0]\nsubtasks = ["never closed\naccess_list = [[]]', "subtasks"),
    ],
)
def test_missing_list(text: str, missing: str) -> None:
    with pytest.raises(PlanFormatError) as info:
        parse_plan(text, workers=3)
    assert info.value.code is FormatErrorCode.MISSING_LIST
    assert missing in info.value.message


@pytest.mark.parametrize(
    "ids",
    ["[0 1]", "[0,, 1]", "[x]", "[__import__('os')]", "[1 + 1]", "[0, 1)"],
)
def test_unparsable_literal(ids: str) -> None:
    text = lists(ids, '["a", "b"]', "[[], []]")
    assert code_of(text) is FormatErrorCode.UNPARSABLE_LITERAL


def test_unparsable_literal_never_evaluates_code(tmp_path) -> None:
    marker = tmp_path / "pwned"
    ids = f"[open({str(marker)!r}, 'w').write('x')]"
    assert code_of(lists(ids, '["a"]', "[[]]")) is FormatErrorCode.UNPARSABLE_LITERAL
    assert not marker.exists()


def test_unequal_lengths() -> None:
    with pytest.raises(PlanFormatError) as info:
        parse_plan(lists("[0, 1]", '["a"]', "[[], []]"), workers=3)
    assert info.value.code is FormatErrorCode.UNEQUAL_LENGTHS
    assert "model_id has 2" in info.value.message and "subtasks 1" in info.value.message


def test_empty_plan_rejected_by_default() -> None:
    assert code_of(lists("[]", "[]", "[]")) is FormatErrorCode.EMPTY_PLAN


def test_too_many_steps() -> None:
    text = lists("[0, 0, 0]", '["a", "b", "c"]', "[[], [], []]")
    assert code_of(text, max_steps=2) is FormatErrorCode.TOO_MANY_STEPS
    assert parse_plan(text, workers=1, max_steps=3).worker_ids() == [0, 0, 0]


@pytest.mark.parametrize("ids", ["[True]", '["1"]', "[1.0]", "[None]", "[[0]]"])
def test_bad_worker_id(ids: str) -> None:
    assert code_of(lists(ids, '["a"]', "[[]]")) is FormatErrorCode.BAD_WORKER_ID


@pytest.mark.parametrize("ids", ["[3]", "[-1]"])
def test_unknown_worker(ids: str) -> None:
    with pytest.raises(PlanFormatError) as info:
        parse_plan(lists(ids, '["a"]', "[[]]"), workers=3)
    assert info.value.code is FormatErrorCode.UNKNOWN_WORKER
    assert "step 0" in info.value.message


def test_an_offered_subset_admits_exactly_its_pool_ids() -> None:
    """Workers are offered under their pool ids: a plan may name 1 and 3 of {1, 3}, nothing else,
    and the ids come back as written (nothing is renumbered)."""
    text = lists("[3, 1]", '["a", "b"]', '[[], ["all"]]')
    assert parse_plan(text, workers=[1, 3]).worker_ids() == [3, 1]
    for unoffered in ("0", "2", "4"):
        with pytest.raises(PlanFormatError) as info:
            parse_plan(lists(f"[1, {unoffered}]", '["a", "b"]', "[[], []]"), workers=[1, 3])
        assert info.value.code is FormatErrorCode.UNKNOWN_WORKER
        assert info.value.message == (
            f"step 1 uses model {unoffered}, which is not offered; the offered models are 1, 3"
        )


def test_unknown_worker_messages_name_the_offered_ids() -> None:
    def message(ids: str, workers) -> str:
        with pytest.raises(PlanFormatError) as info:
            parse_plan(lists(ids, '["a"]', "[[]]"), workers=workers)
        return info.value.message

    assert message("[0]", [2]).endswith("which is not offered; the only offered model is 2")
    assert message("[5]", 5).endswith("the offered models are 0-4")  # the whole pool of 5
    assert message("[3]", 3).endswith("the offered models are 0, 1, 2")


def test_workers_of_worker_info_objects_and_malformed_workers() -> None:
    from conductor_core.policy.base import WorkerInfo

    text = lists("[3]", '["a"]', "[[]]")
    assert parse_plan(text, workers=(WorkerInfo(id=1), WorkerInfo(id=3))).worker_ids() == [3]
    for bad in ([], [1, 1], [-1], ["1"], 0, True):
        with pytest.raises(ValueError, match="workers"):
            parse_plan(text, workers=bad)


@pytest.mark.parametrize("subtasks", ['[""]', '["   "]', "[3]", "[None]", '[["a"]]'])
def test_bad_subtask(subtasks: str) -> None:
    assert code_of(lists("[0]", subtasks, "[[]]")) is FormatErrorCode.BAD_SUBTASK


@pytest.mark.parametrize("access", ["[[0]]", '["all"]', '[["everything"]]', "[None]", "[[[]]]"])
def test_bad_access_entry_binary(access: str) -> None:
    assert code_of(lists("[0]", '["a"]', access)) is FormatErrorCode.BAD_ACCESS_ENTRY


@pytest.mark.parametrize("entry", ['["all", 0]', "[-1]", "[True]", '["0"]', "[0.5]"])
def test_bad_access_entry_index(entry: str) -> None:
    text = lists("[0, 1]", '["a", "b"]', f"[[], {entry}]")
    assert code_of(text, access_mode=AccessMode.INDEX) is FormatErrorCode.BAD_ACCESS_ENTRY


def test_self_reference() -> None:
    text = lists("[0, 1]", '["a", "b"]', "[[], [1]]")
    assert code_of(text, access_mode=AccessMode.INDEX) is FormatErrorCode.SELF_REFERENCE


def test_forward_reference_message_is_human() -> None:
    text = lists("[0, 1, 2, 0]", '["a", "b", "c", "d"]', "[[], [0], [3], []]")
    with pytest.raises(PlanFormatError) as info:
        parse_plan(text, workers=3, access_mode=AccessMode.INDEX)
    assert info.value.code is FormatErrorCode.FORWARD_REFERENCE
    assert info.value.message == (
        "step 2 refers to step 3, which comes later; a step may only read earlier steps"
    )
    assert info.value.to_dict()["code"] == "forward_reference"


# --- robustness --------------------------------------------------------------------------------


def test_non_string_input_is_a_format_error() -> None:
    assert code_of(None) is FormatErrorCode.MISSING_LIST  # type: ignore[arg-type]


def test_deep_nesting_is_rejected_quickly() -> None:
    text = lists("[" * 5000 + "]" * 5000, '["a"]', "[[]]")
    start = time.perf_counter()
    assert code_of(text) is FormatErrorCode.UNPARSABLE_LITERAL
    assert time.perf_counter() - start < 1.0


def test_huge_input_is_capped_and_fast() -> None:
    text = "blah [ ' \" model_id = [ " * 100_000 + PLAN
    start = time.perf_counter()
    assert parse_plan(text, workers=3) == EXPECTED
    assert time.perf_counter() - start < 2.0
    assert len(text) > MAX_SCAN_CHARS


def test_many_unclosed_candidates_finish_quickly() -> None:
    text = 'model_id = ["' + ', "x' * 30_000 + ("model_id = [" + '"a", ' * 50) * 60
    start = time.perf_counter()
    assert code_of(text) is FormatErrorCode.MISSING_LIST
    assert time.perf_counter() - start < 3.0


def test_same_key_quoted_inside_its_own_list_does_not_count() -> None:
    subtasks = '["Write subtasks = [\\"a\\", \\"b\\"] as JSON.", "Check it."]'
    wf = parse_plan(lists("[2, 0]", subtasks, '[[], ["all"]]'), workers=3)
    assert wf.steps[0].subtask == 'Write subtasks = ["a", "b"] as JSON.'
    assert len(wf) == 2
