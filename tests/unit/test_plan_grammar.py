"""The plan grammar (a regex for constrained decoding): every string it matches parses with the
project's parser under the same arguments, rendered plans match it, a corpus of rejected plans
does not; and OpenAIPlanSource(structured=True) sends it as vLLM's ``structured_outputs``."""

from __future__ import annotations

import asyncio
import json
import re
from random import Random

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conductor_core.errors import ConfigError
from conductor_core.policy.base import PlanRequest, PreviousRound, WorkerInfo
from conductor_core.policy.openai_policy import OpenAIPlanSource
from conductor_core.workflow.grammar import plan_regex, subtask_regex
from conductor_core.workflow.model import AccessMode, Step, Workflow
from conductor_core.workflow.parser import parse_plan, try_parse_plan

# (workers, max_steps, access mode, allow_empty, max_subtask_chars)
SHAPES = [
    (1, 1, AccessMode.BINARY, False, None),
    (3, 2, AccessMode.BINARY, False, None),
    (4, 5, AccessMode.BINARY, True, None),
    (12, 3, AccessMode.BINARY, False, 8),
    (2, 4, AccessMode.INDEX, False, None),
    (5, 5, AccessMode.INDEX, True, 20),
]


def _ids(shape) -> str:
    n, steps, mode, empty, cap = shape
    return f"{n}w-{steps}s-{mode.value}{'-empty' if empty else ''}{f'-cap{cap}' if cap else ''}"


def _parse(text: str, shape):
    n, steps, mode, empty, _ = shape
    return parse_plan(text, workers=n, max_steps=steps, access_mode=mode, allow_empty=empty)


@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
def test_every_string_the_regex_generates_parses(shape):
    n, steps, mode, empty, cap = shape
    pattern = plan_regex(n, steps, mode, allow_empty=empty, max_subtask_chars=cap)

    @settings(
        max_examples=150,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(st.from_regex(pattern, fullmatch=True))
    def check(text: str) -> None:
        workflow = _parse(text, shape)
        # The parse is faithful: rendering the workflow gives back the very same text.
        assert workflow.render() == text
        assert (0 if empty else 1) <= len(workflow) <= steps
        assert all(0 <= w < n for w in workflow.worker_ids())
        if cap is not None:
            assert all(len(s.subtask) <= 2 * cap for s in workflow.steps)

    check()


def _random_workflow(rng: Random, n: int, steps: int, mode: AccessMode) -> Workflow:
    words = ["Solve", "the", "problem", "x<3", "a <= b", "it’s", "“quoted”", "#1", "[x]", "é"]
    out = []
    for i in range(rng.randint(1, steps)):
        if mode is AccessMode.INDEX and i and rng.random() < 0.5:
            access: object = tuple(sorted(rng.sample(range(i), rng.randint(1, i))))
        else:
            access = "all" if rng.random() < 0.5 else ()
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 8)))
        out.append(Step(worker=rng.randrange(n), subtask=text, access=access))
    return Workflow(steps=tuple(out), access_mode=mode)


@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
def test_rendered_plans_match(shape):
    n, steps, mode, empty, cap = shape
    regex = re.compile(plan_regex(n, steps, mode, allow_empty=empty, max_subtask_chars=cap))
    rng = Random(n * 31 + steps)
    for _ in range(200):
        wf = _random_workflow(rng, n, steps, mode)
        if cap is not None and any(len(s.subtask) > cap for s in wf.steps):
            continue
        assert regex.fullmatch(wf.render()), wf.render()
    keep = "model_id = []\nsubtasks = []\naccess_list = []"
    assert bool(regex.fullmatch(keep)) is empty


GOOD = 'model_id = [0, 1]\nsubtasks = ["Solve it.", "Check it."]\naccess_list = [[], ["all"]]'

# Plans the parser rejects (with workers=2, max_steps=2, binary, no empty plans) ...
REJECTED = [
    "",
    "I would rather not write a plan.",
    'model_id = [0, 2]\nsubtasks = ["Solve it.", "Check it."]\naccess_list = [[], ["all"]]',
    'model_id = [-1]\nsubtasks = ["Solve it."]\naccess_list = [[]]',
    'model_id = [0, 1]\nsubtasks = ["Solve it."]\naccess_list = [[], ["all"]]',
    'model_id = [0]\nsubtasks = ["Solve it.", "Check it."]\naccess_list = [[]]',
    'model_id = [0, 1, 0]\nsubtasks = ["A", "B", "C"]\naccess_list = [[], [], []]',
    "model_id = []\nsubtasks = []\naccess_list = []",
    'model_id = [0]\nsubtasks = [""]\naccess_list = [[]]',
    'model_id = [0]\nsubtasks = ["   "]\naccess_list = [[]]',
    "model_id = [0]\nsubtasks = [1]\naccess_list = [[]]",
    'model_id = ["0"]\nsubtasks = ["Solve it."]\naccess_list = [[]]',
    'model_id = [0.5]\nsubtasks = ["Solve it."]\naccess_list = [[]]',
    'model_id = [0]\nsubtasks = ["Solve it."]\naccess_list = [["none"]]',
    'model_id = [0, 1]\nsubtasks = ["A", "B"]\naccess_list = [[], [0]]',
    'model_id = [0]\nsubtasks = ["Solve it."]\naccess_list = [[], ["all"]]',
    'model_id = [0]\nsubtasks = ["Solve it."]\naccess_list = ["all"]',
    'model_id = [0]\nsubtasks = ["Solve it.</think>"]\naccess_list = [[]]',
    'model_id = [0]\nsubtasks = ["Solve it.\ud800"]\naccess_list = [[]]',
    'model_id = [0, 1]\nsubtasks = ["Solve it.", "Check it."]\naccess_list = [[], ["all"]',
    'model_id = [0, 1]\nsubtasks = ["Solve it.", "Check it."',
]
# ... and index-mode plans it rejects (workers=3, max_steps=3).
REJECTED_INDEX = [
    'model_id = [0]\nsubtasks = ["A"]\naccess_list = [[0]]',
    'model_id = [0, 1]\nsubtasks = ["A", "B"]\naccess_list = [[], [1]]',
    'model_id = [0, 1]\nsubtasks = ["A", "B"]\naccess_list = [[], [2]]',
    'model_id = [0, 1]\nsubtasks = ["A", "B"]\naccess_list = [[], ["all", 0]]',
    'model_id = [0, 1]\nsubtasks = ["A", "B"]\naccess_list = [[], [-1]]',
]


@pytest.mark.parametrize("text", REJECTED)
def test_rejected_plans_fail_the_regex(text):
    workflow, error = try_parse_plan(text, workers=2, max_steps=2)
    assert workflow is None and error is not None  # the corpus really is rejected
    assert not re.fullmatch(plan_regex(2, 2), text)


@pytest.mark.parametrize("text", REJECTED_INDEX)
def test_rejected_index_plans_fail_the_regex(text):
    workflow, error = try_parse_plan(text, workers=3, max_steps=3, access_mode="index")
    assert workflow is None and error is not None
    assert not re.fullmatch(plan_regex(3, 3, "index"), text)


# Accepted by the parser but not in the canonical form the grammar allows (reasoning, spacing,
# single quotes, escapes, binary plans in index form): the regex is deliberately narrower.
NOT_CANONICAL = [
    "Reasoning first.\n" + GOOD,
    GOOD.replace(" = ", "="),
    GOOD.replace('"Solve it."', "'Solve it.'"),
    GOOD.replace("[0, 1]", "[0,1]"),
    GOOD + "\n",
    GOOD.replace("Solve it.", 'Say \\"hi\\".'),
    GOOD.replace("Solve it.", " Solve it."),
    GOOD.replace("Solve it.", "x < 3"),
    GOOD.replace("Solve it.", "Solve it.\n"),
]


@pytest.mark.parametrize("text", NOT_CANONICAL)
def test_non_canonical_plans_parse_but_fail_the_regex(text):
    assert try_parse_plan(text, workers=2, max_steps=2)[0] is not None
    assert not re.fullmatch(plan_regex(2, 2), text)


def test_an_offered_subset_admits_exactly_its_pool_ids():
    """Offered {1, 3} (a 2-of-4 subset): the grammar writes model ids 1 and 3 only, and every plan
    it admits parses for the same offer."""
    pattern = re.compile(plan_regex([1, 3], 2))
    assert pattern.pattern == plan_regex([3, 1], 2)  # the order offered does not matter

    def plan(ids: str) -> str:
        n = ids.count(",") + 1
        subtasks = ", ".join(['"Solve it."'] * n)
        access = ", ".join(["[]"] * n)
        return f"model_id = [{ids}]\nsubtasks = [{subtasks}]\naccess_list = [{access}]"

    for ok in ("1", "3", "3, 1", "1, 1", "3, 3"):
        assert pattern.fullmatch(plan(ok)), ok
        assert parse_plan(plan(ok), workers=[1, 3], max_steps=2).worker_ids() == [
            int(i) for i in ok.split(", ")
        ]
    for bad in ("0", "2", "4", "13", "31", "1, 0", "2, 3", "1, 3, 1"):
        assert not pattern.fullmatch(plan(bad)), bad
    # every plan the subset's grammar generates parses for that offer and names 1 or 3 only

    @settings(max_examples=100, deadline=None, database=None)
    @given(st.from_regex(plan_regex([1, 3], 3, AccessMode.INDEX), fullmatch=True))
    def check(text: str) -> None:
        workflow = parse_plan(text, workers=[1, 3], max_steps=3, access_mode=AccessMode.INDEX)
        assert set(workflow.worker_ids()) <= {1, 3}

    check()
    # ids of two digits are whole alternatives, not one digit of them
    wide = re.compile(plan_regex([1, 10], 1))
    assert wide.fullmatch(plan("10")) and wide.fullmatch(plan("1"))
    assert not wide.fullmatch(plan("0")) and not wide.fullmatch(plan("11"))


def test_subtask_cap_and_bad_arguments():
    capped = re.compile(subtask_regex(3))
    assert capped.fullmatch('"abc"') and not capped.fullmatch('"abcd"')
    assert capped.fullmatch('"a<b"')  # '<' and the character after it count as one
    bad_arguments = (
        {"workers": 0},
        {"workers": []},
        {"workers": [1, 1]},
        {"workers": [-1]},
        {"workers": 2, "max_steps": 0},
    )
    for bad in bad_arguments:
        with pytest.raises(ValueError):
            plan_regex(**bad)
    with pytest.raises(ValueError):
        subtask_regex(0)


@pytest.mark.parametrize("shape", SHAPES, ids=_ids)
def test_the_utf8_form_is_the_same_grammar_without_the_surrogate_range(shape):
    n, steps, mode, empty, cap = shape
    python = plan_regex(n, steps, mode, allow_empty=empty, max_subtask_chars=cap)
    utf8 = plan_regex(n, steps, mode, allow_empty=empty, max_subtask_chars=cap, utf8=True)
    assert "\\ud800" in python and "\\ud800" not in utf8
    assert utf8 == python.replace("\\ud800-\\udfff", "")
    rng = Random(n + steps)
    for _ in range(50):  # the same plans (no plan can hold a surrogate in UTF-8)
        text = _random_workflow(rng, n, steps, mode).render()
        assert bool(re.fullmatch(python, text)) == bool(re.fullmatch(utf8, text))


def test_byte_level_engines_take_the_utf8_form_only():
    matcher = pytest.importorskip("llguidance").LLMatcher

    def error(pattern: str) -> str:  # "" when valid
        return matcher.validate_grammar(matcher.grammar_from_regex(pattern))

    assert error(plan_regex(3, 2, "index", allow_empty=True, utf8=True)) == ""
    assert "not a Unicode scalar value" in error(plan_regex(3, 2))  # why the utf8 form exists


def test_regex_stays_small_for_the_largest_gateway_plans():
    # GatewayConfig allows up to 20 steps; counted repetition keeps the pattern linear.
    assert len(plan_regex(20, 20)) < 40_000
    assert len(plan_regex(20, 20, "index")) < 120_000


# -- OpenAIPlanSource(structured=True): the request body ------------------------------------------

REPLY = GOOD


def _request(k: int = 2, **kw) -> PlanRequest:
    return PlanRequest(
        question="What is 2 + 2?", workers=tuple(WorkerInfo(id=i) for i in range(k)), **kw
    )


class Recorder:
    """An httpx transport that answers like an OpenAI-compatible server and keeps the bodies."""

    def __init__(self, reply: str = REPLY) -> None:
        self.bodies: list[dict] = []
        self.reply = reply

    def __call__(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        return httpx.Response(
            200,
            json={
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": self.reply},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        )


def _plan(source: OpenAIPlanSource, recorder: Recorder, *requests: PlanRequest):
    async def run():
        source._client = openai.AsyncOpenAI(
            base_url=source.base_url,
            api_key="EMPTY",
            max_retries=0,
            http_client=httpx.AsyncClient(transport=httpx.MockTransport(recorder)),
        )
        try:
            return [await source.plan(r) for r in requests]
        finally:
            await source.aclose()

    return asyncio.run(run())


def test_structured_source_sends_the_plan_regex():
    recorder = Recorder()
    source = OpenAIPlanSource("http://127.0.0.1:9/v1", "tiny", structured=True)
    results = _plan(
        source,
        recorder,
        _request(2),
        _request(3, max_steps=2, access_mode=AccessMode.INDEX),
        _request(2, previous=PreviousRound(plan=GOOD, answer="4")),
    )
    assert all(r.ok for r in results)
    regexes = [b["structured_outputs"]["regex"] for b in recorder.bodies]
    assert regexes == [
        plan_regex(2, 5),
        plan_regex(3, 2, "index"),
        plan_regex(2, 5, allow_empty=True),
    ]
    assert all(set(b["structured_outputs"]) == {"regex"} for b in recorder.bodies)
    assert "guided_regex" not in recorder.bodies[0]  # vLLM ignores that spelling
    assert results[0].extra.get("structured") is True


def test_unstructured_source_sends_no_grammar_and_keeps_extra_body():
    recorder = Recorder()
    source = OpenAIPlanSource("http://127.0.0.1:9/v1", "tiny", extra_body={"top_k": 5})
    _plan(source, recorder, _request())
    assert "structured_outputs" not in recorder.bodies[0]
    assert recorder.bodies[0]["top_k"] == 5


def test_structured_merges_with_other_extra_body_and_caps_subtasks():
    recorder = Recorder()
    source = OpenAIPlanSource(
        "http://127.0.0.1:9/v1",
        "tiny",
        structured=True,
        max_subtask_chars=50,
        extra_body={"top_k": 5},
    )
    _plan(source, recorder, _request())
    body = recorder.bodies[0]
    assert body["top_k"] == 5
    assert body["structured_outputs"] == {"regex": plan_regex(2, 5, max_subtask_chars=50)}


def test_structured_conflicting_with_extra_body_grammar_is_a_config_error():
    with pytest.raises(ConfigError, match="structured_outputs"):
        OpenAIPlanSource(
            "http://127.0.0.1:9/v1",
            "tiny",
            structured=True,
            extra_body={"structured_outputs": {"json": {}}},
        )


def test_factory_passes_structured_through():
    from conductor_core.policy.factory import load_plan_source

    source = load_plan_source("http://127.0.0.1:9", structured=True)
    assert isinstance(source, OpenAIPlanSource) and source.structured
