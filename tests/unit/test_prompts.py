"""Prompts: the Conductor prompt, descriptor mode, recursion and the worker message contract."""

from __future__ import annotations

import re

import pytest

from conductor_core.workflow.model import AccessMode, Workflow
from conductor_core.workflow.parser import parse_plan
from conductor_core.workflow.prompts import (
    PROMPT_VERSION,
    compact_prompt,
    conductor_messages,
    conductor_prompt,
    plan_messages,
    prompt_digest,
    worked_examples,
    worker_message,
)

QUESTION = "How many weekdays are there in March 2027?"


@pytest.mark.parametrize("mode", list(AccessMode))
def test_four_examples_each_parse_in_their_mode(mode: AccessMode) -> None:
    examples = worked_examples(mode)
    assert len(examples) == 4
    plans = [parse_plan(e, workers=3, access_mode=mode) for e in examples]
    assert sorted(len(p) for p in plans) == [1, 2, 3, 4]
    accesses = {s.access for p in plans for s in p.steps}
    assert "all" in accesses and () in accesses
    if mode is AccessMode.INDEX:
        assert any(isinstance(a, tuple) and a for a in accesses), "index examples list steps"
    prompt = conductor_prompt(QUESTION, 3, access_mode=mode)
    for n, example in enumerate(examples, start=1):
        assert f"Example {n}:\n{example}" in prompt


def test_examples_avoid_benchmark_task_types() -> None:
    text = "\n".join(worked_examples()).lower()
    for word in ("mmlu", "integral", "theorem", "def ", "multiple choice", "(a)", "leetcode"):
        assert word not in text


def test_prompt_structure_and_order() -> None:
    prompt = conductor_prompt(QUESTION, 3, max_steps=4)
    assert "at most 4 steps" in prompt
    order = [
        prompt.index("Each step of a plan"),
        prompt.index("How a plan is executed"),
        prompt.index("Output format"),
        prompt.index("Example 1:"),
        prompt.index(QUESTION),
        prompt.index("Available models:"),
    ]
    assert order == sorted(order)
    assert prompt.rstrip().endswith("Model 0\nModel 1\nModel 2")
    assert '["all"]' in prompt and "[]" in prompt


def test_index_mode_uses_its_own_output_spec() -> None:
    binary = conductor_prompt(QUESTION, 2)
    index = conductor_prompt(QUESTION, 2, access_mode="index")
    assert "earlier step numbers" in index and "earlier step numbers" not in binary


def test_models_are_anonymous() -> None:
    prompt = conductor_prompt(QUESTION, 4)
    models = prompt[prompt.index("Available models:") :]
    assert models.splitlines()[1:] == ["Model 0", "Model 1", "Model 2", "Model 3"]
    for name in ("gpt", "claude", "gemini", "qwen", "llama", "deepseek"):
        assert name not in prompt.lower()


def test_offered_ids_and_worker_info_objects() -> None:
    class Info:
        def __init__(self, id: int, description: str = "") -> None:
            self.id, self.description = id, description

    assert conductor_prompt(QUESTION, [0, 2]).endswith("Model 0\nModel 2")
    assert conductor_prompt(QUESTION, [Info(1), Info(3)]).endswith("Model 1\nModel 3")


def test_descriptor_mode() -> None:
    prompt = conductor_prompt(QUESTION, 2, descriptors=["strong at arithmetic", "careful\nchecker"])
    assert prompt.endswith("Model 0: strong at arithmetic\nModel 1: careful checker")
    with pytest.raises(ValueError, match="descriptors"):
        conductor_prompt(QUESTION, 3, descriptors=["only one"])


@pytest.mark.parametrize("workers", [0, [], True])
def test_bad_pool_is_a_clear_error(workers) -> None:
    with pytest.raises(ValueError, match="workers"):
        conductor_prompt(QUESTION, workers)


def test_question_markers_are_not_expanded() -> None:
    prompt = conductor_prompt("What does {{models}} mean?", 2)
    assert "What does {{models}} mean?" in prompt


PLAN = 'model_id = [1]\nsubtasks = ["Count the weekdays."]\naccess_list = [[]]'

FULL_TURN = (
    "The final answer of that plan was:\n<previous_answer>\n23 weekdays\n</previous_answer>\n\n"
    "Decide whether that answer can be improved. If it can, write a new plan in the same format; "
    'a step whose access list is ["all"] also sees the previous final answer. If the answer '
    "should stand, keep it by ending your reply with three empty lists:\n"
    "model_id = []\nsubtasks = []\naccess_list = []"
)
COMPACT_TURN = (
    "Previous answer:\n23 weekdays\nWrite a new plan, or three empty lists to keep the answer."
)


@pytest.mark.parametrize(
    ("style", "first", "turn"),
    [
        ("full", conductor_prompt(QUESTION, 3), FULL_TURN),
        ("compact", compact_prompt(QUESTION, 3), COMPACT_TURN),
    ],
    ids=["full", "compact"],
)
def test_recursion_round_is_the_round_1_prompt_the_plan_then_the_recursion_turn(
    style, first, turn
) -> None:
    """Version 3: the Conductor sees its previous plan as its own turn, then the answer."""
    messages = conductor_messages(
        QUESTION, 3, style=style, previous_plan=f"\n{PLAN}\n", previous_answer=" 23 weekdays\n"
    )
    assert messages == [
        {"role": "user", "content": first},
        {"role": "assistant", "content": PLAN},
        {"role": "user", "content": turn},
    ]
    # round 1 is asked exactly as a request without a previous round
    assert messages[:1] == conductor_messages(QUESTION, 3, style=style)
    assert "Count the weekdays" not in messages[2]["content"]  # the plan is not quoted again


def test_the_full_recursion_turn_shows_the_keep_plan() -> None:
    assert parse_plan(FULL_TURN, workers=3, allow_empty=True) == Workflow(steps=())


def test_a_model_of_an_older_prompt_version_is_asked_in_one_message() -> None:
    """Prompt versions 1 and 2 learned the recursion round as one user message (its text is
    unchanged since then): the round-1 prompt, the quoted plan, then the same recursion turn."""
    full = conductor_messages(
        QUESTION, 3, previous_plan=PLAN, previous_answer="23 weekdays", version="2"
    )
    assert full == [
        {
            "role": "user",
            "content": f"{conductor_prompt(QUESTION, 3)}\n\nThis is a further round for the same "
            f"question. Your previous plan was:\n<previous_plan>\n{PLAN}\n</previous_plan>\n\n"
            f"{FULL_TURN}",
        }
    ]
    compact = conductor_messages(
        QUESTION, 3, style="compact", previous_plan=PLAN, previous_answer="23 weekdays", version="1"
    )
    assert compact == [
        {
            "role": "user",
            "content": f"{compact_prompt(QUESTION, 3)}\n\nPrevious plan:\n{PLAN}\n{COMPACT_TURN}",
        }
    ]
    # the layout does not matter for round 1
    assert conductor_messages(QUESTION, 3, version="2") == conductor_messages(QUESTION, 3)


def test_a_separator_in_the_previous_round_does_not_split_the_template() -> None:
    messages = conductor_messages(QUESTION, 2, previous_plan="p\n%%\nq", previous_answer="%%\nx")
    assert messages[1]["content"] == "p\n%%\nq"
    assert "<previous_answer>\n%%\nx\n</previous_answer>" in messages[2]["content"]


def test_conductor_messages() -> None:
    msgs = conductor_messages(QUESTION, 2)
    assert msgs == [{"role": "user", "content": conductor_prompt(QUESTION, 2)}]
    with pytest.raises(ValueError, match="previous_plan"):
        conductor_messages(QUESTION, 2, previous_plan="p")


def test_plan_messages_from_a_request() -> None:
    from dataclasses import replace

    from conductor_core.policy.base import PlanRequest, PreviousRound, WorkerInfo

    workers = (WorkerInfo(0, "fast"), WorkerInfo(1, "slow"))
    req = PlanRequest(question=QUESTION, workers=workers, max_steps=3, descriptors=True)
    assert plan_messages(req) == conductor_messages(
        QUESTION, 2, max_steps=3, descriptors=["fast", "slow"]
    )
    req = PlanRequest(question=QUESTION, workers=workers, previous=PreviousRound("p", "a"))
    assert plan_messages(req) == conductor_messages(
        QUESTION, 2, previous_plan="p", previous_answer="a"
    )
    assert [m["role"] for m in plan_messages(req)] == ["user", "assistant", "user"]
    older = replace(req, prompt_version="2")  # a model saved with version 2
    assert plan_messages(older) == conductor_messages(
        QUESTION, 2, previous_plan="p", previous_answer="a", version="2"
    )
    assert len(plan_messages(older)) == 1


_STEP = re.compile(
    r'<step agent="agent_(\d+)">\n<subtask>\n(.*?)\n</subtask>\n<response>\n(.*?)\n</response>\n'
    r"</step>",
    re.DOTALL,
)


def test_worker_message_exact_layout() -> None:
    msg = worker_message("Q?", [(0, "s0", "r0")], "mine", previous_answer="prev")
    preamble, rest = msg.split("\n\n", 1)
    assert "subtask" in preamble and "<" not in preamble
    assert rest == (
        "<question>\nQ?\n</question>\n\n"
        "<previous_answer>\nprev\n</previous_answer>\n\n"
        '<step agent="agent_0">\n<subtask>\ns0\n</subtask>\n<response>\nr0\n</response>\n</step>'
        "\n\nYour assigned subtask:\nmine"
    )


def test_worker_message_contains_exactly_the_visible_steps() -> None:
    visible = [(0, "Solve it.", "x = 4"), (2, "Check\nit.", "Looks right.\nx = 4")]
    msg = worker_message("Find x.", visible, "Give the final answer.")
    assert _STEP.findall(msg) == [
        ("0", "Solve it.", "x = 4"),
        ("2", "Check\nit.", "Looks right.\nx = 4"),
    ]
    assert "agent_1" not in msg
    assert "<previous_answer>" not in msg
    assert msg.endswith("Your assigned subtask:\nGive the final answer.")
    bare = worker_message("Find x.", [], "Solve it.")
    assert "<step" not in bare and "<question>\nFind x.\n</question>" in bare


def test_worker_message_is_understood_by_the_simulated_workers() -> None:
    from conductor_core.simulation.provider import parse_worker_message

    msg = worker_message("Q?", [(1, "a", "b")], "do it", previous_answer="p")
    parsed = parse_worker_message(msg)
    assert (parsed.question, parsed.subtask, parsed.previous_answer) == ("Q?", "do it", "p")
    assert [(s.agent, s.subtask, s.response) for s in parsed.steps] == [("agent_1", "a", "b")]


def test_prompt_digest_and_version() -> None:
    assert prompt_digest("abc") == "ba7816bf8f01cfea"
    assert prompt_digest("abc") != prompt_digest("abd")
    assert PROMPT_VERSION


def test_compact_prompt_text_is_stable() -> None:
    """Tiny models are trained on this exact text (and their tokenizer corpus holds it)."""
    assert compact_prompt("  What is 2+2?\n", 3, max_steps=5) == (
        "Models: 0, 1, 2. Write a plan of at most 5 steps as three lists: model_id, subtasks, "
        "access_list.\n\nQuestion:\nWhat is 2+2?"
    )


def test_plan_messages_use_the_request_style() -> None:
    from conductor_core.policy.base import PlanRequest, PreviousRound, WorkerInfo

    workers = (WorkerInfo(0), WorkerInfo(1))
    full = PlanRequest(question=QUESTION, workers=workers)
    compact = PlanRequest(question=QUESTION, workers=workers, prompt_style="compact")
    assert plan_messages(full)[0]["content"] == conductor_prompt(QUESTION, 2)
    assert plan_messages(compact)[0]["content"] == compact_prompt(QUESTION, 2)
    previous = PreviousRound(plan="p", answer=None)
    again = PlanRequest(
        question=QUESTION, workers=workers, prompt_style="compact", previous=previous
    )
    assert plan_messages(again) == [
        {"role": "user", "content": compact_prompt(QUESTION, 2)},
        {"role": "assistant", "content": "p"},
        {
            "role": "user",
            "content": "Previous answer:\n\nWrite a new plan, or three empty lists "
            "to keep the answer.",
        },
    ]


def test_prompt_spec_saved_and_read_back(tmp_path) -> None:
    from conductor_core.workflow.prompts import (
        PROMPT_SPEC_FILE,
        PromptStyle,
        load_prompt_spec,
        save_prompt_spec,
    )

    assert load_prompt_spec(tmp_path) is None
    save_prompt_spec(tmp_path, "compact")
    spec = load_prompt_spec(tmp_path)
    assert spec is not None and spec.style is PromptStyle.COMPACT
    assert spec.version == PROMPT_VERSION
    (tmp_path / PROMPT_SPEC_FILE).write_text('{"prompt_style": "chatty"}')
    with pytest.raises(ValueError, match=PROMPT_SPEC_FILE):
        load_prompt_spec(tmp_path)
