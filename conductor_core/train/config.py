"""Typed configuration of the GRPO training stages (YAML in and out) and the named profiles.

Precedence, lowest first: the class defaults (the paper's numbers), the profile (``paper`` or
``tiny``), the YAML file, then command-line overrides. Every error names the field and the fix.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from conductor_core.errors import ConfigError

Stage = Literal["base", "adaptive", "recursive"]
STAGES: tuple[str, ...] = ("base", "adaptive", "recursive")
PROFILES: tuple[str, ...] = ("paper", "tiny")

LossType = Literal["dapo", "grpo", "dr_grpo", "bnpo"]
"""``dapo`` is TRL's default; ``grpo`` is the paper's loss (group-normalised advantages,
per-sequence length normalisation, as in the original GRPO)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TinyModelSpec(_Strict):
    """Shape of a random tiny Qwen2 Conductor built locally (no downloads)."""

    hidden: int = Field(default=128, ge=32)
    layers: int = Field(default=2, ge=1)
    heads: int = Field(default=4, ge=1)
    kv_heads: int = Field(default=2, ge=1)
    vocab: int = Field(default=1024, ge=260)
    seed: int = 0


class ModelSpec(_Strict):
    """Where the Conductor's initial weights come from.

    ``path`` is a local model directory (``save_pretrained`` layout), a Hugging Face model id, or
    ``tiny`` to build a random tiny Qwen2 (shape in ``tiny``). Adaptive and recursive stages
    normally start from the previous stage's output via :attr:`StageConfig.init_from` instead.
    """

    path: str = "Qwen/Qwen2.5-7B"
    tiny: TinyModelSpec = Field(default_factory=TinyModelSpec)
    dtype: Literal["float32", "bfloat16", "float16"] | None = None


class DataSpec(_Strict):
    """Training problems, the worker pool and the Conductor prompt.

    ``problems`` and ``pool`` accept a path or ``bundled`` (the bundled training set and its
    simulated pool in ``conductor_core/resources/train``). ``bank`` is the problem bank handed to
    simulated workers (default: the training problems themselves). ``split`` keeps only problems
    whose ``metadata.split`` matches (``null`` keeps all).
    """

    problems: str = "bundled"
    pool: str = "bundled"
    bank: str | None = None
    split: str | None = "train"
    max_problems: int | None = Field(default=None, ge=1)
    worker_profile: str | None = Field(
        default="constrained",
        description="Generation profile of each worker used during training (if it has one).",
    )
    prompt_style: Literal["full", "compact"] = Field(
        default="full",
        description="'full': the Conductor prompt with worked examples (paper); 'compact': a "
        "short prompt (question, model list, one-line format) for tiny models.",
    )
    max_steps: int = Field(default=5, ge=1, le=20, description="Most steps a plan may have.")
    access_mode: Literal["binary", "index"] = "binary"


class RewardSpec(_Strict):
    """How a plan is scored: executed on the pool, last step graded, 0 / 0.5 / 1 (None: infra)."""

    executions_per_plan: int = Field(default=1, ge=1, le=8)
    max_tokens_per_plan: int | None = Field(default=None, ge=1)
    deadline_s: float | None = Field(default=600.0, gt=0)
    max_concurrent_plans: int = Field(default=256, ge=1)


class GenerationSpec(_Strict):
    """Conductor sampling. ``backend: vllm`` uses TRL's vLLM integration (GPU only)."""

    backend: Literal["transformers", "vllm"] = "transformers"
    vllm_mode: Literal["colocate", "server"] = "colocate"
    vllm_server_base_url: str | None = None
    vllm_gpu_memory_utilization: float = Field(default=0.3, gt=0, le=1)
    vllm_tensor_parallel_size: int = Field(default=1, ge=1)
    temperature: float = Field(default=1.0, ge=0.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_completion_length: int = Field(default=1024, ge=8)


class LoraSpec(_Strict):
    """Optional LoRA adapters (PEFT) instead of full fine-tuning."""

    enabled: bool = False
    r: int = Field(default=16, ge=1)
    alpha: int = Field(default=32, ge=1)
    dropout: float = Field(default=0.05, ge=0, lt=1)
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )


class WarmupSpec(_Strict):
    """Optional format warm-up: a short supervised pass on synthetic valid plans.

    Off by default (instruction-tuned models already write the format). ``prompt_loss`` puts the
    language-modelling loss on the prompt tokens too, which a tiny random model needs in order to
    represent the question at all (measured: without it routing stays at chance).
    """

    enabled: bool = False
    steps: int = Field(default=300, ge=1)
    batch_size: int = Field(default=16, ge=1)
    learning_rate: float = Field(default=1e-3, gt=0)
    prompt_loss: bool = True
    max_plan_steps: int = Field(default=1, ge=1, le=20)
    max_seconds: float | None = Field(default=None, gt=0)
    recursion_fraction: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Share of examples that are recursion rounds (random keep or new plan), so "
        "that the model can write the keep format before the recursive stage.",
    )


class CheckpointSpec(_Strict):
    """Checkpoints: a local folder or ``s3://bucket/prefix`` (uploaded through boto3).

    ``dir`` defaults to ``<output_dir>/checkpoints``.
    """

    dir: str | None = None
    save_steps: int = Field(default=50, ge=1)
    keep: int | None = Field(default=3, ge=1)


class TrackingSpec(_Strict):
    """Experiment tracking. ``tracking_uri`` defaults to ``$MLFLOW_TRACKING_URI`` or a SQLite
    store under the output directory."""

    backend: Literal["mlflow", "none"] = "mlflow"
    tracking_uri: str | None = None
    experiment: str = "conductor-train"
    run_name: str | None = None
    log_model: bool = True
    registered_model: str | None = None
    alias: str = "candidate"
    sample_plans: int = Field(default=16, ge=0)


class AdaptiveSpec(_Strict):
    """Adaptive pool: each question offers a random subset of k workers (renumbered 0..k-1)."""

    k_min: int = Field(default=2, ge=1)
    k_max: int | None = Field(default=None, ge=1, description="Default: the pool size.")

    @model_validator(mode="after")
    def _check(self) -> AdaptiveSpec:
        if self.k_max is not None and self.k_max < self.k_min:
            raise ValueError(f"k_max ({self.k_max}) must be >= k_min ({self.k_min})")
        return self


class RecursiveSpec(_Strict):
    """Recursive round: part of each batch is forced into a second round.

    ``forced_fraction`` of each batch's plan groups belong to forced trajectories (a round-1 group
    paired with a round-2 group on the same question). Round-1 advantages of forced trajectories
    are multiplied by ``first_round_discount``; with ``per_round_normalisation`` advantages are
    normalised within each round's group (each group holds one round only).
    ``min_decision_share`` sets a floor on each round-2 decision (keep, new plan) per group.
    """

    forced_fraction: float = Field(default=0.5, ge=0.0, le=1.0)
    first_round_discount: float = Field(default=0.25, ge=0.0, le=1.0)
    per_round_normalisation: bool = True
    min_decision_share: float = Field(
        default=0.0,
        ge=0.0,
        le=0.5,
        description="Each round-2 group gets at least this share of rows that keep the answer and "
        "of rows that write a new plan; missing ones are filled in (the keep plan, or a plan the "
        "policy wrote for the same question in round 1). 0 (paper) leaves the policy's samples "
        "alone. A small policy otherwise drifts to always or never keeping, where GRPO no longer "
        "sees the other decision and cannot learn when to keep.",
    )
    balance_sources: bool = Field(
        default=False,
        description="Choose the round-1 plans that round 2 continues so that right and wrong "
        "answers are continued equally often (where a group has both), instead of at random. "
        "Otherwise the keep decision mostly learns the share of right answers, not which ones.",
    )


class StageConfig(_Strict):
    """One training stage. Defaults are the paper's (4 questions x 64 plans, 200 steps, ...)."""

    stage: Stage = "base"
    profile: Literal["paper", "tiny"] | None = None
    output_dir: str = "runs/train"
    init_from: str | None = Field(
        default=None, description="Model directory to start from (adaptive/recursive: base output)."
    )
    seed: int = 0
    device: Literal["auto", "cpu", "cuda"] = "auto"

    questions_per_step: int = Field(default=4, ge=1)
    plans_per_question: int = Field(default=64, ge=2)
    micro_batch_size: int | None = Field(
        default=None, ge=1, description="Completions per forward pass (default: the whole step)."
    )
    steps: int = Field(default=200, ge=1)
    learning_rate: float = Field(default=1e-6, gt=0)
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = "cosine"
    warmup_ratio: float = Field(default=0.03, ge=0, lt=1)
    beta: float = Field(default=0.0, ge=0.0, description="KL weight (paper: no KL term).")
    loss_type: LossType = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    max_grad_norm: float = Field(default=1.0, gt=0)
    optimizer: Literal["adamw_torch", "sgd"] = Field(
        default="adamw_torch",
        description="Optimiser (TRL/transformers ``optim``). Adam moves every parameter at about "
        "the learning rate whatever the size of its gradient; plain SGD moves it in proportion.",
    )
    gradient_checkpointing: bool = False

    model: ModelSpec = Field(default_factory=ModelSpec)
    data: DataSpec = Field(default_factory=DataSpec)
    reward: RewardSpec = Field(default_factory=RewardSpec)
    generation: GenerationSpec = Field(default_factory=GenerationSpec)
    lora: LoraSpec = Field(default_factory=LoraSpec)
    warmup: WarmupSpec = Field(default_factory=WarmupSpec)
    checkpoint: CheckpointSpec = Field(default_factory=CheckpointSpec)
    tracking: TrackingSpec = Field(default_factory=TrackingSpec)
    adaptive: AdaptiveSpec = Field(default_factory=AdaptiveSpec)
    recursive: RecursiveSpec = Field(default_factory=RecursiveSpec)

    @model_validator(mode="after")
    def _check_batch(self) -> StageConfig:
        total = self.questions_per_step * self.plans_per_question
        micro = self.micro_batch_size or total
        if total % micro:
            raise ValueError(
                f"micro_batch_size ({micro}) must divide questions_per_step x plans_per_question "
                f"({total})"
            )
        if micro % self.plans_per_question and self.plans_per_question % micro:
            raise ValueError(
                f"micro_batch_size ({micro}) must be a multiple or a divisor of "
                f"plans_per_question ({self.plans_per_question})"
            )
        forced = self.stage == "recursive" and self.recursive.forced_fraction > 0
        if forced and self.questions_per_step < 2:
            raise ValueError(
                "questions_per_step must be at least 2 for the recursive stage (a forced "
                "trajectory pairs a round-1 group with a round-2 group)"
            )
        return self

    # -- derived -------------------------------------------------------------------------------

    @property
    def completions_per_step(self) -> int:
        """Plans sampled per optimiser step (questions x plans per question)."""
        return self.questions_per_step * self.plans_per_question

    @property
    def micro_batch(self) -> int:
        """Completions per forward/backward pass."""
        return self.micro_batch_size or self.completions_per_step

    @property
    def accumulation_steps(self) -> int:
        """Micro-batches per optimiser step (one generation per optimiser step)."""
        return self.completions_per_step // self.micro_batch

    def output_path(self) -> Path:
        """The stage's output directory."""
        return Path(self.output_dir).expanduser()

    def checkpoint_uri(self) -> str:
        """Where checkpoints go: ``checkpoint.dir`` or ``<output_dir>/checkpoints``."""
        return self.checkpoint.dir or str(self.output_path() / "checkpoints")

    def flat(self) -> dict[str, Any]:
        """The config flattened to ``a.b.c -> value`` (for tracking params)."""
        return flatten(self.model_dump(mode="json"))

    def to_yaml(self, path: str | Path | None = None) -> str:
        """The config as YAML; written to ``path`` when given."""
        text = yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")
        return text


# --------------------------------------------------------------------------------------------
# Profiles


_PAPER: dict[str, Any] = {
    "questions_per_step": 4,
    "plans_per_question": 64,
    "micro_batch_size": 16,
    "steps": 200,
    "learning_rate": 1e-6,
    "lr_scheduler": "cosine",
    "warmup_ratio": 0.03,
    "beta": 0.0,
    "loss_type": "grpo",
    "gradient_checkpointing": True,
    "device": "cuda",
    "model": {"path": "Qwen/Qwen2.5-7B", "dtype": "bfloat16"},
    "data": {"prompt_style": "full", "max_steps": 5},
    "generation": {
        "backend": "vllm",
        "vllm_mode": "colocate",
        "temperature": 1.0,
        "max_completion_length": 1024,
    },
    "checkpoint": {"save_steps": 20},
}

_TINY: dict[str, Any] = {
    # 16 questions x 4 plans (rather than 8 x 8): the same 64 plans per step, but each step mixes
    # more questions of every domain, which kept the tiny policy from collapsing onto one worker
    # before it learned to tell the domains apart (measured on 2 CPU cores).
    "questions_per_step": 16,
    "plans_per_question": 4,
    "steps": 150,
    "learning_rate": 3e-4,
    "lr_scheduler": "constant",
    "warmup_ratio": 0.0,
    "beta": 0.0,
    "loss_type": "dapo",
    "device": "cpu",
    "model": {"path": "tiny", "tiny": {"hidden": 128, "layers": 2, "heads": 4, "kv_heads": 2}},
    "data": {"prompt_style": "compact", "max_steps": 5, "worker_profile": None},
    "generation": {"backend": "transformers", "temperature": 1.0, "max_completion_length": 64},
    "warmup": {
        "enabled": True,
        "steps": 300,
        "batch_size": 16,
        "learning_rate": 1e-3,
        # Half the warm-up examples are recursion rounds, so that the base model can go on to the
        # recursive stage (a recursion warm-up after base GRPO re-randomised its routing).
        "recursion_fraction": 0.5,
    },
    "checkpoint": {"save_steps": 25},
    "tracking": {"sample_plans": 8},
}

_STAGE_OVERRIDES: dict[str, dict[str, dict[str, Any]]] = {
    "paper": {
        "adaptive": {"steps": 50},
        "recursive": {"steps": 20},
    },
    "tiny": {
        "adaptive": {"steps": 80, "warmup": {"enabled": False}},
        # Measured (see docs/training.md): 32 questions x 2 plans, so that each step holds 16
        # round-2 contexts of one keep and one new plan each; lr 2e-4.
        "recursive": {
            "steps": 40,
            "questions_per_step": 32,
            "plans_per_question": 2,
            "learning_rate": 2e-4,
            "warmup": {"enabled": False},
            "recursive": {
                "forced_fraction": 1.0,
                "min_decision_share": 0.5,
                "balance_sources": True,
            },
        },
    },
}

PROFILE_VALUES: dict[str, dict[str, Any]] = {"paper": _PAPER, "tiny": _TINY}


def profile_values(profile: str, stage: str = "base") -> dict[str, Any]:
    """The overrides a named profile applies for ``stage`` (a fresh copy)."""
    if profile not in PROFILE_VALUES:
        raise ConfigError(f"profile: unknown profile '{profile}'; use one of {', '.join(PROFILES)}")
    values = copy.deepcopy(PROFILE_VALUES[profile])
    return deep_merge(values, _STAGE_OVERRIDES[profile].get(stage, {}))


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base`` (dicts merge, the rest replaces)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"a": {"b": 1}} -> {"a.b": 1}``; lists are kept as values."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def build_config(
    data: dict[str, Any] | None = None,
    *,
    stage: str | None = None,
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
    origin: str = "training config",
) -> StageConfig:
    """Build a :class:`StageConfig` from a dict, applying the profile and overrides."""
    raw = dict(data or {})
    stage_name = stage or raw.get("stage") or "base"
    if stage_name not in STAGES:
        raise ConfigError(f"stage: unknown stage '{stage_name}'; use one of {', '.join(STAGES)}")
    profile_name = profile or raw.get("profile")
    merged: dict[str, Any] = {}
    if profile_name:
        merged = profile_values(str(profile_name), stage_name)
    merged = deep_merge(merged, raw)
    if overrides:
        merged = deep_merge(merged, overrides)
    merged["stage"] = stage_name
    if profile_name:
        merged["profile"] = profile_name
    try:
        return StageConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {_format_errors(exc)}") from exc


def load_config(
    path: str | Path,
    *,
    stage: str | None = None,
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> StageConfig:
    """Load a stage config YAML file (see :func:`build_config` for the precedence)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"--config: file not found: {path} (give a stage YAML file)")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config fields at the top level")
    return build_config(data, stage=stage, profile=profile, overrides=overrides, origin=str(path))


def _format_errors(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown field; remove it or check its spelling"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)
