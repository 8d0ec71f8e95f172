"""The offered mask (train/offered_mask.py, train/exploration.py): sampling masks the unoffered
workers' ids at every worker slot and records where, and the loss's log-probability of a token at
a masked slot is the renormalised one, differentiable, equal to a log-softmax over the masked
logits."""

from __future__ import annotations

import pytest

from conductor_core.errors import ConfigError
from conductor_core.train.config import StageConfig
from conductor_core.train.exploration import OfferedPrompts, routing_exploration, routing_processor
from conductor_core.train.offered_mask import (
    backbone_and_head,
    grammar_log_probs,
    masked_log_probs,
    slot_tensor,
)
from conductor_core.workflow.prompts import compact_prompt

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _digits(tok) -> list[int]:
    return [tok.encode(str(i), add_special_tokens=False)[0] for i in range(4)]


def test_unoffered_ids_are_masked_at_worker_slots_only_and_recorded(tiny) -> None:
    tok, _ = tiny
    digits = _digits(tok)
    prompt = compact_prompt("What is 2+2?", [1, 3], max_steps=3)
    p_ids = tok.encode(prompt, add_special_tokens=False)
    for text, slot in (("model_id = [", True), ("model_id = [1, ", True), ('subtasks = ["', False)):
        input_ids = torch.tensor([p_ids + tok.encode(text, add_special_tokens=False)])
        scores = torch.zeros((1, len(tok)))
        process = routing_processor(tok, [prompt], [[1, 3]], len(p_ids), 0.0, mask_tokens=digits)
        out = process(input_ids, scores)
        position = input_ids.shape[1] - len(p_ids)
        (log,) = process.slot_log(1)
        if slot:
            assert torch.isinf(out[0, [digits[0], digits[2]]]).all()  # not offered
            assert torch.isfinite(out[0, [digits[1], digits[3]]]).all()
            assert int(torch.isinf(out[0]).sum()) == 2  # nothing else is touched
            assert log == {position: 0b0101}  # pool ids 0 and 2
        else:
            assert torch.equal(out, scores) and log == {}
        (sampled,) = process.sampling_log(input_ids)
        assert sampled == {}  # a masked choice is the policy's own: no log q


def test_the_whole_pool_offered_masks_nothing(tiny) -> None:
    tok, _ = tiny
    prompt = compact_prompt("What is 2+2?", [0, 1, 2, 3], max_steps=3)
    p_ids = tok.encode(prompt, add_special_tokens=False)
    input_ids = torch.tensor([p_ids + tok.encode("model_id = [", add_special_tokens=False)])
    scores = torch.zeros((1, len(tok)))
    process = routing_processor(
        tok, [prompt], [[0, 1, 2, 3]], len(p_ids), 0.0, mask_tokens=_digits(tok)
    )
    assert torch.equal(process(input_ids, scores), scores)
    assert process.slot_log(1) == [{}]


def test_the_floor_mixes_into_the_masked_distribution(tiny) -> None:
    """With a floor as well, ``q`` is the floor's mixture over the masked policy: an unoffered
    id keeps no mass, and the recorded ``log q`` is the mixture's."""
    tok, _ = tiny
    digits = _digits(tok)
    prompt = compact_prompt("What is 2+2?", [1, 3], max_steps=3)
    p_ids = tok.encode(prompt, add_special_tokens=False)
    input_ids = torch.tensor([p_ids + tok.encode("model_id = [", add_special_tokens=False)])
    scores = torch.full((1, len(tok)), -30.0)
    scores[0, digits[0]] = 30.0  # the policy wants an unoffered worker
    scores[0, digits[1]] = 30.0
    process = routing_processor(tok, [prompt], [[1, 3]], len(p_ids), 0.2, mask_tokens=digits)
    probs = torch.softmax(process(input_ids, scores), dim=-1)[0]
    assert float(probs[digits[0]]) == 0.0
    assert float(probs[digits[1]]) == pytest.approx(0.8 + 0.1, abs=1e-4)
    assert float(probs[digits[3]]) == pytest.approx(0.1, abs=1e-4)


def test_a_pool_with_multi_token_ids_is_refused(tiny) -> None:
    tok, model = tiny
    with (
        pytest.raises(ConfigError, match="several tokens"),
        routing_exploration(model, tok, OfferedPrompts(), mask_pool=12),
    ):
        pass


def test_the_mask_needs_the_transformers_backend() -> None:
    with pytest.raises(ValueError, match="mask_unoffered"):
        StageConfig.model_validate(
            {"generation": {"backend": "vllm"}, "adaptive": {"mask_unoffered": True}}
        )


def test_slot_tensor_holds_each_rows_bit_sets() -> None:
    out = slot_tensor([{0: 5, 3: 2}, {}, {9: 1}], 4)
    assert out.tolist() == [[5, 0, 0, 2], [0, 0, 0, 0], [0, 0, 0, 0]]


def _completion_scores(model, ids, keep: int):
    """One forward pass over ``ids``: the logits, the last hidden states predicting the last
    ``keep`` tokens, the LM head, those tokens' log-probabilities (1, keep) and the tokens."""
    backbone, head = backbone_and_head(model)
    states = []
    handle = backbone.register_forward_hook(lambda _m, _a, out: states.append(out[0]))
    try:
        logits = model(input_ids=ids).logits
    finally:
        handle.remove()
    full = torch.log_softmax(logits[0, -keep - 1 : -1].float(), dim=-1)
    tokens = ids[0, -keep:]
    log_probs = full[torch.arange(keep), tokens].unsqueeze(0)
    return logits, states[0][:, -keep - 1 : -1], head, log_probs, tokens


def test_masked_log_probs_renormalise_over_the_offered_and_carry_gradient(tiny) -> None:
    tok, model = tiny
    digits = _digits(tok)
    text = compact_prompt("What is 2+2?", [1, 3], max_steps=3) + "model_id = [3]"
    ids = tok(text, return_tensors="pt", add_special_tokens=False)["input_ids"]
    keep = 3  # score the last three tokens as the completion; the second is treated as a slot
    logits, hidden, head, log_probs, tokens = _completion_scores(model, ids, keep)
    slots = torch.zeros((1, keep), dtype=torch.int64)
    slots[0, 1] = 0b0101  # pool ids 0 and 2 masked at the second completion token
    out = masked_log_probs(log_probs, hidden, head, slots, digits)
    masked_logits = logits[0, -keep + 0].float().clone()  # the logits predicting token 1
    masked_logits[[digits[0], digits[2]]] = float("-inf")
    expected = torch.log_softmax(masked_logits, dim=-1)[tokens[1]]
    got = float(out[0, 1].detach())
    assert got == pytest.approx(float(expected.detach()), abs=1e-4)
    assert got > float(log_probs[0, 1].detach())  # renormalised: more likely
    assert torch.equal(out[0, [0, 2]], log_probs[0, [0, 2]])  # other tokens unchanged
    out[0, 1].backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    model.zero_grad()


def test_grammar_log_probs_renormalise_over_the_allowed_and_carry_gradient(tiny) -> None:
    tok, model = tiny
    ids = tok("model_id = [3]\nsubtasks", return_tensors="pt", add_special_tokens=False)
    keep = 3
    logits, hidden, head, log_probs, tokens = _completion_scores(model, ids["input_ids"], keep)
    vocab = logits.shape[-1]
    allowed = torch.ones((1, keep, vocab), dtype=torch.bool)
    allowed[0, 1] = False
    allowed[0, 1, [int(tokens[1]), 5, 6]] = True  # three tokens allowed at the second position
    out = grammar_log_probs(log_probs, hidden, head, allowed)
    masked = logits[0, -keep].float().clone()
    masked[~allowed[0, 1]] = float("-inf")
    expected = torch.log_softmax(masked, dim=-1)[tokens[1]]
    assert float(out[0, 1].detach()) == pytest.approx(float(expected.detach()), abs=1e-4)
    assert torch.equal(out[0, [0, 2]], log_probs[0, [0, 2]])  # open positions unchanged
    out[0, 1].backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    model.zero_grad()
    everything = torch.ones((1, keep, vocab), dtype=torch.bool)
    assert grammar_log_probs(log_probs, None, head, everything) is log_probs
