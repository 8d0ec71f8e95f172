"""Round 2 under the plan grammar (train/grammar_sampling.py, train/offered_mask.py): the
processor records what it allowed at each step, the batch tensor places it on the round-2 rows,
``generate`` gets the processor and is restored, and the loss's log-probability of a token is the
one renormalised over the tokens the grammar allowed, equal to a log-softmax over the masked
logits, with gradient."""

from __future__ import annotations

import pytest

from conductor_core.policy.base import PlanRequest, PreviousRound, WorkerInfo
from conductor_core.train.config import StageConfig
from conductor_core.train.grammar_sampling import allowed_tensor, generating_under
from conductor_core.train.offered_mask import backbone_and_head, grammar_log_probs
from conductor_core.workflow.prompts import plan_messages

torch = pytest.importorskip("torch")
pytest.importorskip("llguidance")

WORKERS = tuple(WorkerInfo(id=i) for i in range(4))


def _round2(answer: str = "42") -> PlanRequest:
    return PlanRequest(
        question="What is 6 * 7?",
        workers=WORKERS,
        previous=PreviousRound(
            plan='model_id = [0]\nsubtasks = ["Solve."]\naccess_list = [[]]', answer=answer
        ),
    )


def _prompt_ids(tok, request: PlanRequest) -> list[int]:
    chat = tok.apply_chat_template(
        plan_messages(request), tokenize=False, add_generation_prompt=True
    )
    return tok(chat, add_special_tokens=False)["input_ids"]


def test_a_recorded_round_two_parses_and_its_masks_allow_every_token_it_wrote(tiny) -> None:
    from conductor_core.policy.base import parse_result
    from conductor_core.policy.plan_mask import PlanGrammar

    tok, model = tiny
    requests = [_round2("42"), _round2("41. I am not sure about this.")]
    prompts = [_prompt_ids(tok, r) for r in requests]
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    processor = PlanGrammar(tok).processor(requests, record=True)
    torch.manual_seed(0)
    with generating_under(model, processor):
        assert "generate" in vars(model)
        out = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=True, max_new_tokens=96, pad_token_id=0
        )
    assert "generate" not in vars(model)  # restored
    allowed = processor.allowed()
    completions = out[:, width:]
    assert allowed.shape[:2] == completions.shape and allowed.dtype == torch.bool
    for row, request in enumerate(requests):
        tokens = completions[row].tolist()
        end = tokens.index(tok.eos_token_id) if tok.eos_token_id in tokens else len(tokens)
        for t, token in enumerate(tokens[: end + 1]):
            assert allowed[row, t, token], (row, t)  # every sampled token was allowed
        assert not allowed[row, 0].all()  # the grammar restricts the first token
        if end < len(tokens):  # ended: a keep plan or one that parses, never a malformed plan
            assert parse_result(request, tok.decode(tokens[:end])).ok
    with pytest.raises(Exception, match="record=True"):
        PlanGrammar(tok).processor(requests).allowed()


def test_allowed_tensor_places_the_recorded_rows_and_leaves_the_rest_open() -> None:
    masks = torch.zeros((2, 3, 5), dtype=torch.bool)
    masks[0, :, 1] = True
    masks[1, :, 4] = True
    out = allowed_tensor(masks, [1, 3], 4, 2)
    assert out.shape == (4, 2, 5)
    assert out[0].all() and out[2].all()  # rows sampled unaided
    assert out[1, :, 1].all() and int(out[1].sum()) == 2  # cut to 2 completion tokens
    assert out[3, :, 4].all() and int(out[3].sum()) == 2
    padded = allowed_tensor(masks, [0, 1], 2, 5)
    assert padded[:, 3:].all()  # past the recorded steps every token is allowed
    with pytest.raises(ValueError, match="recorded rows"):
        allowed_tensor(masks, [0], 2, 2)


def test_generating_under_keeps_an_exploration_wrapper_underneath(tiny) -> None:
    _, model = tiny
    seen: list[list] = []

    def explore(*args, **kwargs):
        seen.append(list(kwargs.get("logits_processor") or []))
        return "explored"

    model.generate = explore
    try:
        with generating_under(model, "grammar"):
            assert model.generate(input_ids=None) == "explored"
        assert model.generate is explore
        with generating_under(model, None):
            assert model.generate is explore  # None changes nothing
    finally:
        del model.generate
    assert seen == [["grammar"]]  # the grammar first: the floor then mixes over what it allows


def test_grammar_log_probs_renormalise_over_the_allowed_and_carry_gradient(tiny) -> None:
    tok, model = tiny
    ids = tok("model_id = [3]\nsubtasks", return_tensors="pt", add_special_tokens=False)[
        "input_ids"
    ]
    keep = 3
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
    vocab = logits.shape[-1]
    allowed = torch.ones((1, keep, vocab), dtype=torch.bool)
    allowed[0, 1] = False
    allowed[0, 1, [int(tokens[1]), 5, 6]] = True  # three tokens allowed at the second position
    out = grammar_log_probs(log_probs, states[0][:, -keep - 1 : -1], head, allowed)
    masked = logits[0, -keep].float().clone()
    masked[~allowed[0, 1]] = float("-inf")
    expected = torch.log_softmax(masked, dim=-1)[tokens[1]]
    assert float(out[0, 1].detach()) == pytest.approx(float(expected.detach()), abs=1e-4)
    assert torch.equal(out[0, [0, 2]], log_probs[0, [0, 2]])  # open positions unchanged
    out[0, 1].backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    model.zero_grad()
    untouched = grammar_log_probs(log_probs, None, head, torch.ones((1, keep, vocab), dtype=bool))
    assert untouched is log_probs


def test_round2_grammar_needs_the_transformers_backend() -> None:
    with pytest.raises(ValueError, match="round2_grammar"):
        StageConfig.model_validate(
            {"generation": {"backend": "vllm"}, "recursive": {"round2_grammar": True}}
        )
