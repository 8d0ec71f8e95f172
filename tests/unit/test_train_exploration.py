"""Routing exploration (train/exploration.py): where the floor applies and how much it moves,
that coverage routes each group's plans to distinct offered workers, that the offered workers come
from the data (recorded per prompt, never read from the prompt's text), that ``generate`` is
left as it was, and that the sampling probability of every changed token is recorded and turned
into truncated importance weights."""

from __future__ import annotations

import math
from contextlib import nullcontext

import pytest

from conductor_core.train.exploration import (
    OfferedPrompts,
    importance_weights,
    routing_exploration,
    routing_processor,
    sampling_log_probs,
    without_coverage,
)
from conductor_core.workflow.prompts import compact_prompt

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def test_offered_prompts_are_recorded_by_token_ids() -> None:
    offered = OfferedPrompts()
    offered.record([[5, 6, 7], [5, 6]], [[1, 3], (0, 2)])
    assert offered.get([5, 6, 7]) == (1, 3) and offered.get((5, 6)) == (0, 2)
    assert offered.get([5]) is None and len(offered) == 2
    with pytest.raises(ValueError, match="2 prompts but 1"):
        offered.record([[1], [2]], [[0]])
    offered.clear()
    assert offered.get([5, 6, 7]) is None


def _apply(
    tok, prompt: str, completion: str, floor: float, offered: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """The floor's output for one row (``prompt`` + ``completion``, offering ``offered``) on
    logits favouring ``]``."""
    p_ids = tok.encode(prompt, add_special_tokens=False)
    input_ids = torch.tensor([p_ids + tok.encode(completion, add_special_tokens=False)])
    scores = torch.full((1, len(tok)), -30.0)
    scores[0, tok.encode("]", add_special_tokens=False)[0]] = 30.0
    process = routing_processor(tok, [prompt], [offered], len(p_ids), floor)
    return process(input_ids, scores), scores


def test_floor_lifts_offered_ids_at_a_worker_slot_only(tiny) -> None:
    tok, _ = tiny
    prompt = compact_prompt("What is 2+2?", [0, 2, 3], max_steps=3)
    digit = {i: tok.encode(str(i), add_special_tokens=False)[0] for i in range(4)}
    for slot in ("model_id = [", "model_id = [2, "):
        out, _ = _apply(tok, prompt, slot, 0.3, [0, 2, 3])
        probs = torch.softmax(out, dim=-1)[0]
        for i in (0, 2, 3):
            assert probs[digit[i]] == pytest.approx(0.1, abs=1e-3)  # 0.3 over 3 offered ids
        assert probs[digit[1]] < 1e-6  # not offered
        assert probs[tok.encode("]", add_special_tokens=False)[0]] == pytest.approx(0.7, abs=1e-3)
    for elsewhere in ('model_id = [2]\nsubtasks = ["', "access_list = [[], ["):
        out, scores = _apply(tok, prompt, elsewhere, 0.3, [0, 2, 3])
        assert torch.equal(out, scores)  # not a worker slot: the policy as it is


def test_the_offered_ids_come_from_the_data_not_the_prompt_text(tiny) -> None:
    """The floor spreads over the ids the row offers, whatever the prompt's text names."""
    tok, _ = tiny
    prompt = compact_prompt("What is 2+2?", [0, 1, 2, 3], max_steps=3)
    digit = {i: tok.encode(str(i), add_special_tokens=False)[0] for i in range(4)}
    out, _ = _apply(tok, prompt, "model_id = [", 0.3, [1, 3])
    probs = torch.softmax(out, dim=-1)[0]
    assert probs[digit[1]] == pytest.approx(0.15, abs=1e-3)
    assert probs[digit[3]] == pytest.approx(0.15, abs=1e-3)
    assert probs[digit[0]] < 1e-6 and probs[digit[2]] < 1e-6
    out, scores = _apply(tok, prompt, "model_id = [", 0.3, [])  # offers nothing: as it is
    assert torch.equal(out, scores)


def _first_ids(
    tok,
    model,
    prompt: str,
    offered: list[int],
    rows: int,
    paused: bool = False,
    **exploration: float,
) -> list[int]:
    """The token sampled right after ``model_id = [`` for ``rows`` copies of ``prompt`` (recorded
    as offering ``offered``), under :func:`routing_exploration` with ``exploration`` (floor,
    coverage); ``paused``: inside :func:`without_coverage` as well."""
    ids = tok([prompt] * rows, return_tensors="pt", add_special_tokens=False)
    recorded = OfferedPrompts()
    recorded.record([tok.encode(prompt, add_special_tokens=False)], [offered])
    opening = tok.encode("model_id = [", add_special_tokens=False)
    everything = list(range(len(tok)))
    n_prompt = ids["input_ids"].shape[1]

    def open_the_list(_: int, sofar: torch.Tensor) -> list[int]:
        done = len(sofar) - n_prompt
        return [opening[done]] if done < len(opening) else everything

    with routing_exploration(model, tok, recorded, **exploration):
        wrapped = model.generate
        with without_coverage(recorded) if paused else nullcontext():
            out = model.generate(
                **ids,
                max_new_tokens=len(opening) + 1,
                do_sample=True,
                pad_token_id=0,
                prefix_allowed_tokens_fn=open_the_list,
            )
        assert model.generate is wrapped  # a pause ends with the exploration back in place
    return out[:, -1].tolist()


def test_generate_samples_offered_workers_and_is_restored(tiny) -> None:
    tok, model = tiny
    class_generate = type(model).generate
    digit = {i: tok.encode(str(i), add_special_tokens=False)[0] for i in range(4)}
    chosen = _first_ids(
        tok, model, compact_prompt("What is 2+2?", [1, 3], max_steps=3), [1, 3], 64, floor=0.9
    )
    share = sum(t in (digit[1], digit[3]) for t in chosen) / len(chosen)
    assert share >= 0.8  # at least 0.9 of the mass sits on the two offered ids
    assert {digit[1], digit[3]} <= set(chosen)
    assert "generate" not in vars(model)
    assert type(model).generate is class_generate


def test_floor_outside_its_range_is_refused(tiny) -> None:
    tok, model = tiny
    with (
        pytest.raises(ValueError, match=r"\[0, 1\)"),
        routing_exploration(model, tok, OfferedPrompts(), 1.0),
    ):
        pass


def test_generating_a_prompt_that_was_not_recorded_is_refused(tiny) -> None:
    tok, model = tiny
    prompt = compact_prompt("What is 2+2?", [1, 3], max_steps=3)
    ids = tok([prompt], return_tensors="pt", add_special_tokens=False)
    with (
        pytest.raises(RuntimeError, match="1 of 1 prompts"),
        routing_exploration(model, tok, OfferedPrompts(), 0.5),
    ):
        model.generate(**ids, max_new_tokens=1, pad_token_id=0)
    assert "generate" not in vars(model)


@pytest.mark.parametrize("field", [("routing_floor", 0.1), ("routing_coverage", 2)])
def test_exploration_needs_the_transformers_backend(field: tuple[str, float]) -> None:
    from conductor_core.errors import ConfigError
    from conductor_core.train.config import StageConfig

    name, value = field
    with pytest.raises((ConfigError, ValueError), match=name):
        StageConfig.model_validate(
            {"generation": {"backend": "vllm"}, "experimental": {name: value}}
        )


def _slot_batch(tok, prompts: list[str], completion: str) -> tuple[torch.Tensor, int]:
    """Rows of ``prompts`` (left-padded to one length) each followed by ``completion``."""
    heads = [tok.encode(p, add_special_tokens=False) for p in prompts]
    width = max(len(h) for h in heads)
    tail = tok.encode(completion, add_special_tokens=False)
    rows = [[0] * (width - len(h)) + h + tail for h in heads]
    return torch.tensor(rows), width


def test_coverage_routes_each_group_to_distinct_offered_workers(tiny) -> None:
    tok, _ = tiny
    first = compact_prompt("What is 2+2?", [0, 1, 2, 3], max_steps=3)
    second = compact_prompt("Spell cat backwards.", [1, 3], max_steps=3)
    prompts = [first] * 5 + [second] * 3
    digit = {tok.encode(str(i), add_special_tokens=False)[0]: i for i in range(4)}
    for slot in ("model_id = [", "model_id = [2, "):
        input_ids, width = _slot_batch(tok, prompts, slot)
        scores = torch.zeros((len(prompts), len(tok)))
        offered = [[0, 1, 2, 3]] * 5 + [[1, 3]] * 3
        out = routing_processor(tok, prompts, offered, width, 0.0, coverage=4)(input_ids, scores)
        forced = [digit.get(int(out[r].argmax())) for r in range(len(prompts))]
        assert all(torch.isinf(out[r]).sum() == len(tok) - 1 for r in (0, 1, 2, 3, 5, 6, 7))
        assert sorted(forced[:4]) == [0, 1, 2, 3]  # four plans, four different workers
        assert torch.equal(out[4], scores[4])  # the fifth plan samples the policy
        assert sorted(forced[5:7]) == [1, 3] and forced[7] in (1, 3)  # offered ids only, cycled


def test_coverage_keeps_one_worker_per_plan_across_slots(tiny) -> None:
    """One processor serves a whole ``generate`` call: a plan's worker is drawn once."""
    tok, _ = tiny
    _, steps = _two_covered_slots(tok, rows=4)
    chosen = [out.argmax(-1).tolist() for _, _, out in steps]
    assert chosen[0] == chosen[1]


def _two_covered_slots(tok, rows: int) -> tuple:
    """One coverage processor (coverage 4, 4 offered workers) over ``rows`` plans at a first and
    a second worker slot: ``(processor, [(input_ids, completion position, output)] per slot)``."""
    prompt = compact_prompt("What is 2+2?", [0, 1, 2, 3], max_steps=3)
    process = None
    steps = []
    for slot in ("model_id = [", "model_id = [1, "):
        input_ids, width = _slot_batch(tok, [prompt] * rows, slot)
        process = process or routing_processor(
            tok, [prompt] * rows, [[0, 1, 2, 3]] * rows, width, 0.0, coverage=4
        )
        out = process(input_ids, torch.zeros((rows, len(tok))))
        steps.append((input_ids, input_ids.shape[1] - width, out))
    return process, steps


def test_coverage_samples_distinct_workers_in_generate(tiny) -> None:
    tok, model = tiny
    digit = {tok.encode(str(i), add_special_tokens=False)[0]: i for i in range(4)}
    prompt = compact_prompt("What is 2+2?", [0, 1, 2, 3], max_steps=3)
    chosen = _first_ids(tok, model, prompt, [0, 1, 2, 3], 8, coverage=4)
    assert sorted(digit[t] for t in chosen[:4]) == [0, 1, 2, 3]
    assert "generate" not in vars(model)
    with (
        pytest.raises(ValueError, match="coverage"),
        routing_exploration(model, tok, OfferedPrompts(), coverage=-1),
    ):
        pass


def test_without_coverage_samples_the_policy_or_the_floor_inside_exploration(tiny) -> None:
    """The recursive stage's second round: coverage would write a worker id at every slot (no
    keep plan); paused, the policy's own choice comes back, mixed with the floor if any."""
    tok, model = tiny
    digit = {i: tok.encode(str(i), add_special_tokens=False)[0] for i in range(4)}
    prompt = compact_prompt("What is 2+2?", [1, 3], max_steps=3)
    offered = {digit[1], digit[3]}
    explored = _first_ids(tok, model, prompt, [1, 3], 32, coverage=32)
    paused = _first_ids(tok, model, prompt, [1, 3], 32, paused=True, coverage=32)
    floored = _first_ids(tok, model, prompt, [1, 3], 32, paused=True, floor=0.99, coverage=32)
    assert sum(t in offered for t in explored) == 32
    assert sum(t in offered for t in paused) < 16  # the random tiny policy: anything
    assert sum(t in offered for t in floored) >= 28
    assert "generate" not in vars(model)


def test_the_floor_records_the_sampling_probability_of_the_token_drawn(tiny) -> None:
    """What the loss's importance weights need: ``log q`` of the token actually sampled at a
    floor slot, from the mixture the processor handed to sampling."""
    tok, _ = tiny
    prompt = compact_prompt("What is 2+2?", [0, 2, 3], max_steps=3)
    p_ids = tok.encode(prompt, add_special_tokens=False)
    close = tok.encode("]", add_special_tokens=False)[0]
    two = tok.encode("2", add_special_tokens=False)[0]
    for drawn, q in ((two, 0.1), (close, 0.7)):
        input_ids = torch.tensor([p_ids + tok.encode("model_id = [", add_special_tokens=False)])
        scores = torch.full((1, len(tok)), -30.0)
        scores[0, close] = 30.0
        process = routing_processor(tok, [prompt], [[0, 2, 3]], len(p_ids), 0.3)
        process(input_ids, scores)
        position = input_ids.shape[1] - len(p_ids)
        sequences = torch.cat([input_ids, torch.tensor([[drawn]])], dim=1)
        (log,) = process.sampling_log(sequences)
        assert list(log) == [position]
        assert log[position] == pytest.approx(math.log(q), abs=1e-3)


def test_coverage_records_a_uniform_first_choice_and_certain_later_ones(tiny) -> None:
    """A covered plan's worker is a uniform draw over the ``n`` offered workers (probability
    ``1 / n``) at its first id, and follows from it (probability 1) at later ones; plans the
    coverage leaves to the policy record nothing."""
    tok, _ = tiny
    process, steps = _two_covered_slots(tok, rows=5)
    positions = [position for _, position, _ in steps]
    logs = process.sampling_log(steps[-1][0])
    for row in range(4):
        assert logs[row] == {positions[0]: pytest.approx(-math.log(4)), positions[1]: 0.0}
    assert logs[4] == {}


def test_sampling_log_probs_are_nan_where_the_policy_sampled() -> None:
    rows = sampling_log_probs([[5, 6, 7], [8]], [{1: -0.5, 9: -1.0}, {}])
    assert math.isnan(rows[0][0]) and rows[0][1] == -0.5 and math.isnan(rows[0][2])
    assert len(rows[0]) == 3 and len(rows[1]) == 1 and math.isnan(rows[1][0])
    assert all(math.isnan(v) for row in sampling_log_probs([[1, 2]], None) for v in row)


def test_importance_weights_are_truncated_ratios_at_changed_tokens_only() -> None:
    log_pi = torch.log(torch.tensor([[0.5, 0.9, 0.2], [0.9, 0.9, 0.9]]))
    nan = float("nan")
    log_q = torch.log(torch.tensor([[0.25, nan, 0.1], [0.01, nan, nan]]))
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    weights, stats = importance_weights(log_pi, log_q, mask, cap=3.0)
    expected = torch.tensor([[2.0, 1.0, 2.0], [3.0, 1.0, 1.0]])  # 0.9 / 0.01 = 90, cut to 3
    assert torch.allclose(weights, expected)
    assert stats["exploration/tokens"] == 3.0
    assert stats["exploration/ratio_min"] == pytest.approx(2.0)
    assert stats["exploration/ratio_mean"] == pytest.approx(7 / 3)
    untouched, none = importance_weights(log_pi, torch.full_like(log_q, nan), mask, cap=3.0)
    assert torch.equal(untouched, torch.ones_like(log_pi)) and none == {}


def test_generate_under_the_offered_mask_names_only_offered_workers(tiny) -> None:
    """The offered mask (train/offered_mask.py) in ``generate``: the random tiny policy names
    any token after ``model_id = [`` (the test above); masked, never an unoffered worker's id."""
    tok, model = tiny
    digit = {i: tok.encode(str(i), add_special_tokens=False)[0] for i in range(4)}
    prompt = compact_prompt("What is 2+2?", [1, 3], max_steps=3)
    unoffered = {digit[0], digit[2]}
    torch.manual_seed(0)
    masked = _first_ids(tok, model, prompt, [1, 3], 64, mask_pool=4)
    tilted = _first_ids(tok, model, prompt, [1, 3], 64, floor=0.9, mask_pool=4)
    assert not unoffered & set(masked) and not unoffered & set(tilted)
    assert sum(t in (digit[1], digit[3]) for t in tilted) >= 48  # the floor on top
    assert "generate" not in vars(model)
