"""Prompts: the Conductor prompt, descriptor mode, recursion and the worker message contract."""

from __future__ import annotations

import re

import pytest

from conductor_core.workflow.model import AccessMode, Workflow
from conductor_core.workflow.parser import parse_plan
from conductor_core.workflow.prompts import (
    PROMPT_VERSION,
    conductor_messages,
    conductor_prompt,
    plan_messages,
    prompt_digest,
    recursion_prompt,
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


def test_recursion_prompt_shows_previous_plan_and_answer() -> None:
    plan = 'model_id = [1]\nsubtasks = ["Count the weekdays."]\naccess_list = [[]]'
    prompt = recursion_prompt(QUESTION, 3, plan, "23 weekdays")
    assert prompt.startswith(conductor_prompt(QUESTION, 3))
    assert f"<previous_plan>\n{plan}\n</previous_plan>" in prompt
    assert "<previous_answer>\n23 weekdays\n</previous_answer>" in prompt
    assert "model_id = []\nsubtasks = []\naccess_list = []" in prompt
    keep = parse_plan(prompt, workers=3, allow_empty=True)
    assert keep == Workflow(steps=())


def test_conductor_messages() -> None:
    msgs = conductor_messages(QUESTION, 2)
    assert msgs == [{"role": "user", "content": conductor_prompt(QUESTION, 2)}]
    rec = conductor_messages(QUESTION, 2, previous_plan="p", previous_answer="a")
    assert rec[0]["content"] == recursion_prompt(QUESTION, 2, "p", "a")
    with pytest.raises(ValueError, match="previous_plan"):
        conductor_messages(QUESTION, 2, previous_plan="p")


def test_plan_messages_from_a_request() -> None:
    from conductor_core.policy.base import PlanRequest, PreviousRound, WorkerInfo

    workers = (WorkerInfo(0, "fast"), WorkerInfo(1, "slow"))
    req = PlanRequest(question=QUESTION, workers=workers, max_steps=3, descriptors=True)
    assert plan_messages(req)[0]["content"] == conductor_prompt(
        QUESTION, 2, max_steps=3, descriptors=["fast", "slow"]
    )
    req = PlanRequest(question=QUESTION, workers=workers, previous=PreviousRound("p", "a"))
    assert plan_messages(req)[0]["content"] == recursion_prompt(QUESTION, 2, "p", "a")


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
    from conductor_core.workers.simulated import parse_worker_message

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
    from conductor_core.workflow.prompts import compact_prompt

    assert compact_prompt("  What is 2+2?\n", 3, max_steps=5) == (
        "Models: 0, 1, 2. Write a plan of at most 5 steps as three lists: model_id, subtasks, "
        "access_list.\n\nQuestion:\nWhat is 2+2?"
    )
    again = compact_prompt("Q", 2, previous_plan="model_id = []\n", previous_answer=None)
    assert again.endswith(
        "\n\nPrevious plan:\nmodel_id = []\nPrevious answer:\n\n"
        "Write a new plan, or three empty lists to keep the answer."
    )


def test_plan_messages_use_the_request_style() -> None:
    from conductor_core.policy.base import PlanRequest, PreviousRound, WorkerInfo
    from conductor_core.workflow.prompts import compact_prompt, plan_messages

    workers = (WorkerInfo(0), WorkerInfo(1))
    full = PlanRequest(question=QUESTION, workers=workers)
    compact = PlanRequest(question=QUESTION, workers=workers, prompt_style="compact")
    assert plan_messages(full)[0]["content"] == conductor_prompt(QUESTION, 2)
    assert plan_messages(compact)[0]["content"] == compact_prompt(QUESTION, 2)
    previous = PreviousRound(plan="p", answer=None)
    again = PlanRequest(
        question=QUESTION, workers=workers, prompt_style="compact", previous=previous
    )
    assert plan_messages(again)[0]["content"] == compact_prompt(
        QUESTION, 2, previous_plan="p", previous_answer=""
    )


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
