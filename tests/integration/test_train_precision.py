"""Mixed precision as the paper profile trains: weights, gradients and AdamW state in float32,
bf16 compute. A few real TRL GRPO steps at the paper's learning rate (1e-6) move nearly every
weight; the same steps on bf16 weights (what the profile did before) move almost none."""

from __future__ import annotations

import random

import pytest

from tests.support.train_configs import small

pytestmark = pytest.mark.slow


def _tiny(folder):
    from conductor_core.policy.tiny import build_tiny_conductor

    return str(build_tiny_conductor(folder, hidden=64, heads=2, kv_heads=1, layers=1))


def _moved_fraction(tmp_path, config, *, cast_bf16: bool) -> float:
    """Train 3 GRPO steps with a random reward; the fraction of weights that changed."""
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer

    from conductor_core.train.grpo import grpo_args, load_model

    model, tokenizer = load_model(_tiny(tmp_path / "init"), config, "cpu")
    if cast_bf16:
        model.to(torch.bfloat16)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rng = random.Random(0)

    def noisy_reward(completions, **_):  # varied rewards: every group has an advantage
        return [rng.random() for _ in completions]

    prompts = [[{"role": "user", "content": f"Question {i}: 2 + {i}?"}] for i in range(8)]
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[noisy_reward],
        args=grpo_args(config, tmp_path / "ckpt", "cpu", progress=False),
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
    )
    trainer.train()
    moved = total = 0
    for name, param in trainer.model.named_parameters():
        changed = param.detach().to(before[name].dtype) != before[name]
        moved += int(changed.sum())
        total += changed.numel()
    return moved / total


def test_lr_1e6_moves_nearly_every_weight_under_bf16_compute(tmp_path):
    import torch

    from conductor_core.train.grpo import grpo_args, load_model, precision_args

    config = small(
        tmp_path / "out",
        steps=3,
        learning_rate=1.0e-6,
        lr_scheduler="constant",
        model={"dtype": "bfloat16"},
        experimental={"routing_coverage": 0},
        checkpoint={"save_steps": 100},
    )
    assert precision_args(config, "cpu") == {"bf16": True, "fp16": False}
    assert grpo_args(config, tmp_path / "c", "cpu", progress=False).bf16
    model, _ = load_model(_tiny(tmp_path / "probe"), config, "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.float32}

    assert _moved_fraction(tmp_path / "fp32", config, cast_bf16=False) > 0.95
    # The same steps on bf16 weights (the profile before): updates of 1e-6 round to nothing.
    assert _moved_fraction(tmp_path / "bf16", config, cast_bf16=True) < 0.2


def test_lora_keeps_the_frozen_base_in_the_compute_dtype(tmp_path):
    import torch

    from conductor_core.train.grpo import load_model

    config = small(tmp_path / "out", model={"dtype": "bfloat16"}, lora={"enabled": True})
    model, _ = load_model(_tiny(tmp_path / "init"), config, "cpu")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
