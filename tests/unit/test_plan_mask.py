"""The local Conductor under the plan grammar (policy/plan_mask.py): the token mask is exactly what
the grammar allows, a random model then writes only plans that parse, and the switch is on for
`solve`, `plan`, `serve` and `eval` (``--no-plan-grammar`` turns it off), off for training."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from conductor_core.cli import main
from conductor_core.errors import ConductorError
from conductor_core.policy import tiny
from conductor_core.policy.base import PlanRequest, PreviousRound, WorkerInfo
from conductor_core.policy.local import TransformersPlanSource
from conductor_core.workflow.grammar import plan_regex
from conductor_core.workflow.model import AccessMode

llguidance = pytest.importorskip("llguidance")
regex = pytest.importorskip("regex")  # partial matching: is a text a prefix of some plan?

WORKERS = tuple(WorkerInfo(i) for i in range(3))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    return tiny.build_tiny_conductor(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def tokenizer(model_dir: Path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def _request(**kw) -> PlanRequest:
    return PlanRequest(question=kw.pop("question", "What is 12 * 7?"), workers=WORKERS, **kw)


# -- the mask against an oracle: Python's grammar, matched partially ------------------------------


def _allowed(processor, prompt: list[int], generated: list[int], vocab: int) -> set[int]:
    """The tokens ``processor`` leaves finite after ``generated`` (fed one step at a time)."""
    import torch

    allowed: set[int] = set()
    for step in range(len(generated) + 1):
        ids = torch.tensor([prompt + generated[:step]])
        scores = processor(ids, torch.zeros(1, vocab))
        allowed = set(torch.isfinite(scores[0]).nonzero().flatten().tolist())
    return allowed


@pytest.mark.parametrize(
    ("request_kw", "plan"),
    [
        (
            {},
            'model_id = [2, 0]\nsubtasks = ["Is x<3?", "Check."]\naccess_list = [[], ["all"]]',
        ),
        (
            {"access_mode": AccessMode.INDEX, "max_steps": 3},
            'model_id = [1, 1]\nsubtasks = ["Add them.", "Check."]\naccess_list = [[], [0]]',
        ),
        (
            {"previous": PreviousRound("model_id = [0]", "4")},
            "model_id = []\nsubtasks = []\naccess_list = []",
        ),
    ],
    ids=["binary", "index", "keep"],
)
def test_a_token_is_allowed_exactly_when_the_grammar_can_consume_all_of_it(
    tokenizer, request_kw, plan
) -> None:
    """Where the plan has a choice, the mask is every token the grammar can consume in full (a
    multi-character token too); where the text is forced (``model_id = [``), llguidance allows
    only its canonical tokens, never one outside the grammar; the end only after a whole plan."""
    from conductor_core.policy.plan_mask import PlanGrammar

    request = _request(**request_kw)
    python_form = regex.compile(
        plan_regex(
            len(WORKERS),
            request.max_steps,
            request.access_mode,
            allow_empty=request.previous is not None,
        )
    )
    grammar = PlanGrammar(tokenizer)
    vocab = len(tokenizer)
    special = set(tokenizer.all_special_ids)
    texts = {t: tokenizer.decode([t]) for t in range(vocab) if t not in special}
    # tokens that are whole characters (the rest are parts of multi-byte characters)
    texts = {t: s for t, s in texts.items() if "\ufffd" not in s}
    assert sum(len(s) > 1 for s in texts.values()) > 200  # byte-level BPE: multi-char tokens
    tokens = tokenizer.encode(plan, add_special_tokens=False)
    prompt = tokenizer.encode("<|im_start|>assistant\n", add_special_tokens=False)
    checked = 0
    step = 3 if len(tokens) > 20 else 1
    for cut in sorted({*range(0, len(tokens), step), len(tokens)}):
        prefix = tokenizer.decode(tokens[:cut])
        allowed = _allowed(grammar.processor([request]), prompt, tokens[:cut], vocab)
        viable = {t for t, s in texts.items() if python_form.fullmatch(prefix + s, partial=True)}
        assert allowed & set(texts) <= viable, prefix  # nothing outside the grammar
        if len({texts[t][0] for t in viable}) > 1:  # a choice: every consumable token
            assert viable <= allowed, (prefix, [texts[t] for t in viable - allowed])
        else:  # forced text: its canonical tokens (or the end)
            assert allowed, prefix
        assert not allowed & (special - {tokenizer.eos_token_id})
        assert (tokenizer.eos_token_id in allowed) == bool(python_form.fullmatch(prefix))
        checked += 1
    assert checked >= 5
    assert allowed == {tokenizer.eos_token_id}  # the complete plan may only end


def test_a_token_outside_the_grammar_ends_the_row_and_rows_that_ended_are_left_alone(
    tokenizer,
) -> None:
    import torch

    from conductor_core.policy.plan_mask import PlanGrammar

    processor = PlanGrammar(tokenizer).processor([_request(), _request()])
    eos, vocab = tokenizer.eos_token_id, len(tokenizer)
    bad = tokenizer.encode("x", add_special_tokens=False)[0]  # a plan cannot start with it
    processor(torch.tensor([[1], [1]]), torch.zeros(2, vocab))
    scores = processor(torch.tensor([[1, bad], [1, eos]]), torch.zeros(2, vocab))
    assert processor.rejected == 1
    assert torch.isfinite(scores[0]).nonzero().flatten().tolist() == [eos]
    assert torch.isfinite(scores[1]).all()  # ended: generate pads it, the scores are untouched


# -- a random model writes only plans that parse ---------------------------------------------------


def _mixed_requests() -> list[PlanRequest]:
    return [
        _request(sample_index=0, max_steps=2),
        _request(sample_index=1, max_steps=3, access_mode=AccessMode.INDEX),
        _request(sample_index=2, max_steps=2, previous=PreviousRound("model_id = [0]", "84")),
        PlanRequest(question="Name a prime.", workers=WORKERS[:1], max_steps=2, sample_index=3),
        _request(sample_index=4, max_steps=1, question="Translate 'hello' into French."),
        _request(sample_index=5, max_steps=3),
    ]


@pytest.mark.parametrize("temperature", [1.0, 0.0], ids=["sampled", "greedy"])
def test_a_random_model_writes_only_plans_that_parse(model_dir: Path, temperature) -> None:
    requests = _mixed_requests()

    def plans(grammar: bool):
        source = TransformersPlanSource(
            model_dir,
            max_new_tokens=160,
            temperature=temperature,
            seed=3,
            plan_grammar=grammar,
            max_subtask_chars=12,  # every plan ends well within 160 tokens
        )
        return asyncio.run(source.plan_many(requests))

    free = plans(False)
    assert sum(r.ok for r in free) <= 1  # unaided, the random model writes no plan
    guided = plans(True)
    for request, result in zip(requests, guided, strict=True):
        assert result.ok, (result.raw, result.error)
        assert result.extra["finish_reason"] == "stop"
        assert result.extra["plan_grammar"] is True and result.extra["grammar_s"] > 0
        assert 1 <= len(result.workflow) <= request.max_steps or (
            request.previous is not None and len(result.workflow) == 0
        )
        pattern = plan_regex(
            len(request.workers),
            request.max_steps,
            request.access_mode,
            allow_empty=request.previous is not None,
            max_subtask_chars=12,
        )
        assert re.fullmatch(pattern, result.raw)


def test_a_plan_cut_short_by_max_new_tokens_is_still_a_format_error(model_dir: Path) -> None:
    source = TransformersPlanSource(model_dir, max_new_tokens=5, seed=0, plan_grammar=True)
    result = asyncio.run(source.plan(_request()))
    assert not result.ok and result.extra["finish_reason"] == "length"
    assert regex.fullmatch(plan_regex(len(WORKERS)), result.raw, partial=True)  # a plan's start


def test_the_grammar_is_off_unless_asked_for_and_in_training(model_dir: Path) -> None:
    assert TransformersPlanSource(model_dir).plan_grammar is False
    source = TransformersPlanSource(model_dir, max_new_tokens=4, seed=0)
    result = asyncio.run(source.plan(_request()))
    assert "plan_grammar" not in result.extra
    # GRPO samples with TRL's own generate, unaided: in training the grammar is reached only by
    # the trainers, and only when the config asks for it (round 2, or round 1 of base/adaptive)
    from conductor_core.train.config import GenerationSpec, RecursiveSpec

    assert RecursiveSpec().round2_grammar is False
    assert GenerationSpec().plan_grammar is False
    train = Path(__file__).resolve().parents[2] / "conductor_core" / "train"
    users = {p.name for p in train.rglob("*.py") if "import PlanGrammar" in p.read_text()}
    assert users == {"trainers.py"}


# -- the switch: on by default for solve, plan, serve and eval; --no-plan-grammar; and the
# Conductor's sampling temperature, the other decoding option the four commands share ------------


class _Stop(Exception):
    pass


COMMANDS = pytest.mark.parametrize(
    "argv",
    [
        ["solve", "What is 2 + 2?"],
        ["plan", "What is 2 + 2?"],
        ["serve"],
        ["eval", "run", "--benchmark", "demo", "--limit", "1", "--out", "{tmp}"],
    ],
    ids=["solve", "plan", "serve", "eval"],
)
"""The four commands that take the Conductor's decoding options ({tmp}: the test's folder)."""


@pytest.fixture
def captured(monkeypatch) -> list[dict]:
    """load_plan_source's arguments, then stop the command."""
    calls: list[dict] = []

    def fake(spec, **kw):
        calls.append({"spec": spec, **kw})
        raise _Stop

    # shard_job first: imported for the first time under the factory's patch, it would bind the
    # fake by name, and monkeypatch would then "restore" the fake for the tests after this one
    monkeypatch.setattr("conductor_core.evaluate.shard_job.load_plan_source", fake)
    monkeypatch.setattr("conductor_core.policy.factory.load_plan_source", fake)
    monkeypatch.setattr("conductor_core.cli.serve.configure_json_logging", lambda *a, **k: None)
    return calls


@COMMANDS
@pytest.mark.parametrize("flag", [None, "--plan-grammar", "--no-plan-grammar"])
def test_commands_decode_under_the_grammar_unless_told_not_to(
    captured, tmp_path, argv, flag
) -> None:
    args = [a.replace("{tmp}", str(tmp_path / "eval")) for a in argv]
    args += ["--conductor", "tiny"] + ([flag] if flag else [])
    with pytest.raises(_Stop):
        main(args)
    assert captured[-1]["spec"] == "tiny"
    assert captured[-1]["plan_grammar"] is (flag != "--no-plan-grammar")


@COMMANDS
@pytest.mark.parametrize(
    ("option", "value", "key"),
    [
        (None, None, "temperature"),
        ("--conductor-temperature", 0.0, "temperature"),
        ("--conductor-temperature", 0.7, "temperature"),
        (None, None, "plan_tokens"),
        ("--conductor-max-tokens", 96, "plan_tokens"),
    ],
)
def test_commands_pass_the_conductors_decoding(captured, tmp_path, argv, option, value, key):
    args = [a.replace("{tmp}", str(tmp_path / "eval")) for a in argv]
    args += ["--conductor", "tiny"] + ([option, str(value)] if option else [])
    with pytest.raises(_Stop):
        main(args)
    assert captured[-1][key] == value


def test_a_negative_conductor_temperature_is_refused(tmp_path, capsys) -> None:
    from pydantic import ValidationError

    from conductor_core.evaluate.config import EvalConfig
    from conductor_core.policy.factory import load_plan_source

    with pytest.raises(SystemExit) as exit_:
        main(["plan", "2 + 2?", "--conductor", "tiny", "--conductor-temperature", "-1"])
    assert exit_.value.code == 2
    assert "--conductor-temperature" in capsys.readouterr().err
    with pytest.raises(ValidationError, match="conductor_temperature"):
        EvalConfig(benchmark="demo", conductor_temperature=-0.5)
    with pytest.raises(ConductorError, match="temperature must be >= 0"):
        load_plan_source(str(tmp_path), temperature=-1.0)
    with pytest.raises(ValidationError, match="conductor_max_tokens"):
        EvalConfig(benchmark="demo", conductor_max_tokens=0)
    with pytest.raises(ConductorError, match="plan tokens must be >= 1"):
        load_plan_source(str(tmp_path), plan_tokens=0)


def test_the_factory_sets_a_learned_conductors_decoding_only(model_dir: Path) -> None:
    from conductor_core.policy.factory import load_plan_source

    local = load_plan_source(str(model_dir))
    assert local.temperature == 1.0  # GRPO's sampling
    assert local.max_new_tokens == 1024  # this folder records no plan length of its own
    local = load_plan_source(str(model_dir), temperature=0.0, plan_tokens=96)
    assert (local.temperature, local.max_new_tokens) == (0.0, 96)
    url = load_plan_source("http://127.0.0.1:9/v1", temperature=0.3, plan_tokens=96)
    assert (url.temperature, url.max_tokens) == (0.3, 96)
    scripted = load_plan_source("scripted", temperature=0.0, plan_tokens=96)  # nothing to sample
    assert not hasattr(scripted, "temperature") and not hasattr(scripted, "max_tokens")


def test_eval_config_field_and_print_config(tmp_path, capsys) -> None:
    from conductor_core.evaluate.config import EvalConfig

    assert EvalConfig(benchmark="demo").plan_grammar is True
    main(["eval", "run", "--benchmark", "demo", "--no-plan-grammar", "--print-config"])
    assert "plan_grammar: false" in capsys.readouterr().out


def test_factory_passes_the_switch_to_local_models_only(model_dir: Path) -> None:
    from conductor_core.policy.factory import load_plan_source

    assert load_plan_source(str(model_dir)).plan_grammar is True
    assert load_plan_source(str(model_dir), plan_grammar=False).plan_grammar is False
    assert not hasattr(load_plan_source("scripted", plan_grammar=True), "plan_grammar")
    url = load_plan_source("http://127.0.0.1:9/v1", plan_grammar=True)
    assert url.structured is False  # a URL is sent the grammar by structured=True only
