"""Sharding plans of a TrainJob: how the training state is split over its processes.

A plan is an accelerate config file in ``conductor_core/resources/train/accelerate/``
(:data:`PLAN_FILES`). A TrainJob does not run ``accelerate launch``: the Kubeflow Trainer's torch
runtime hands the job's shape to ``torchrun`` through the ``PET_*`` variables, which torchrun
reads and ``accelerate launch`` does not. So the TrainJob keeps ``torchrun --no-python conductor
train ...`` and puts on its nodes the environment that ``accelerate launch --config_file FILE``
would give the processes it starts (:func:`launch_env`, after ``prepare_multi_gpu_env`` in
``accelerate/utils/launch.py``): ``ACCELERATE_USE_FSDP``, ``ACCELERATE_MIXED_PRECISION`` and the
``FSDP_*`` variables. accelerate's ``Accelerator``, which TRL's trainer creates, builds its FSDP
plugin from them. The file's machine-shape keys (``num_machines``, ``num_processes``, ...) are
not used there: torchrun has them from the runtime.

Plans (the ``trainjob.sharding`` setting, :func:`resolve_plan`):

* ``none``: plain DDP, every process holds the whole model (LoRA, small models, CPU);
* ``fsdp2``: PyTorch FSDP2, fully sharded (ZeRO-3's plan) with bf16 compute and fp32 master
  weights, what the paper profile's 7B full fine-tune needs on 80 GB GPUs (docs/training.md,
  "Memory at the paper's scale"; the arithmetic: :mod:`conductor_core.cluster.memory`);
* ``auto``: ``fsdp2`` for a full fine-tune of a real model on GPUs, ``none`` otherwise.

Pure YAML: nothing here imports accelerate or Kubernetes.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import resources
from typing import Any, Literal

from conductor_core.configfiles import deep_merge
from conductor_core.errors import ConfigError
from conductor_core.train.config import PROFILES, profile_values

ShardingPlan = Literal["none", "fsdp2"]
"""A plan a TrainJob runs with (``auto`` resolves to one of them)."""

PLAN_FILES: dict[str, str] = {"fsdp2": "fsdp2-full-shard.yaml"}
"""Each sharding plan but ``none`` and its accelerate config file in
``conductor_core/resources/train/accelerate/``."""

SHARDING_ENV = "CONDUCTOR_SHARDING"
"""Environment variable naming the plan a TrainJob's nodes run with (set for every plan but
``none``), for the training side and its log."""

# The fsdp_config keys of an accelerate config file and the variables `accelerate launch` turns
# them into (accelerate/utils/launch.py, prepare_multi_gpu_env). A key not listed is refused, so
# that an edit of the file cannot be silently dropped on the way to the nodes.
_FSDP_ENV: dict[str, str] = {
    "fsdp_version": "FSDP_VERSION",
    "fsdp_sharding_strategy": "FSDP_SHARDING_STRATEGY",
    "fsdp_reshard_after_forward": "FSDP_RESHARD_AFTER_FORWARD",
    "fsdp_offload_params": "FSDP_OFFLOAD_PARAMS",
    "fsdp_min_num_params": "FSDP_MIN_NUM_PARAMS",
    "fsdp_auto_wrap_policy": "FSDP_AUTO_WRAP_POLICY",
    "fsdp_transformer_layer_cls_to_wrap": "FSDP_TRANSFORMER_CLS_TO_WRAP",
    "fsdp_backward_prefetch": "FSDP_BACKWARD_PREFETCH",
    "fsdp_state_dict_type": "FSDP_STATE_DICT_TYPE",
    "fsdp_forward_prefetch": "FSDP_FORWARD_PREFETCH",
    "fsdp_use_orig_params": "FSDP_USE_ORIG_PARAMS",
    "fsdp_cpu_ram_efficient_loading": "FSDP_CPU_RAM_EFFICIENT_LOADING",
    "fsdp_sync_module_states": "FSDP_SYNC_MODULE_STATES",
    "fsdp_activation_checkpointing": "FSDP_ACTIVATION_CHECKPOINTING",
}
_MIXED_PRECISION = ("no", "fp16", "bf16")


def plan_file(plan: str) -> str:
    """The path of ``plan``'s accelerate config file (inside the installed package)."""
    if plan not in PLAN_FILES:
        raise ConfigError(
            f"sharding plan '{plan}' has no accelerate config; plans with one: "
            f"{', '.join(PLAN_FILES)}"
        )
    folder = resources.files("conductor_core.resources") / "train" / "accelerate"
    return str(folder / PLAN_FILES[plan])


def accelerate_config(plan: str) -> dict[str, Any]:
    """The accelerate config of ``plan`` as a mapping, checked: an FSDP config (version 2) whose
    every ``fsdp_config`` key :func:`launch_env` can hand on, with a known ``mixed_precision``."""
    import yaml

    path = plan_file(plan)
    with open(path, encoding="utf-8") as handle:
        data = yaml.safe_load(handle)
    where = f"sharding plan '{plan}' ({path})"
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected an accelerate config mapping")
    if data.get("distributed_type") != "FSDP":
        raise ConfigError(f"{where}: distributed_type must be FSDP")
    fsdp = data.get("fsdp_config")
    if not isinstance(fsdp, dict) or fsdp.get("fsdp_version") != 2:
        raise ConfigError(f"{where}: fsdp_config must set fsdp_version: 2 (FSDP2)")
    unknown = sorted(set(fsdp) - set(_FSDP_ENV))
    if unknown:
        raise ConfigError(
            f"{where}: fsdp_config.{unknown[0]} is not handed on to the TrainJob's nodes; add it "
            "to conductor_core/cluster/sharding.py (_FSDP_ENV) with its FSDP_* variable"
        )
    if fsdp.get("fsdp_cpu_ram_efficient_loading") and not fsdp.get("fsdp_sync_module_states"):
        raise ConfigError(
            f"{where}: fsdp_cpu_ram_efficient_loading needs fsdp_sync_module_states (accelerate)"
        )
    if str(data.get("mixed_precision", "no")) not in _MIXED_PRECISION:
        raise ConfigError(f"{where}: mixed_precision must be one of {', '.join(_MIXED_PRECISION)}")
    return data


def _env_value(value: Any) -> str:
    """A config value as ``accelerate launch`` writes it into the environment."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list | tuple):
        return ",".join(str(item) for item in value)
    return str(value)


def launch_env(plan: str) -> dict[str, str]:
    """The environment ``accelerate launch --config_file <plan's file>`` gives the processes it
    starts, for a launch by torchrun itself: ``{}`` for ``none``; for an FSDP plan
    ``ACCELERATE_USE_FSDP=true``, ``ACCELERATE_MIXED_PRECISION`` and one ``FSDP_*`` variable per
    ``fsdp_config`` key, plus :data:`SHARDING_ENV` naming the plan."""
    if plan == "none":
        return {}
    data = accelerate_config(plan)
    env = {
        "ACCELERATE_USE_FSDP": "true",
        "ACCELERATE_MIXED_PRECISION": _env_value(data.get("mixed_precision", "no")),
    }
    for key, value in data["fsdp_config"].items():
        env[_FSDP_ENV[key]] = _env_value(value)
    env[SHARDING_ENV] = plan
    return env


def stage_values(stage_config: str | Mapping[str, Any], stage: str) -> dict[str, Any]:
    """The stage config as a mapping, with its named profile's values under it when it names a
    known one (the pipeline sends a resolved config; a hand-written one may lean on a profile).
    Text that is not a YAML mapping gives ``{}``: the ConfigMap builder reports it."""
    import yaml

    if isinstance(stage_config, str):
        try:
            data = yaml.safe_load(stage_config)
        except yaml.YAMLError:
            return {}
    else:
        data = dict(stage_config)
    if not isinstance(data, dict):
        return {}
    profile = data.get("profile")
    if isinstance(profile, str) and profile in PROFILES:
        data = deep_merge(profile_values(profile, str(data.get("stage") or stage)), data)
    return data


def full_finetune_on_gpu(values: Mapping[str, Any]) -> bool:
    """Whether a stage config trains every weight of a real model on GPUs: ``device: cuda``,
    ``lora.enabled`` off and ``model.path`` not ``tiny`` (``device: auto`` does not count: only a
    config that asks for GPUs is sharded without being told)."""
    lora = values.get("lora")
    model = values.get("model")
    lora_on = isinstance(lora, Mapping) and bool(lora.get("enabled"))
    tiny = isinstance(model, Mapping) and model.get("path") == "tiny"
    return values.get("device") == "cuda" and not lora_on and not tiny


def resolve_plan(
    setting: str, stage_config: str | Mapping[str, Any], stage: str = "base"
) -> ShardingPlan:
    """The plan a TrainJob runs with: ``setting`` itself, or for ``auto`` ``fsdp2`` when the
    stage is a full fine-tune on GPUs (:func:`full_finetune_on_gpu`: the paper profile's 7B does
    not fit an 80 GB GPU unsharded) and ``none`` otherwise (LoRA, CPU, the tiny model)."""
    if setting == "auto":
        return "fsdp2" if full_finetune_on_gpu(stage_values(stage_config, stage)) else "none"
    if setting == "none" or setting in PLAN_FILES:
        return setting  # type: ignore[return-value]
    raise ConfigError(
        f"trainjob.sharding: unknown plan '{setting}'; use auto, none or {', '.join(PLAN_FILES)}"
    )
