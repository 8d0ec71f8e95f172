"""Round 2 under the plan grammar (train/grammar_sampling.py): the processor records what it
allowed at each step, the batch tensor places it on the round-2 rows, and ``generate`` gets the
processor and is restored (the loss's renormalised log-probabilities:
tests/unit/test_train_offered_mask.py)."""

from __future__ import annotations

import pytest

from conductor_core.policy.base import PlanRequest, PreviousRound, WorkerInfo
from conductor_core.train.config import StageConfig
from conductor_core.train.grammar_sampling import allowed_tensor, generating_under
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


def test_round2_grammar_needs_the_transformers_backend() -> None:
    with pytest.raises(ValueError, match="round2_grammar"):
        StageConfig.model_validate(
            {"generation": {"backend": "vllm"}, "recursive": {"round2_grammar": True}}
        )
