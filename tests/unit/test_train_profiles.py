"""The `small` profile is the paper's recipe in miniature: in every stage it differs from `paper`
only in fields of size and hardware, never in a mechanism (the loss, the KL term, a start before
GRPO, an experimental aid, the reward, the adaptive and recursive settings)."""

from __future__ import annotations

import pytest

from conductor_core.train.config import STAGES, build_config

SIZE_AND_HARDWARE = {
    "profile",
    "steps",
    "questions_per_step",
    "plans_per_question",
    "micro_batch_size",
    "learning_rate",  # LoRA adapters on 135M parameters against all 7B weights
    "gradient_checkpointing",
    "device",
    "model.path",
    "model.dtype",
    "lora.enabled",
    "lora.target_modules",
    "generation.backend",
    "generation.max_completion_length",
    "data.pool",
    "data.problems",
    "data.allow_simulated_pool",
    "data.worker_profile",
    "data.prompt_style",  # the compact prompt: a 15th of the tokens a step costs on CPU
    "checkpoint.save_steps",
    "warmup.samples",  # the format start's sizes
    "warmup.steps",
    "warmup.batch_size",
    "warmup.sample_batch_size",
    "warmup.max_subtask_chars",  # what fits the completion length
    "warmup.learning_rate",
}
"""The fields `small` may set apart from `paper` (docs/training.md, "Profiles", gives each
reason)."""


@pytest.mark.parametrize("stage", STAGES)
def test_small_differs_from_paper_in_sizes_and_hardware_only(stage):
    paper = build_config(stage=stage, profile="paper").flat()
    small = build_config(stage=stage, profile="small").flat()
    differ = {key for key in paper.keys() | small.keys() if paper.get(key) != small.get(key)}
    assert differ <= SIZE_AND_HARDWARE, sorted(differ - SIZE_AND_HARDWARE)
    # the mechanism the tiny profile adds and small must not: spelled out, so a default that
    # changes under both profiles alike still shows here
    assert small["beta"] == 0.0 and small["loss_type"] == "grpo"
    assert not small["expert_start.enabled"]
    # the one departure from the paper both take: a format start on the model's own plans
    assert small["warmup.enabled"] == (stage == "base")
    if stage == "base":
        assert small["warmup.targets"] == "own" and not small["warmup.prompt_loss"]
    assert not any(v for k, v in small.items() if k.startswith("experimental."))


def test_tiny_differs_from_paper_in_mechanism():
    """The check above can fail: the tiny profile's aids are mechanism fields."""
    paper = build_config(stage="base", profile="paper").flat()
    tiny = build_config(stage="base", profile="tiny").flat()
    differ = {key for key in paper if paper[key] != tiny.get(key)}
    assert {"beta", "warmup.targets", "experimental.routing_coverage"} <= differ
    assert not differ <= SIZE_AND_HARDWARE
