"""LoRA adapters (PEFT) of a stage's ``lora`` shape: for GRPO (``lora.enabled``) and for a LoRA
format warm-up (``warmup.lora``)."""

from __future__ import annotations

from typing import Any

from conductor_core.errors import require
from conductor_core.train.config import LoraSpec


def lora_adapters(spec: LoraSpec) -> Any:
    """PEFT's LoRA config of ``spec``'s shape (whether or not the stage trains with it)."""
    peft = require("peft", "train", "LoRA training")
    return peft.LoraConfig(
        r=spec.r,
        lora_alpha=spec.alpha,
        lora_dropout=spec.dropout,
        target_modules=list(spec.target_modules),
        task_type="CAUSAL_LM",
    )
