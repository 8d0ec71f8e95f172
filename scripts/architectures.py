"""Model directories with a real architecture and no downloaded weights, for GPU checks.

A helper of the GPU scripts (``scripts/gpu_eval_planning.py``, ``scripts/gpu_grpo.py``, which
import it as ``architectures``) and of the GPU tests (``scripts.architectures``), not a script.

:func:`architecture_dir` writes the config of a known architecture (for example Qwen2.5-7B) with
the locally trained tokenizer of the tiny Conductor. vLLM loads it with ``load_format="dummy"``
(random weights, nothing read from disk); transformers builds it with
``AutoModelForCausalLM.from_config``. The vocabulary is the local tokenizer's, so the embedding
matrices are smaller than the original's; every transformer layer has the real shape.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from conductor_core.errors import ConfigError

ARCHITECTURES: dict[str, dict] = {
    "qwen2.5-7b": {
        "hidden_size": 3584,
        "intermediate_size": 18944,
        "num_hidden_layers": 28,
        "num_attention_heads": 28,
        "num_key_value_heads": 4,
        "max_position_embeddings": 32768,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
    },
    "qwen2.5-3b": {
        "hidden_size": 2048,
        "intermediate_size": 11008,
        "num_hidden_layers": 36,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
    "qwen2.5-0.5b": {
        "hidden_size": 896,
        "intermediate_size": 4864,
        "num_hidden_layers": 24,
        "num_attention_heads": 14,
        "num_key_value_heads": 2,
        "max_position_embeddings": 32768,
        "rope_theta": 1_000_000.0,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": True,
    },
}


def architecture_dir(
    out_dir: str | Path, arch: str = "qwen2.5-7b", *, dtype: str = "bfloat16", vocab: int = 4096
) -> Path:
    """Write ``config.json`` of ``arch`` and a local tokenizer (no weights) into ``out_dir``."""
    if arch not in ARCHITECTURES:
        raise ConfigError(f"unknown architecture '{arch}'; known: {', '.join(ARCHITECTURES)}")
    from conductor_core.policy.tiny import build_tiny_conductor

    out = Path(out_dir)
    tiny = build_tiny_conductor(out.parent / f".{out.name}-tokenizer", vocab=vocab)
    out.mkdir(parents=True, exist_ok=True)
    for f in tiny.iterdir():
        if "token" in f.name or f.name in ("generation_config.json", "chat_template.jinja"):
            shutil.copy(f, out / f.name)
    config = json.loads((tiny / "config.json").read_text())
    for key in ("layer_types", "max_window_layers"):  # per-layer lists of the tiny model
        config.pop(key, None)
    config.update(ARCHITECTURES[arch])
    config.update(
        {"torch_dtype": dtype, "head_dim": config["hidden_size"] // config["num_attention_heads"]}
    )
    (out / "config.json").write_text(json.dumps(config, indent=2))
    shutil.rmtree(tiny, ignore_errors=True)
    return out
