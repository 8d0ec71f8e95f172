"""Format warm-up: synthetic plans are valid with uniformly random workers; the loss covers the
prompt tokens only when asked (a few training steps lower the loss:
tests/integration/test_train_warmup.py)."""

from __future__ import annotations

from collections import Counter
from random import Random

import pytest

from conductor_core.tasks.problem import read_problems
from conductor_core.train.config import build_config
from conductor_core.train.data import select_problems
from conductor_core.train.warmup import (
    KEEP_PLAN,
    encode_example,
    synthetic_plan,
    warmup_texts,
)
from conductor_core.workers.bundled import bundled_train_problems_path
from conductor_core.workflow.parser import parse_plan

PROBLEMS = select_problems(read_problems(bundled_train_problems_path()), "train", 60)


def test_synthetic_plans_parse_and_use_every_worker():
    rng = Random(0)
    workers = Counter()
    for _ in range(400):
        wf = parse_plan(synthetic_plan(rng, 4, max_plan_steps=3), workers=4)
        assert 1 <= len(wf) <= 3
        workers.update(wf.worker_ids())
    assert set(workers) == {0, 1, 2, 3}
    assert min(workers.values()) > 0.15 * sum(workers.values())


def test_synthetic_plans_can_end_with_a_step_that_reads_every_earlier_one():
    rng = Random(0)
    lengths = Counter()
    for _ in range(300):
        plan = synthetic_plan(
            rng, 4, max_plan_steps=4, subtasks=["Solve part 1."], last_step="Sum up."
        )
        steps = parse_plan(plan, workers=4).steps
        lengths[len(steps)] += 1
        if len(steps) > 1:
            assert steps[-1].subtask == "Sum up."
            assert steps[-1].visible(len(steps) - 1) == tuple(range(len(steps) - 1))
            assert all(s.subtask == "Solve part 1." for s in steps[:-1])
        else:
            assert steps[0].subtask == "Solve part 1."  # one step: drawn like the others
    assert set(lengths) == {1, 2, 3, 4}
    spec = {"warmup": {"last_step": "Sum up.", "max_plan_steps": 4}, "data": {"max_steps": 4}}
    config = build_config(spec, profile="tiny")
    pairs = warmup_texts(PROBLEMS, 4, config, 40, seed=2)
    # a recursion round's "keep" and a one-step plan have no last step of their own
    assert sum('"Sum up."' in plan for _, plan in pairs) > 10


def test_warmup_texts_mix_in_recursion_rounds():
    config = build_config({"experimental": {"warmup_recursion_fraction": 0.5}}, profile="tiny")
    pairs = warmup_texts(PROBLEMS, 4, config, 200, seed=1)
    # a recursion round: the round-1 prompt, the previous plan as the model's turn, the answer
    recursion = [(m, p) for m, p in pairs if len(m) == 3]
    assert 60 < len(recursion) < 140
    assert all([r["role"] for r in m] == ["user", "assistant", "user"] for m, _ in recursion)
    assert all(m[2]["content"].startswith("Previous answer:") for m, _ in recursion)
    for m, _ in recursion:
        parse_plan(m[1]["content"], workers=4)  # the previous plan is a valid plan
    keeps = [p for _, p in recursion if p == KEEP_PLAN]
    assert 0 < len(keeps) < len(recursion)
    assert all(len(m) == 1 and p != KEEP_PLAN for m, p in pairs if len(m) != 3)
    for _, p in pairs:
        parse_plan(p, workers=4, allow_empty=True)


def test_warmup_offers_random_subsets_and_plans_name_only_offered_workers():
    """The warm-up teaches that a plan names only the workers its prompt lists: without it the
    adaptive stage starts from a model that never read the list."""
    import re

    config = build_config({}, profile="tiny")
    pairs = warmup_texts(PROBLEMS, 4, config, 300, seed=2)
    sizes = Counter()
    for messages, plan in pairs:
        listed = re.match(r"Models: ([\d, ]+)\.", messages[0]["content"])  # the compact prompt
        assert listed is not None
        offered = [int(i) for i in listed.group(1).split(", ")]
        sizes[len(offered)] += 1
        wf = parse_plan(plan, workers=offered, allow_empty=True)
        assert set(wf.worker_ids()) <= set(offered)
    assert set(sizes) == {2, 3, 4}  # adaptive.k_min = 2 up to the whole pool
    assert min(sizes.values()) > 50


def test_descriptor_mode_warmup_shows_the_prompt_the_stage_trains_on():
    """In descriptor mode the warm-up's prompts show the descriptions, under random ids with
    ``adaptive.renumber``, as the stage's dataset does (before, it showed bare pool ids, so the
    description words first appeared in GRPO); its plans name only the ids shown."""
    import re

    from conductor_core.workers.bundled import bundled_train_pool_path
    from conductor_core.workers.config import load_pool

    descriptions = [w.description for w in load_pool(bundled_train_pool_path()).workers]
    config = build_config(
        {"data": {"descriptors": True}, "adaptive": {"renumber": True}},
        stage="adaptive",
        profile="tiny",
    )
    pairs = warmup_texts(PROBLEMS, 4, config, 200, seed=2, descriptions=descriptions)
    seen_ids: set[int] = set()
    for messages, plan in pairs:
        listed = re.match(r"Models: (.+?)\. [A-Z]", messages[0]["content"])
        assert listed is not None
        shown = [item.rsplit(": ", 1) for item in listed.group(1).split(", ")]
        assert all(text in descriptions for text, _ in shown)  # each id carries a description
        ids = [int(i) for _, i in shown]
        seen_ids.update(ids)
        assert set(parse_plan(plan, workers=ids, allow_empty=True).worker_ids()) <= set(ids)
    assert len(seen_ids) > 4  # random ids below 10, not the pool's 0-3
    plain = warmup_texts(PROBLEMS, 4, build_config({}, profile="tiny"), 50, seed=2)
    assert all("strong at" not in m[0]["content"] for m, _ in plain)  # no descriptions otherwise


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from conductor_core.policy.tiny import build_tiny_conductor

    path = build_tiny_conductor(
        tmp_path_factory.mktemp("tiny") / "m", hidden=64, heads=2, kv_heads=1, layers=1, vocab=300
    )
    return AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path)


def test_prompt_loss_switch(tiny):
    _, tok = tiny
    messages = [{"role": "user", "content": "Calculate: 1 + 2 = ?"}]
    ids, labels = encode_example(tok, messages, "model_id = [0]", prompt_loss=False)
    assert len(ids) == len(labels) and ids[-1] == tok.eos_token_id
    masked = labels.count(-100)
    assert masked > 0 and labels[masked:] == ids[masked:]
    _, full = encode_example(tok, messages, "model_id = [0]", prompt_loss=True)
    assert full == ids


def test_own_plans_are_none_where_the_greedy_plan_does_not_parse(tiny):
    """The model's own greedy plans (the recursion expert start's round-1 plans): a random tiny
    model writes none that parses."""
    from conductor_core.solve import plan_request
    from conductor_core.train.data import stage_options
    from conductor_core.train.warmup import own_plans

    model, tok = tiny
    config = build_config({}, stage="recursive", profile="tiny")
    request = plan_request("What is 2+2?", 4, stage_options(config))
    assert own_plans(model, tok, config, [request, request]) == [None, None]
