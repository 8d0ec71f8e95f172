"""Tiny-model factory: a random Qwen2-architecture Conductor with a locally trained tokenizer.

The model is untrained (random weights): it exists so that the local transformers path (planning,
GRPO training, vLLM serving on CPU) runs end to end on any machine, with no downloads. The tokenizer
is a byte-level BPE trained here on Conductor prompts and rendered plans, so that its vocabulary
fits the format. Its pre-tokenizer and normaliser are those of the Qwen2 tokenizer, so that
``AutoTokenizer`` (which loads a ``qwen2`` model's tokenizer as ``Qwen2Tokenizer``) and vLLM encode
text exactly as it was trained.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from pathlib import Path

from conductor_core.errors import ConfigError, require
from conductor_core.workflow import prompts
from conductor_core.workflow.model import AccessMode, Step, Workflow
from conductor_core.workflow.prompts import PROMPT_VERSION

PAD_TOKEN = "<pad>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
ENDOFTEXT = "<|endoftext|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, IM_START, IM_END, ENDOFTEXT)
"""Special tokens, in id order (``<pad>`` is id 0). ``<|endoftext|>`` doubles as the unknown
token, as ``Qwen2Tokenizer`` expects one."""

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""ChatML-like chat template; generation stops at ``<|im_end|>`` (the eos token)."""

# The Qwen2 tokenizer's pre-tokenisation pattern (a property of the format, not code).
_QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)

MARKER_FILE = "conductor-tiny.json"
"""Written last into a built directory; its presence means the build completed."""

MIN_HEAD_DIM = 32
"""vLLM's CPU attention kernel needs a head size of 32, 64, 80, ...; smaller ones crash it."""


def default_tiny_dir(*, build: bool = True) -> Path:
    """The cache location of the default tiny Conductor, built on first use.

    The location is ``$CONDUCTOR_HOME/tiny-conductor`` when ``CONDUCTOR_HOME`` is set, else
    ``~/.cache/conductor/tiny-conductor``. With ``build=True`` (the default) the model is built
    there if it is missing, incomplete, or built for other prompts (its tokenizer learned the
    prompt texts of the version in its marker).
    """
    home = os.environ.get("CONDUCTOR_HOME")
    root = Path(home).expanduser() if home else Path.home() / ".cache" / "conductor"
    path = root / "tiny-conductor"
    if build and not (is_tiny_dir(path) and _marker(path).get("prompt_version") == PROMPT_VERSION):
        build_tiny_conductor(path)
    return path


def _marker(path: Path) -> dict:
    try:
        return json.loads((path / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def is_tiny_dir(path: str | Path) -> bool:
    """True when ``path`` holds a completed tiny-Conductor build."""
    return (Path(path) / MARKER_FILE).is_file()


def build_tiny_conductor(
    out_dir: str | Path,
    *,
    hidden: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 1024,
    seed: int = 0,
    corpus: list[str] | None = None,
) -> Path:
    """Build a random tiny Qwen2 Conductor and its tokenizer into ``out_dir``; return the path.

    The result loads offline with ``AutoModelForCausalLM.from_pretrained(out_dir)`` and
    ``AutoTokenizer.from_pretrained(out_dir)``. ``corpus`` (texts to train the tokenizer on)
    defaults to :func:`default_corpus`. The same arguments give the same weights and vocabulary.
    The directory is written atomically: a partial build is never left at ``out_dir``.
    """
    _check_shape(hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    texts = list(corpus) if corpus is not None else default_corpus(seed=seed)
    if not texts:
        raise ConfigError("corpus is empty; pass texts to train the tokenizer on, or None")

    out = Path(out_dir).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tiny-build-", dir=out.parent))
    try:
        tokenizer = _train_tokenizer(texts, vocab)
        model = _random_model(tokenizer, hidden, layers, heads, kv_heads, seed)
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        marker = {
            "kind": "tiny-conductor",
            "trained": False,
            "note": "random weights; built locally by conductor_core.policy.tiny",
            "hidden": hidden,
            "layers": layers,
            "heads": heads,
            "kv_heads": kv_heads,
            "vocab": len(tokenizer),
            "seed": seed,
            "parameters": sum(p.numel() for p in model.parameters()),
            "prompt_version": PROMPT_VERSION,
        }
        (staging / MARKER_FILE).write_text(json.dumps(marker, indent=2) + "\n")
        if out.exists():
            shutil.rmtree(out)
        try:
            staging.replace(out)
        except OSError:
            # Another process finished the same build first: keep its complete copy.
            if not is_tiny_dir(out):
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out


def _check_shape(*, hidden: int, layers: int, heads: int, kv_heads: int, vocab: int) -> None:
    """Reject shapes that would not build, or that vLLM on CPU could not serve."""
    for name, value in (("hidden", hidden), ("layers", layers), ("heads", heads)):
        if value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value}")
    if kv_heads < 1 or heads % kv_heads:
        raise ConfigError(f"kv_heads must divide heads ({heads}), got {kv_heads}")
    if hidden % heads:
        raise ConfigError(f"hidden ({hidden}) must be a multiple of heads ({heads})")
    if hidden // heads < MIN_HEAD_DIM:
        raise ConfigError(
            f"head size hidden/heads = {hidden // heads} is below {MIN_HEAD_DIM}; "
            f"raise hidden or lower heads (vLLM on CPU needs a head size of at least 32)"
        )
    minimum = 256 + len(SPECIAL_TOKENS)
    if vocab < minimum:
        raise ConfigError(f"vocab must be at least {minimum} (256 bytes + special tokens)")


def _train_tokenizer(texts: list[str], vocab: int):
    """Train a byte-level BPE with Qwen2 pre-tokenisation; return a transformers tokenizer."""
    tk = require("tokenizers", "local", "the tiny Conductor")
    transformers = require("transformers", "local", "the tiny Conductor")

    tok = tk.Tokenizer(tk.models.BPE())
    tok.normalizer = tk.normalizers.NFC()
    tok.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Split(tk.Regex(_QWEN2_SPLIT), behavior="isolated", invert=False),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        unk_token=ENDOFTEXT,
        additional_special_tokens=[IM_START],
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
    )


def _random_model(tokenizer, hidden: int, layers: int, heads: int, kv_heads: int, seed: int):
    """A randomly initialised Qwen2ForCausalLM sized for ``tokenizer``, with tied embeddings."""
    torch = require("torch", "local", "the tiny Conductor")
    transformers = require("transformers", "local", "the tiny Conductor")

    eos = tokenizer.convert_tokens_to_ids(IM_END)
    pad = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = transformers.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=pad,
        torch_dtype="float32",
    )
    torch.manual_seed(seed)
    model = transformers.Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = pad
    model.generation_config.bos_token_id = None
    return model


# --------------------------------------------------------------------------------------------
# The tokenizer corpus: Conductor prompts and rendered plans, so the vocabulary fits the format.

_QUESTIONS = (
    "What is the remainder when 2^100 is divided by 7?",
    "Solve for x: 3x + 7 = 22.",
    "Compute the sum of all positive divisors of 360.",
    "Which gas makes up most of Earth's air? A) Oxygen B) Nitrogen C) Argon D) Carbon dioxide",
    "Which organelle produces ATP?\n(A) Ribosome\n(B) Mitochondrion\n(C) Golgi body\n(D) Nucleus",
    "Implement a function `merge_intervals(intervals)` that merges overlapping intervals.",
    "Write a Python function that returns the n-th Fibonacci number modulo 10**9 + 7.",
    'def is_palindrome(s: str) -> bool:\n    """Return True if s reads the same backwards."""',
    "Summarise the main causes of the French Revolution in three sentences.",
    "Translate 'the weather is lovely today' into French and explain the grammar.",
    "A train leaves at 3:15 pm and travels 210 km at 84 km/h. When does it arrive?",
    "Explain why the sky is blue to a ten-year-old.",
)

_SUBTASKS = (
    "Solve the problem step by step and give the final answer in \\boxed{}.",
    "Check the previous solution carefully; fix any error and restate the final answer.",
    "Answer the multiple-choice question; end with the letter of the correct option.",
    "Write a correct, efficient Python implementation with a short explanation.",
    "Review the code above for bugs and edge cases; return the corrected full solution.",
    "Break the question into sub-problems and solve each one.",
    "Combine the earlier answers into one final answer in the required format.",
    "Write a clear, well-structured answer to the question.",
    "Critique the earlier answers and point out any mistakes.",
    "Solve the question from scratch without looking at other answers.",
)

_REASONING = (
    "This is a short arithmetic question; one strong model can solve it and another can check.",
    "The question needs careful reasoning, so I ask two models independently and then compare.",
    "A coding task: one model writes the code, a second reviews it, the last one finalises.",
    "Multiple choice with a knowledge focus: one step is enough.",
    "I will first decompose the problem, then solve, then verify the final answer.",
)

_DESCRIPTIONS = (
    "strong at math and step-by-step reasoning",
    "good at code and software engineering",
    "broad general knowledge and multiple choice",
    "fast and cheap general assistant",
    "careful writer for free-form answers",
)


def default_corpus(*, seed: int = 0, plans: int = 400) -> list[str]:
    """Texts that teach the tokenizer the Conductor format: prompts, plans, recursion turns."""
    rng = random.Random(seed)
    texts: list[str] = []
    for i, question in enumerate(_QUESTIONS):
        n = 1 + i % 7
        mode = AccessMode.INDEX if i % 4 == 3 else AccessMode.BINARY
        descriptors = [_DESCRIPTIONS[j % len(_DESCRIPTIONS)] for j in range(n)]
        texts.append(prompts.conductor_prompt(question, n, max_steps=5, access_mode=mode))
        texts.append(
            prompts.conductor_prompt(
                question, n, max_steps=5, access_mode=mode, descriptors=descriptors
            )
        )
        plan = _random_plan_text(rng, n, mode)
        again = prompts.conductor_messages(
            question, n, previous_plan=plan, previous_answer="\\boxed{42}"
        )
        texts.append(again[-1]["content"])  # the recursion turn (the prompt is above)
    texts.extend(_random_plan_text(rng, rng.randint(1, 7), AccessMode.BINARY) for _ in range(plans))
    texts.extend(
        _random_plan_text(rng, rng.randint(2, 7), AccessMode.INDEX) for _ in range(plans // 4)
    )
    return texts


def _random_plan_text(rng: random.Random, num_workers: int, mode) -> str:
    """A reasoning line followed by a valid rendered plan of 1-5 steps."""
    steps = []
    for i in range(rng.randint(1, 5)):
        if mode == AccessMode.INDEX and i and rng.random() < 0.5:
            access: object = tuple(sorted(rng.sample(range(i), rng.randint(1, i))))
        else:
            access = "all" if i and rng.random() < 0.7 else ()
        steps.append(
            Step(worker=rng.randrange(num_workers), subtask=rng.choice(_SUBTASKS), access=access)
        )
    workflow = Workflow(steps=tuple(steps), access_mode=mode)
    return f"{rng.choice(_REASONING)}\n\n{workflow.render()}"
