"""The tiny-model factory: builds fast, loads offline, tokenizer fits the Conductor format."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from conductor_core.errors import ConfigError
from conductor_core.policy import tiny
from conductor_core.workflow.model import Step, Workflow
from conductor_core.workflow.parser import parse_plan
from conductor_core.workflow.prompts import PROMPT_VERSION, conductor_prompt

PLAN = Workflow(
    steps=(
        Step(worker=1, subtask="Solve x² + 3x = 10; give \\boxed{x}.", access=()),
        Step(worker=0, subtask='Check the "solution" above — fix errors.', access="all"),
    )
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, float]:
    # Import time (several seconds on a busy machine) is not build time.
    from transformers import PreTrainedTokenizerFast, Qwen2ForCausalLM  # noqa: F401

    out = tmp_path_factory.mktemp("tiny") / "model"
    start = time.perf_counter()
    path = tiny.build_tiny_conductor(out)
    return path, time.perf_counter() - start


@pytest.fixture(scope="module")
def loaded(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, _ = built
    return AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)


def test_build_is_fast_and_complete(built) -> None:
    path, seconds = built
    assert seconds < 10
    for name in ("config.json", "model.safetensors", "tokenizer.json", tiny.MARKER_FILE):
        assert (path / name).is_file(), name
    marker = json.loads((path / tiny.MARKER_FILE).read_text())
    assert marker["trained"] is False
    assert marker["vocab"] <= 1024
    assert tiny.is_tiny_dir(path)
    assert not any(p.name.startswith(".tiny-build-") for p in path.parent.iterdir())


def test_loads_offline_as_qwen2_with_tied_embeddings(built, loaded, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    tokenizer, model = loaded
    config = model.config
    assert type(model).__name__ == "Qwen2ForCausalLM"
    assert config.tie_word_embeddings
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    assert config.hidden_size // config.num_attention_heads >= 32
    assert (config.num_hidden_layers, config.num_key_value_heads) == (2, 2)
    assert config.vocab_size == len(tokenizer)
    assert config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == "<pad>"


def test_tokenizer_round_trips_the_format(loaded) -> None:
    tokenizer, _ = loaded
    for text in (PLAN.render(), conductor_prompt("What is 12 * 7?", 3)):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    rendered = PLAN.render()
    decoded = tokenizer.decode(tokenizer(rendered, add_special_tokens=False)["input_ids"])
    assert parse_plan(decoded, workers=2) == PLAN


def test_vocabulary_fits_the_format(loaded) -> None:
    tokenizer, _ = loaded
    text = PLAN.render()
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(ids) < len(text.encode()) / 2  # merges learned on prompts and plans
    for word in ("model_id", "subtasks", "access_list"):
        assert len(tokenizer(word, add_special_tokens=False)["input_ids"]) <= 2, word


def test_autotokenizer_matches_the_trained_tokenizer(built, loaded) -> None:
    from tokenizers import Tokenizer

    tokenizer, _ = loaded
    raw = Tokenizer.from_file(str(built[0] / "tokenizer.json"))
    text = "Hello  world\n\n  model_id = [0, 1]  ünïcode “quotes” 123456\tend"
    assert tokenizer(text, add_special_tokens=False)["input_ids"] == raw.encode(text).ids


def test_chat_template(loaded) -> None:
    tokenizer, _ = loaded
    messages = [{"role": "user", "content": "Plan this."}]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nPlan this.<|im_end|>\n<|im_start|>assistant\n"
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert tokenizer.convert_tokens_to_ids("<|im_end|>") in ids


def test_chat_template_renders_a_recursion_round(loaded) -> None:
    """The previous plan is rendered as the model's own turn, the recursion turn after it, and
    the generation prompt last."""
    from conductor_core.workflow.prompts import conductor_messages

    tokenizer, _ = loaded
    plan = PLAN.render()
    messages = conductor_messages(
        "What is 2+2?", 2, style="compact", previous_plan=plan, previous_answer="4"
    )
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    first, _, turn = (m["content"] for m in messages)
    assert text == (
        f"<|im_start|>user\n{first}<|im_end|>\n"
        f"<|im_start|>assistant\n{plan}<|im_end|>\n"
        f"<|im_start|>user\n{turn}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    # the ids hold the plan as the model writes it: its tokens, then the end-of-turn token
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    written = tokenizer(plan, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    assert any(ids[i : i + len(written)] == written for i in range(len(ids)))


def test_same_seed_same_model(built, tmp_path: Path) -> None:
    again = tiny.build_tiny_conductor(tmp_path / "again")
    assert (again / "tokenizer.json").read_bytes() == (built[0] / "tokenizer.json").read_bytes()
    assert (again / "model.safetensors").read_bytes() == (
        built[0] / "model.safetensors"
    ).read_bytes()


def test_custom_shape_and_corpus(tmp_path: Path) -> None:
    from transformers import AutoConfig, AutoTokenizer

    path = tiny.build_tiny_conductor(
        tmp_path / "m", hidden=64, heads=2, kv_heads=1, layers=1, vocab=300, corpus=["abc abc"]
    )
    config = AutoConfig.from_pretrained(path)
    assert (config.hidden_size, config.num_attention_heads, config.num_hidden_layers) == (64, 2, 1)
    assert len(AutoTokenizer.from_pretrained(path)) <= 300


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"hidden": 64, "heads": 4}, "head size"),
        ({"hidden": 130, "heads": 4}, "hidden"),
        ({"heads": 4, "kv_heads": 3}, "kv_heads"),
        ({"vocab": 100}, "vocab"),
        ({"layers": 0}, "layers"),
        ({"corpus": []}, "corpus"),
    ],
)
def test_bad_shapes_are_config_errors(kwargs: dict, field: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=field):
        tiny.build_tiny_conductor(tmp_path / "bad", **kwargs)
    assert not (tmp_path / "bad").exists()


def test_default_tiny_dir_builds_once(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("CONDUCTOR_HOME", str(tmp_path))
    assert tiny.default_tiny_dir(build=False) == tmp_path / "tiny-conductor"
    assert not (tmp_path / "tiny-conductor").exists()
    calls: list[Path] = []
    real_build = tiny.build_tiny_conductor

    def counting_build(out_dir, **kw):
        calls.append(Path(out_dir))
        return real_build(out_dir, corpus=["model_id = [0]"], **kw)

    monkeypatch.setattr(tiny, "build_tiny_conductor", counting_build)
    first = tiny.default_tiny_dir()
    second = tiny.default_tiny_dir()
    assert first == second == tmp_path / "tiny-conductor"
    assert tiny.is_tiny_dir(first)
    assert calls == [first]
    # A cached build whose tokenizer learned older prompts is built again.
    marker = first / tiny.MARKER_FILE
    marker.write_text(json.dumps({**json.loads(marker.read_text()), "prompt_version": "2"}))
    assert tiny.default_tiny_dir() == first
    assert calls == [first, first]
    assert json.loads(marker.read_text())["prompt_version"] == PROMPT_VERSION
