"""The TrainJob's sharding plan: the FSDP2 accelerate config, the environment a paper-profile
TrainJob carries (and a tiny, small or LoRA one does not), and the per-GPU memory arithmetic the
docs table (docs/training.md, "Memory at the paper's scale") is made of."""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from conductor_core.cluster.memory import (
    ADAM,
    GB,
    GRADIENTS,
    QWEN2_5_7B,
    WEIGHTS,
    memory_plan,
    memory_table,
    paper_plans,
)
from conductor_core.cluster.settings import TrainJobSettings, load_cluster_settings
from conductor_core.cluster.sharding import (
    PLAN_FILES,
    SHARDING_ENV,
    accelerate_config,
    launch_env,
    plan_file,
    resolve_plan,
)
from conductor_core.cluster.trainjob import TrainJobRequest, build_manifests
from conductor_core.errors import ConfigError
from conductor_core.train.config import PROFILES, build_config

DOCS = Path(__file__).resolve().parents[2] / "docs" / "training.md"
FSDP_MARKERS = ("ACCELERATE_USE_FSDP", "FSDP_VERSION", "ACCELERATE_MIXED_PRECISION", SHARDING_ENV)


def paper_settings(**trainjob: Any):
    """The bundled settings on 8 x 80 GB nodes, as a paper run's cluster file would give them."""
    return load_cluster_settings(
        None,
        overrides={
            "gpu": {"accelerator_type": "nvidia-h100-80gb", "accelerator_count": 8},
            "trainjob": {"num_nodes": 1, **trainjob},
        },
    )


def stage_yaml(profile: str, **overrides: Any) -> str:
    """The resolved stage config the pipeline sends (``StageConfig.to_yaml``)."""
    return build_config(stage="base", profile=profile, overrides=overrides or None).to_yaml()


def trainer_of(stage_config: Any, settings=None) -> dict[str, Any]:
    request = TrainJobRequest(
        run_id="run-1", task_id="train-base", stage="base", stage_config=stage_config
    )
    return build_manifests(request, settings or paper_settings()).trainjob["spec"]["trainer"]


def plain_env(trainer: dict[str, Any]) -> dict[str, str]:
    return {item["name"]: item["value"] for item in trainer["env"] if "value" in item}


# -- the accelerate config -------------------------------------------------------------------


def test_the_fsdp2_config_parses_and_names_full_shard_with_bf16() -> None:
    path = Path(plan_file("fsdp2"))
    assert path.is_file() and path.name == "fsdp2-full-shard.yaml"
    assert path.parent.parts[-3:] == ("resources", "train", "accelerate")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert data == accelerate_config("fsdp2")
    assert data["distributed_type"] == "FSDP"
    assert data["mixed_precision"] == "bf16"
    fsdp = data["fsdp_config"]
    assert fsdp["fsdp_version"] == 2
    assert fsdp["fsdp_sharding_strategy"] == "FULL_SHARD"
    assert fsdp["fsdp_reshard_after_forward"] is True  # FSDP2's FULL_SHARD
    assert fsdp["fsdp_offload_params"] is False
    assert fsdp["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    # train/grpo.py moves the loaded model to the GPU on every rank; gradient checkpointing is
    # the stage's (transformers refuses it together with FSDP's own).
    assert fsdp["fsdp_cpu_ram_efficient_loading"] is False
    assert fsdp["fsdp_activation_checkpointing"] is False


def test_the_environment_is_what_accelerate_launch_exports(monkeypatch) -> None:
    """``accelerate launch --config_file`` on the same file gives the same variables, and
    accelerate builds the same FSDP2 plugin from them: full sharding, bf16 compute."""
    pytest.importorskip("accelerate")
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.launch import prepare_multi_gpu_env

    # the launcher asks whether its rendezvous port is free: a unit test opens no socket
    monkeypatch.setattr("accelerate.utils.launch.is_port_in_use", lambda port: False)
    parser = launch_command_parser()
    argv = ["--config_file", plan_file("fsdp2"), "-m", "conductor_core", "train"]
    args, _, _ = _validate_launch_command(parser.parse_args(argv))
    theirs = prepare_multi_gpu_env(args)
    ours = launch_env("fsdp2")
    assert ours.pop(SHARDING_ENV) == "fsdp2"
    assert ours == {name: theirs[name] for name in ours}

    for name, value in ours.items():
        monkeypatch.setenv(name, value)
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 2
    assert plugin.reshard_after_forward is True
    assert type(plugin.cpu_offload).__name__ == "OffloadPolicy"  # not CPUOffloadPolicy
    assert plugin.state_dict_type.name == "FULL_STATE_DICT"
    plugin.set_mixed_precision(ours["ACCELERATE_MIXED_PRECISION"])
    assert str(plugin.mixed_precision_policy.param_dtype) == "torch.bfloat16"


def test_the_setting_offers_auto_and_every_plan() -> None:
    values = typing.get_args(TrainJobSettings.model_fields["sharding"].annotation)
    assert values == ("auto", "none", *PLAN_FILES)
    assert TrainJobSettings().sharding == "auto"
    assert load_cluster_settings().trainjob.sharding == "auto"
    with pytest.raises(ConfigError, match=r"trainjob\.sharding"):
        load_cluster_settings(None, overrides={"trainjob": {"sharding": "zero3"}})
    with pytest.raises(ConfigError, match="unknown plan"):
        resolve_plan("zero3", {})


# -- the TrainJob ---------------------------------------------------------------------------


def test_a_paper_profile_trainjob_carries_the_fsdp2_plan() -> None:
    for stage_config in (stage_yaml("paper"), {"profile": "paper"}):
        trainer = trainer_of(stage_config)
        env = plain_env(trainer)
        assert {k: env[k] for k in launch_env("fsdp2")} == launch_env("fsdp2")
        assert env["ACCELERATE_USE_FSDP"] == "true"
        assert env["FSDP_VERSION"] == "2"
        assert env["FSDP_RESHARD_AFTER_FORWARD"] == "true"
        assert env["FSDP_SHARDING_STRATEGY"] == "FULL_SHARD"
        assert env["ACCELERATE_MIXED_PRECISION"] == "bf16"
        assert env[SHARDING_ENV] == "fsdp2"
        # torchrun stays the launcher: it reads the PET_* variables of the torch runtime
        assert trainer["command"] == ["torchrun", "--no-python", "conductor"]
        assert trainer["args"][:2] == ["train", "--stage"]
        assert trainer["numProcPerNode"] == 8


def test_tiny_small_and_lora_trainjobs_are_not_sharded() -> None:
    configs = [stage_yaml("tiny"), stage_yaml("paper", lora={"enabled": True}), {"stage": "base"}]
    if "small" in PROFILES:
        configs.append(stage_yaml("small"))
    for stage_config in configs:
        trainer = trainer_of(stage_config)
        env = plain_env(trainer)
        assert not any(name.startswith("FSDP_") for name in env), stage_config
        assert not set(FSDP_MARKERS) & set(env), stage_config
        assert trainer["command"] == ["torchrun", "--no-python", "conductor"]


def test_the_setting_forces_or_turns_off_the_plan_and_gpu_env_wins() -> None:
    assert not set(FSDP_MARKERS) & set(
        plain_env(trainer_of(stage_yaml("paper"), paper_settings(sharding="none")))
    )
    forced = plain_env(trainer_of(stage_yaml("tiny"), paper_settings(sharding="fsdp2")))
    assert forced[SHARDING_ENV] == "fsdp2" and forced["ACCELERATE_USE_FSDP"] == "true"
    settings = load_cluster_settings(
        None, overrides={"gpu": {"env": {"FSDP_OFFLOAD_PARAMS": "true"}}}
    )
    env = plain_env(trainer_of(stage_yaml("paper"), settings))
    assert env["FSDP_OFFLOAD_PARAMS"] == "true" and env["FSDP_VERSION"] == "2"


def test_the_sharded_trainjob_is_valid_against_the_trainer_crd() -> None:
    pytest.importorskip("jsonschema")
    from tests.unit.test_trainjob_crd import assert_valid

    request = TrainJobRequest("run-1", "train-base", "base", stage_yaml("paper"))
    assert_valid(build_manifests(request, paper_settings()).trainjob)


# -- the memory arithmetic -------------------------------------------------------------------


def test_the_qwen_shape_is_the_7_6b_model() -> None:
    assert 7.60e9 < QWEN2_5_7B.params < 7.63e9
    assert QWEN2_5_7B.layers == 28 and QWEN2_5_7B.hidden == 3584 and QWEN2_5_7B.vocab == 152064
    assert QWEN2_5_7B.kv_bytes_per_token == 2 * 28 * 512 * 2


def test_the_7b_full_finetune_fits_80gb_on_8_gpus_only_sharded() -> None:
    sharded = memory_plan(QWEN2_5_7B, 8, sharding="fsdp2", gpu_gb=80)
    unsharded = memory_plan(QWEN2_5_7B, 8, sharding="none", gpu_gb=80)
    assert sharded.fits and sharded.peak_gb <= 80
    assert not unsharded.fits and unsharded.peak_gb > 80
    # 16 bytes a parameter (fp32 weights, gradients, AdamW), shared by the 8 GPUs
    states = sum(sharded.item_gb(name) for name in (WEIGHTS, GRADIENTS, ADAM))
    assert states == pytest.approx(16 * QWEN2_5_7B.params / 8 / GB)
    # unsharded, the fp32 states alone exceed the GPU
    assert sum(unsharded.item_gb(name) for name in (WEIGHTS, GRADIENTS, ADAM)) > 80
    # the colocated vLLM's share: 0.3 of the GPU, its bf16 weights 15.2 GB of it
    assert sharded.item_gb("colocated vLLM (weights, KV cache, graphs)") == pytest.approx(24.0)
    assert sharded.notes["vllm_weights_gb"] == pytest.approx(2 * QWEN2_5_7B.params / GB)
    assert sharded.notes["vllm_kv_gb"] > 0


def test_activations_scale_with_the_tokens_of_a_pass() -> None:
    base = memory_plan(QWEN2_5_7B, 8)
    half = memory_plan(QWEN2_5_7B, 8, micro_batch=8)
    assert half.peak_gb < base.peak_gb
    long = memory_plan(QWEN2_5_7B, 8, prompt_tokens=6144)
    assert not long.fits  # the recursive stage's prompts need a smaller micro batch
    assert memory_plan(QWEN2_5_7B, 8, prompt_tokens=6144, micro_batch=4).fits
    asleep = memory_plan(QWEN2_5_7B, 8, vllm_sleep_mode=True)
    assert asleep.peak_gb == pytest.approx(base.peak_gb - 24.0)
    lora = memory_plan(QWEN2_5_7B, 8, sharding="none", lora_rank=16)
    assert lora.fits and lora.notes["trainable_b"] < 0.02


def test_the_docs_table_is_the_memory_plan() -> None:
    text = DOCS.read_text(encoding="utf-8")
    assert "## Memory at the paper's scale" in text
    assert memory_table(paper_plans()) in text, (
        "docs/training.md's memory table differs from memory_table(paper_plans()); paste the "
        "function's output into the section"
    )
