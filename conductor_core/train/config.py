"""Typed configuration of the GRPO training stages (YAML in and out) and the named profiles.

Precedence, lowest first: the class defaults (the paper's numbers), the profile (``paper`` or
``tiny``: ``conductor_core/resources/train/profiles/<name>.yaml``), the YAML file, then
command-line overrides. Every field has a description; every error names the field and the fix.
"""

from __future__ import annotations

import functools
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from conductor_core.configfiles import deep_merge, read_yaml_file
from conductor_core.errors import ConfigError, format_validation_error

Stage = Literal["base", "adaptive", "recursive"]
STAGES: tuple[str, ...] = ("base", "adaptive", "recursive")


def _profiles_dir() -> Traversable:
    return resources.files("conductor_core.resources") / "train" / "profiles"


def profile_names() -> tuple[str, ...]:
    """The named profiles: one per ``*.yaml`` file in ``resources/train/profiles``, sorted."""
    return tuple(
        sorted(
            f.name[: -len(".yaml")] for f in _profiles_dir().iterdir() if f.name.endswith(".yaml")
        )
    )


PROFILES: tuple[str, ...] = profile_names()

LossType = Literal["dapo", "grpo", "dr_grpo", "bnpo"]
"""``dapo`` is TRL's default; ``grpo`` is the paper's loss (group-normalised advantages,
per-sequence length normalisation, as in the original GRPO)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TinyModelSpec(_Strict):
    """Shape of a random tiny Qwen2 Conductor built locally (no downloads)."""

    hidden: int = Field(
        default=128,
        ge=32,
        description="Hidden size (embedding width). Must be a multiple of `heads` with a head size "
        "(hidden / heads) of at least 32.",
    )
    layers: int = Field(
        default=2, ge=1, description="Transformer layers; each one makes a CPU step slower."
    )
    heads: int = Field(default=4, ge=1, description="Attention heads; must divide `hidden`.")
    kv_heads: int = Field(
        default=2,
        ge=1,
        description="Key/value heads (grouped-query attention); must divide `heads`.",
    )
    vocab: int = Field(
        default=1024,
        ge=260,
        description="Vocabulary size of the byte-level BPE tokenizer trained for the model on "
        "Conductor prompts and plans; at least 260 (256 bytes plus the special tokens).",
    )
    seed: int = Field(
        default=0,
        description="Seed of the random initial weights (the stage's `seed` drives the rest).",
    )


class ModelSpec(_Strict):
    """Where the Conductor's initial weights come from (unless ``init_from`` is set)."""

    path: str = Field(
        default="Qwen/Qwen2.5-7B",
        description="A local model directory (`save_pretrained` layout), a Hugging Face model id "
        "(the paper: `Qwen/Qwen2.5-7B`), `smollm2-135m-instruct` for the bundled pretrained "
        "SmolLM2-135M-Instruct (offline; converted on first use), or `tiny` for a random tiny "
        "Qwen2 built locally with the shape in `tiny`. Ignored when `init_from` is set.",
    )
    revision: str | None = Field(
        default=None,
        min_length=1,
        description="The Hugging Face revision of a model id in `path`: a commit hash pins the "
        "weights and tokenizer (a branch or tag moves); null = the repository's default branch "
        "as it is now. Ignored for a local folder, `tiny` and `smollm2-135m-instruct`.",
    )
    tiny: TinyModelSpec = Field(
        default_factory=TinyModelSpec,
        description="Shape of the random model built when `path` is `tiny`.",
    )
    dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        default=None,
        description="Compute dtype of training (mixed precision). Trained weights, their "
        "gradients and the optimiser state stay float32 whatever this says (a bf16 weight "
        "cannot take updates at lr 1e-6); `bfloat16` runs the passes under bf16 autocast (the "
        "paper profile) and, with LoRA, stores the frozen base model in bf16; `float16` is fp16 "
        "autocast with loss scaling (GPU only); `null` computes in float32 (use it on CPU).",
    )


class DataSpec(_Strict):
    """Training problems, the worker pool and the Conductor prompt."""

    problems: str = Field(
        default="bundled",
        description="Training problems: a JSONL or Parquet file of Problems, or `bundled` for the "
        "bundled synthetic set (math, multiple choice, free-form; "
        "`conductor_core/resources/train/problems.jsonl`).",
    )
    pool: str = Field(
        default="bundled",
        description="Pool YAML of the workers that execute the plans, or `bundled` for the "
        "simulated pool that goes with the bundled problems.",
    )
    allow_simulated_pool: bool = Field(
        default=False,
        description="The paper profile refuses to train a real model (`model.path` not `tiny`) "
        "on a pool with simulated workers, which would waste GPU hours learning a toy routing; "
        "`true` allows it on purpose (e.g. a smoke test of the GPU path).",
    )
    bank: str | None = Field(
        default=None,
        description="Problems file whose questions the pool's simulated workers know (it "
        "replaces their `simulation.problems`). `null`: the training problems file.",
    )
    split: str | None = Field(
        default="train",
        description="Train only on problems whose `metadata.split` equals this (a problem without "
        "one counts as `train`), keeping the `test` split for evaluation. `null` uses them all.",
    )
    max_problems: int | None = Field(
        default=None,
        ge=1,
        description="Use only the first N problems of the split (quick runs); `null` uses all.",
    )
    worker_profile: str | None = Field(
        default="constrained",
        description="Generation profile (from each worker's `profiles` in the pool YAML) that the "
        "workers use during training, e.g. a cheaper one; workers without it keep their own "
        "settings. `null` uses every worker's own settings.",
    )
    prompt_style: Literal["full", "compact"] = Field(
        default="full",
        description="'full': the Conductor prompt with worked examples (paper); 'compact': a "
        "short prompt (question, model list, one-line format) for tiny models.",
    )
    descriptors: bool = Field(
        default=False,
        description="Descriptor mode: show each offered worker with its one-line description "
        "(the pool's `description`), as `--descriptors` does at inference. Saved with the model, "
        "which is then asked with descriptions wherever it is used. False (the paper): bare ids.",
    )
    max_steps: int = Field(
        default=5,
        ge=1,
        le=20,
        description="Most steps a plan may have (1-20): stated in the prompt, and a longer plan is "
        "a format error (reward 0). The paper uses 5.",
    )
    access_mode: Literal["binary", "index"] = Field(
        default="binary",
        description="How a plan writes each step's access list: `binary` (all earlier outputs or "
        "none) or `index` (the numbers of the earlier steps it may read). Selects the prompt's "
        "format and examples and how plans are parsed.",
    )


MAX_COST_WEIGHT = 20.0
"""The largest ``reward.cost_weight`` accepted."""


class RewardSpec(_Strict):
    """How a plan is scored: executed on the pool, last step graded, 0 / 0.5 / 1 (None: infra)."""

    executions_per_plan: int = Field(
        default=1,
        ge=1,
        le=8,
        description="Times each plan is executed on the pool (1-8); the reward is the mean over "
        "the executions not spoiled by infrastructure failures. More executions give a less noisy "
        "reward for sampled workers, at that many times the worker calls.",
    )
    max_tokens_per_plan: int | None = Field(
        default=None,
        ge=1,
        description="Token budget of one execution (input plus output tokens of every worker "
        "call); steps after it is spent are skipped. `null`: unlimited.",
    )
    deadline_s: float | None = Field(
        default=600.0,
        gt=0,
        description="Wall-clock limit of one execution, in seconds; worker calls still running "
        "then fail and the plan counts as an infrastructure failure if that spoils it. `null`: no "
        "limit.",
    )
    max_concurrent_plans: int = Field(
        default=256,
        ge=1,
        description="Most plans executed at the same time (each worker's `concurrency` in the "
        "pool applies as well). Lower it when a provider rate-limits you.",
    )
    cost_weight: float = Field(
        default=0.0,
        ge=0,
        description="Weight w of the cost-aware reward, per unit of the pool's reference cost: "
        "a right answer's bonus over a wrong one (0.5) shrinks by the share "
        "`min(1, w x cost / cost_reference)`, so it is gone once a plan costs `cost_reference / "
        "w` dollars. Wrong answers, format errors and infrastructure failures are not charged, "
        "and a right answer never scores below a wrong one. 0 (the paper): cost is ignored. "
        "Unitless, so one setting means the same on pools of different prices (docs/cost.md).",
    )
    cost_reference: float | None = Field(
        default=None,
        gt=0,
        description="The cost-aware reward's unit, in dollars per question (one execution of a "
        "plan). `null`: the pool's `cost_reference`; one of the two is needed when "
        "`cost_weight` > 0.",
    )

    @field_validator("cost_weight")
    @classmethod
    def _unitless_weight(cls, value: float) -> float:
        # Values of the old λ (reward points per dollar, 100-2000) would now silently erase every
        # right answer's bonus: refuse them by name.
        if value > MAX_COST_WEIGHT:
            raise ValueError(
                f"{value:g} is above {MAX_COST_WEIGHT:g}: the weight is unitless (cost in units of "
                "cost_reference) and replaced λ in reward points per dollar; past about 10 no plan "
                "keeps any bonus on a typical pool (docs/cost.md)"
            )
        return value


class GenerationSpec(_Strict):
    """Conductor sampling. ``backend: vllm`` uses TRL's vLLM integration (GPU only)."""

    backend: Literal["transformers", "vllm"] = Field(
        default="transformers",
        description="`transformers` samples with the policy model itself (CPU or GPU); `vllm` "
        "uses TRL's vLLM integration (GPU only, much faster for large models; the paper profile).",
    )
    vllm_mode: Literal["colocate", "server"] = Field(
        default="colocate",
        description="`colocate`: vLLM runs inside the training process on its GPUs; `server`: a "
        "separate `trl vllm-serve` process at `vllm_server_base_url`. Only with `backend: vllm`.",
    )
    vllm_server_base_url: str | None = Field(
        default=None,
        description="URL of the vLLM server in `server` mode (e.g. `http://10.0.0.2:8000`); "
        "`null` uses TRL's default host and port.",
    )
    vllm_gpu_memory_utilization: float = Field(
        default=0.3,
        gt=0,
        le=1,
        description="Share of each GPU's memory that vLLM may take in `colocate` mode, in (0, 1]; "
        "the rest is left to training. Raise it if training leaves room.",
    )
    vllm_tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        description="GPUs each colocated vLLM engine shards the model over (`colocate` mode).",
    )
    temperature: float = Field(
        default=1.0,
        ge=0.0,
        description="Sampling temperature of the plans. The paper uses 1.0; lower values make the "
        "plans of a group more alike, which leaves GRPO less to compare.",
    )
    top_p: float = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="Nucleus sampling: sample from the most likely tokens whose probabilities add "
        "up to this, in (0, 1]. 1.0 (the paper) considers all tokens.",
    )
    max_completion_length: int = Field(
        default=1024,
        ge=8,
        description="Most tokens per sampled plan (reasoning and the three lists); a plan cut off "
        "here usually fails to parse and scores 0. The paper uses 1024, the tiny profile 64.",
    )
    plan_grammar: bool = Field(
        default=False,
        description="Train the policy deployment runs: a local Conductor decodes under the plan "
        "grammar, so it never writes a malformed plan. True: the base and adaptive stages sample "
        "their plans under that grammar (the offered workers, `data.max_steps`) and score each "
        "token under it (log-probabilities renormalised over the tokens it allows; "
        "train/grammar_sampling.py): the policy gradient of the deployed policy's expected "
        "reward, with no importance ratio. False (the paper's): plans are sampled unaided and "
        "one that does not parse scores 0. Not with the routing floor or coverage, "
        "`adaptive.mask_unoffered` (the grammar already names only offered workers) or "
        "`adaptive.renumber`; the recursive stage has `recursive.round2_grammar`. "
        "`backend: transformers` only.",
    )


class LoraSpec(_Strict):
    """Optional LoRA adapters (PEFT) instead of full fine-tuning."""

    enabled: bool = Field(
        default=False,
        description="Train LoRA adapters (PEFT) instead of all weights; they are merged into the "
        "saved model. Saves optimiser memory on large models; the paper trains all weights.",
    )
    r: int = Field(
        default=16, ge=1, description="Adapter rank; higher adapts more, with more parameters."
    )
    alpha: int = Field(
        default=32,
        ge=1,
        description="Adapter scale: the adapters' output is multiplied by alpha / r.",
    )
    dropout: float = Field(
        default=0.05, ge=0, lt=1, description="Dropout on the adapters' input, in [0, 1)."
    )
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Names of the linear layers that get adapters (default: Qwen2's attention "
        "projections; add `gate_proj`, `up_proj`, `down_proj` to adapt the MLPs too).",
    )


class WarmupSpec(_Strict):
    """Optional format warm-up: a short supervised pass on valid plans before GRPO."""

    enabled: bool = Field(
        default=False,
        description="Train on valid plans (`targets`) before GRPO, so that a model that cannot "
        "yet write the plan format earns rewards at all: with every plan a format error, every "
        "reward is 0 and GRPO has no gradient. Base and adaptive stages (the recursive stage "
        "starts from a trained model: see `expert_start`). A rerun reuses "
        "`<output_dir>/warmup-model`.",
    )
    targets: Literal["synthetic", "own"] = Field(
        default="synthetic",
        description="What the warm-up imitates. `synthetic`: random valid plans (random offered "
        "workers, generic subtasks), for a random tiny model. `own`: the model's own plans, "
        "sampled at `generation.temperature` under the plan grammar (the regex a served "
        "Conductor decodes under), those that parse: it teaches the format alone and keeps the "
        "model's own choice of workers, subtasks and access lists, for a pretrained model that "
        "does not write the format unaided (the `small` and `paper` profiles).",
    )
    samples: int | None = Field(
        default=None,
        ge=1,
        description="`targets: own`: plans sampled under the grammar (`null`: steps x "
        "batch_size); the warm-up cycles over those that parse.",
    )
    sample_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="`targets: own`: plans sampled in one batch (`null`: batch_size). On a CPU "
        "a larger batch samples more tokens a second; on a GPU it costs KV-cache memory.",
    )
    max_subtask_chars: int | None = Field(
        default=None,
        ge=1,
        description="`targets: own`: the plan grammar bounds each sampled subtask to this many "
        "characters, so that a model that rambles inside a subtask still closes its plan within "
        "`generation.max_completion_length`; `null`: unbounded.",
    )
    lora: bool = Field(
        default=False,
        description="Train the warm-up as LoRA adapters of `lora`'s shape, merged into the "
        "weights at its end (the warm-up runs in one process: a 7B's fits one GPU this way).",
    )
    steps: int = Field(
        default=300, ge=1, description="Optimiser steps (fewer if `max_seconds` runs out first)."
    )
    batch_size: int = Field(default=16, ge=1, description="Synthetic examples per step.")
    learning_rate: float = Field(
        default=1e-3, gt=0, description="AdamW learning rate of the warm-up (constant)."
    )
    prompt_loss: bool = Field(
        default=True,
        description="Put the language-modelling loss on the prompt tokens too, not only on the "
        "plan. A random tiny model needs it to represent the question at all; a pretrained model "
        "does not.",
    )
    max_plan_steps: int = Field(
        default=1,
        ge=1,
        le=20,
        description="Most steps of a synthetic plan (capped by `data.max_steps`); 1 teaches the "
        "format with the simplest plans.",
    )
    max_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Wall-clock limit of the warm-up, in seconds; `null`: run all `steps`.",
    )
    subtasks: list[str] | None = Field(
        default=None,
        min_length=1,
        description="`targets: synthetic`: the subtasks each step of a synthetic plan draws "
        "from, uniformly (`null`: four generic ones, `warmup.WARMUP_SUBTASKS`). A model trained "
        "from scratch has no language: this list is its vocabulary of subtasks, and which one a "
        "step gets, for which question and worker, is left to GRPO.",
    )
    last_step: str | None = Field(
        default=None,
        min_length=1,
        description="`targets: synthetic`: when set, every synthetic plan of two steps or more "
        "ends with a step of this subtask that reads every earlier step (access `all`; its "
        "worker still drawn at random): the shape of a workflow whose last step puts the "
        "answers together, which a model trained from scratch cannot know. `null`: the last "
        "step is drawn like the others.",
    )


class CheckpointSpec(_Strict):
    """Checkpoints: where, how often, how many (a rerun resumes from the last one)."""

    dir: str | None = Field(
        default=None,
        description="A local folder or `s3://bucket/prefix` (uploaded with boto3; "
        "`AWS_ENDPOINT_URL_S3` selects an S3-compatible server). `null`: "
        "`<output_dir>/checkpoints`. Rerunning the same command resumes from the last complete "
        "checkpoint here.",
    )
    save_steps: int = Field(
        default=50, ge=1, description="Save a checkpoint every this many optimiser steps."
    )
    keep: int | None = Field(
        default=3,
        ge=1,
        description="Most checkpoints kept in the local checkpoint folder (older ones are "
        "deleted); `null` keeps all.",
    )


class TrackingSpec(_Strict):
    """Experiment tracking (MLflow): params, per-step metrics, sample plans, the final model."""

    backend: Literal["mlflow", "none"] = Field(
        default="mlflow",
        description="`mlflow` logs the run to MLflow; `none` logs nothing (the output directory "
        "still gets `summary.json` and `history.json`).",
    )
    tracking_uri: str | None = Field(
        default=None,
        description="MLflow tracking URI. `null`: `$MLFLOW_TRACKING_URI`, else a SQLite store "
        "`<output_dir>/mlflow.db`.",
    )
    experiment: str = Field(default="conductor-train", description="MLflow experiment name.")
    run_name: str | None = Field(
        default=None,
        description="Name of a new MLflow run (`null`: MLflow picks one); a resumed run keeps its "
        "own.",
    )
    parent_run_id: str | None = Field(
        default=None,
        description="MLflow run id of the pipeline run (what "
        "`conductor_core.track.pipeline_runs.pipeline_run` returns): the stage then logs into "
        "its nested run named after the stage (`base`, `adaptive`, `recursive`), found again "
        "when the stage is retried or resumed, in the parent's experiment (`experiment` and "
        "`run_name` are ignored). `null`: a top-level run. An injected `MLFLOW_RUN_ID` wins.",
    )
    log_model: bool = Field(
        default=True,
        description="Log the final model folder to MLflow at the end (registered when "
        "`registered_model` is set).",
    )
    registered_model: str | None = Field(
        default=None,
        description="Register the logged model under this name in the MLflow model registry; "
        "`null` logs it without registering.",
    )
    alias: str = Field(
        default="candidate",
        description="Alias set on the newly registered version (load it as "
        "`models:/<registered_model>@<alias>`); letters, digits, `_` or `-`, not `latest`.",
    )
    system_metrics: bool = Field(
        default=True,
        description="Sample the machine's CPU, memory, disk and network use (and the GPUs' with "
        "`pynvml`) into the run's `system/*` metrics while the stage runs (MLflow's system "
        "metrics: every 10 s, `MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL` changes it); `false` "
        "logs none.",
    )
    sample_plans: int = Field(
        default=16,
        ge=0,
        description="Sampled plans (with reward, workers and format error) recorded per logged "
        "step into `sample_plans.json`; 0 records none.",
    )


class ExpertStartSpec(_Strict):
    """Optional expert-iteration start before GRPO: fine-tune on the best-answering worker
    (train/expert_start.py)."""

    enabled: bool = Field(
        default=False,
        description="Before GRPO (after the format warm-up, if any), run every pool worker on "
        "every training question `executions` times, then fine-tune on one-step plans naming "
        "the offered worker that answered significantly more often than the others (random "
        "offered subsets, shown as the stage shows its prompts). It gives a model that reward "
        "alone teaches too slowly (the tiny model in descriptor mode) the signal of every "
        "alternative at once. In the recursive stage it decides between keeping and a new plan "
        "instead: the model's own round-1 plan runs `executions` times per question, a new plan "
        "runs in round 2 after each answer, and the better decision is imitated, weighted by how "
        "much better (train/recursion_start.py). A rerun reuses `<output_dir>/expert-model`.",
    )
    executions: int = Field(
        default=32,
        ge=2,
        description="Base and adaptive stages: runs of each (question, worker) pair; their "
        "share of right answers "
        "estimates the worker's chance there. Costs questions x pool size x this many plan "
        "runs, once. The smallest gap between two workers that should decide a route must pass "
        "the z-test: a gap d between rates near p gives z of about d / sqrt(2 p (1 - p) / "
        "executions), so the tiny pool's smallest one (0.4 against 0.25) passes in about a "
        "third of its questions at 32 and four in five at 128 (descriptor mode's recipe). "
        "Recursive stage: runs of each question's round-1 plan, each a round-2 context (costs "
        "questions x this many x (1 + reward.executions_per_plan) plan runs).",
    )
    z: float = Field(
        default=1.645,
        ge=0,
        description="A target needs the best offered worker's share of right answers to beat "
        "the runner-up's by a one-sided two-proportion z-test at this z (1.645: 5%), so equally "
        "good workers give no target rather than the one their lucky draws pick. Not used in "
        "the recursive stage (its examples are weighted by the decision's advantage).",
    )
    steps: int = Field(
        default=2000,
        ge=1,
        description="Optimiser steps (fewer if `max_seconds` runs out first).",
    )
    batch_size: int = Field(default=16, ge=1, description="Examples per step.")
    learning_rate: float = Field(default=1e-3, gt=0, description="AdamW learning rate (constant).")
    max_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Wall-clock limit of the fine-tuning, in seconds; `null`: run all `steps`.",
    )


class AdaptiveSpec(_Strict):
    """Adaptive pool: each question offers a random subset of k workers, in pool order and under
    their pool ids ("Model 1", "Model 3"), so an id names the same worker in every question."""

    k_min: int = Field(
        default=2,
        ge=1,
        description="Fewest workers offered to a question (capped at the pool size).",
    )
    k_max: int | None = Field(
        default=None,
        ge=1,
        description="Most workers offered to a question; `null`: the pool size. Each question's "
        "k is drawn uniformly from k_min..k_max.",
    )
    renumber: bool = Field(
        default=False,
        description="Descriptor mode only (`data.descriptors`): show each question's offered "
        "workers under random distinct ids (0-9) instead of their pool ids, mapped back to pool "
        "ids when the plan runs, so that a worker's description is its only identity and the "
        "Conductor learns to route by description: a worker it never saw can then be offered "
        "with a description and used. False: pool ids, so ids stay identities.",
    )
    mask_unoffered: bool = Field(
        default=False,
        description="Train the policy deployment runs: a Conductor decodes under the plan "
        "grammar, which lets a plan name only offered workers, so at every worker-id slot the "
        "unoffered workers' ids are masked, in sampling and in the loss's log-probabilities "
        "(renormalised over the rest; train/offered_mask.py). The stage then learns which "
        "offered worker to choose, not the model list's syntax. False (the paper is silent): the "
        "policy may name any worker and a plan naming an unoffered one scores 0. "
        "`generation.backend: transformers` only (TRL's vLLM generation takes one grammar for "
        "all prompts), and pool ids written as one token each (pools of up to 10 workers).",
    )

    @model_validator(mode="after")
    def _check(self) -> AdaptiveSpec:
        if self.k_max is not None and self.k_max < self.k_min:
            raise ValueError(f"k_max ({self.k_max}) must be >= k_min ({self.k_min})")
        return self


class RecursiveSpec(_Strict):
    """Recursive round: part of each batch is forced into a second round.

    ``forced_fraction`` of each batch's plan groups belong to forced trajectories (a round-1 group
    paired with a round-2 group on the same question). Each group holds one round only, so
    group-normalised advantages are normalised per round, as in the paper; round-1 advantages of
    forced trajectories are then multiplied by ``first_round_discount``.
    """

    forced_fraction: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Share of each batch's plan groups that belong to forced two-round "
        "trajectories, rounded to whole round-1/round-2 pairs. The paper uses 0.5; 1.0 gives round "
        "2 the most examples.",
    )
    first_round_discount: float = Field(
        default=0.25,
        ge=0.0,
        le=1.0,
        description="Multiplier on the advantages of forced trajectories' round-1 plans, in "
        "[0, 1]. The paper uses 0.25; 0 leaves those round-1 plans untrained, 1 trains them like "
        "any other.",
    )
    round2_grammar: bool = Field(
        default=False,
        description="Train the round-2 policy deployment runs: a Conductor decodes under the plan "
        "grammar, so in a recursion round it writes the keep plan or a plan that parses, never a "
        "malformed one. Round 2 is then sampled under that grammar and each of its tokens scored "
        "under it (log-probabilities renormalised over the tokens the grammar allows there; "
        "train/grammar_sampling.py). False (the paper is silent): round 2 is sampled unaided, "
        "and a round-2 plan that does not parse keeps the answer, as deployment treats it. "
        "`generation.backend: transformers` only (TRL's vLLM generation takes one grammar for "
        "all prompts).",
    )


class ExperimentalSpec(_Strict):
    """Options that exist because the tiny CPU recipe needed help to learn (docs/training.md,
    "Experimental options"). They are not the paper's method, each defaults to the paper's
    behaviour, and any of them may change or go without notice."""

    truncated_is_format_error: bool = Field(
        default=False,
        description="Score a plan that ran into `generation.max_completion_length` without its "
        "end token as a format error (0, code `truncated`; not executed) even when its lists "
        "parse, so the policy learns to stop. Off (the paper): such a plan is parsed and run.",
    )
    routing_floor: float = Field(
        default=0.0,
        ge=0.0,
        lt=1.0,
        description="Exploration floor on the routing choice, in [0, 1): at each worker id of a "
        "sampled plan, mix this share of a uniform choice over the offered workers into the "
        "policy's, so that no worker drops out of sampling before a small policy tells question "
        "types apart (train/exploration.py); the loss weights those choices by their truncated "
        "importance ratio (capped at 3.0). In the recursive stage round-2 plans too (the keep plan "
        "keeps 1 - floor of its probability). 0 "
        "(the paper) samples the policy as it is. `generation.backend: transformers` only.",
    )
    routing_coverage: int = Field(
        default=0,
        ge=0,
        description="Routing coverage: the first this many plans of each question's group route "
        "to different offered workers (in random order, at every worker slot), so every group "
        "evaluates every worker on its question (train/exploration.py); the loss weights the "
        "routed ids by their truncated importance ratio (capped at 3.0), so what is optimised "
        "stays the policy's expected reward. Up to plans_per_question; those plans are "
        "exploration, so training-batch routing metrics show them too. In the recursive stage it "
        "covers round-1 plans only (round 2 samples the policy, which may keep). 0 (the paper) "
        "samples the policy. `generation.backend: transformers` only.",
    )
    warmup_recursion_fraction: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Share of the format warm-up's examples (`warmup`) that are recursion rounds "
        "(random keep or new plan), so that the model can write the keep format before the "
        "recursive stage.",
    )


MOVED_KEYS: dict[str, str] = {
    "reward.truncated_is_format_error": "experimental.truncated_is_format_error",
    "generation.routing_floor": "experimental.routing_floor",
    "generation.routing_coverage": "experimental.routing_coverage",
    "warmup.recursion_fraction": "experimental.warmup_recursion_fraction",
}
"""Stage-config keys that moved, old dotted name -> new one (an old key is an error naming it)."""

REMOVED_KEYS: dict[str, str] = {
    "generation.importance_ratio_cap": "the cap is fixed at 3.0, TRL's cap for vLLM sampling",
    "recursive.discount_format_errors": "every forced round-1 plan is discounted, as in the paper",
    "adaptive.shuffle": "offered workers keep their pool ids, in pool order",
    "recursive.round2_contexts": "each round-2 plan continues its own round-1 plan (the paper)",
    "experimental.round2_contexts": "each round-2 plan continues its own round-1 plan (the paper)",
    "recursive.balance_sources": "round 2 continues the round-1 answers as sampled",
    "experimental.balance_sources": "round 2 continues the round-1 answers as sampled",
}
"""Stage-config keys that were removed, old dotted name -> what happens now."""


def _retired_key_message(key: str) -> str | None:
    """The error for a moved or removed key, or None for any other unknown key."""
    if key in MOVED_KEYS:
        return f"{key} moved to {MOVED_KEYS[key]}"
    if key in REMOVED_KEYS:
        return f"{key} was removed ({REMOVED_KEYS[key]})"
    return None


class StageConfig(_Strict):
    """One training stage. Defaults are the paper's (4 questions x 64 plans, 200 steps, ...)."""

    stage: Stage = Field(
        default="base",
        description="`base` (GRPO on the full pool), `adaptive` (random worker subsets) or "
        "`recursive` (forced second rounds). `--stage` overrides it.",
    )
    profile: str | None = Field(
        default=None,
        description="Named profile applied under this config, one of the YAML files in "
        "`conductor_core/resources/train/profiles` (`paper`: GPU, Qwen2.5-7B; `tiny`: CPU, "
        "minutes). `null`: the class defaults only.",
    )
    output_dir: str = Field(
        default="runs/train",
        description="Directory of the stage's outputs (`config.yaml`, `model/`, `summary.json`, "
        "`history.json`, checkpoints, by default the MLflow store). Rerunning with the same "
        "directory resumes.",
    )
    init_from: str | None = Field(
        default=None,
        description="Model directory to start from, normally the previous stage's "
        "`<output_dir>/model` (adaptive: base's, recursive: adaptive's); a stored model "
        "(`s3://...`, `models:/NAME@ALIAS`, `runs:/...`) is downloaded first. `null`: "
        "`model.path`.",
    )
    model_uri: str | None = Field(
        default=None,
        description="Also copy the final model folder here (`s3://bucket/prefix` or a folder), "
        "so that a job on another machine (a pipeline pod, a TrainJob node) hands it on. "
        "`null`: only `<output_dir>/model`.",
    )
    seed: int = Field(
        default=0,
        description="Seed of the data order, sampling and the recursive stage's random choices; "
        "the same seed and config repeat a run on the same hardware.",
    )
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="`cpu`, `cuda`, or `auto` (`cuda` when available)."
    )

    questions_per_step: int = Field(
        default=4,
        ge=1,
        description="Distinct questions per optimiser step (the paper: 4), over all processes "
        "under torchrun (a multiple of their number: each rank takes whole question groups). "
        "More questions mix more domains into each update.",
    )
    plans_per_question: int = Field(
        default=64,
        ge=2,
        description="Plans sampled per question: one GRPO group, whose rewards are compared with "
        "each other. At least 2; the paper uses 64.",
    )
    micro_batch_size: int | None = Field(
        default=None,
        ge=1,
        description="Completions per forward/backward pass; gradients accumulate to one optimiser "
        "step per generation batch. Must divide questions_per_step x plans_per_question and be a "
        "multiple or divisor of plans_per_question. `null`: the whole step at once. Lower it when "
        "memory runs out.",
    )
    steps: int = Field(
        default=200,
        ge=1,
        description="Optimiser steps, one generation batch each (the paper: 200 base, 50 "
        "adaptive, 20 recursive).",
    )
    learning_rate: float = Field(
        default=1e-6,
        gt=0,
        description="Peak learning rate of the policy's AdamW optimiser. The paper uses 1e-6 for "
        "a 7B model; a random tiny model needs far more (the tiny profile: 3e-4).",
    )
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup"] = Field(
        default="cosine",
        description="Learning-rate schedule after the warm-up ratio (transformers' "
        "`lr_scheduler_type`). The paper uses cosine.",
    )
    warmup_ratio: float = Field(
        default=0.03,
        ge=0,
        lt=1,
        description="Share of `steps` over which the learning rate rises linearly from 0 (the "
        "paper: 0.03).",
    )
    beta: float = Field(
        default=0.0,
        ge=0.0,
        description="Weight of the KL penalty towards the starting model. 0 (the paper) adds no "
        "KL term and loads no reference model, which saves memory.",
    )
    ref_sync_steps: int = Field(
        default=0,
        ge=0,
        description="With `beta` > 0: every this many steps the KL reference becomes the current "
        "policy (TRL's `sync_ref_model`, mixing weight 1). The KL term then bounds how far each "
        "stretch of steps moves the policy instead of where it may end, so the policy can still "
        "become as sharp as the reward asks (ProRL's reference reset). 0: the reference stays "
        "the starting model. A resumed run takes the checkpoint's policy as its reference (exact "
        "when `checkpoint.save_steps` is a multiple of this).",
    )
    loss_type: LossType = Field(
        default="dapo",
        description="GRPO loss (TRL's `loss_type`): `grpo` is the paper's (per-sequence length "
        "normalisation), `dapo` TRL's default (normalised by the tokens in the batch); `dr_grpo` "
        "and `bnpo` are TRL's other variants.",
    )
    num_iterations: int = Field(
        default=1,
        ge=1,
        description="Optimiser passes over each generation batch (TRL's `num_iterations`, GRPO's "
        "mu): more than 1 reuses the sampled and scored plans, with the importance ratio and "
        "clipping of later passes. 1 (the paper) samples anew for every update.",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        default="group",
        description="How advantages are scaled (TRL's `scale_rewards`): `group` divides by each "
        "group's reward standard deviation (GRPO), `batch` by the batch's, `none` keeps raw "
        "reward differences.",
    )
    mask_truncated_completions: bool = Field(
        default=False,
        description="Leave plans cut off at `generation.max_completion_length` (no end token) "
        "out of the loss (TRL's `mask_truncated_completions`, DAPO's overlong filtering), so a "
        "plan that parses despite trailing text does not teach the policy to stop stopping. "
        "Off in both profiles; the tiny one uses `experimental.truncated_is_format_error` "
        "instead (docs/training.md, 'On other pools').",
    )
    max_grad_norm: float = Field(
        default=1.0, gt=0, description="Clip the gradient's global norm to this value."
    )
    gradient_checkpointing: bool = Field(
        default=False,
        description="Recompute activations in the backward pass instead of storing them: less GPU "
        "memory for more compute. On in the paper profile (7B).",
    )

    model: ModelSpec = Field(
        default_factory=ModelSpec,
        description="Where the initial weights come from (unless `init_from` is set).",
    )
    data: DataSpec = Field(
        default_factory=DataSpec,
        description="Training problems, the worker pool and the Conductor prompt.",
    )
    reward: RewardSpec = Field(
        default_factory=RewardSpec, description="How plans are executed and scored."
    )
    generation: GenerationSpec = Field(
        default_factory=GenerationSpec, description="How the Conductor samples plans."
    )
    lora: LoraSpec = Field(
        default_factory=LoraSpec, description="Optional LoRA adapters instead of full fine-tuning."
    )
    warmup: WarmupSpec = Field(
        default_factory=WarmupSpec, description="Optional supervised format warm-up before GRPO."
    )
    expert_start: ExpertStartSpec = Field(
        default_factory=ExpertStartSpec,
        description="Optional fine-tuning on the best-executed workers before GRPO.",
    )
    checkpoint: CheckpointSpec = Field(
        default_factory=CheckpointSpec, description="Where and how often checkpoints are saved."
    )
    tracking: TrackingSpec = Field(
        default_factory=TrackingSpec, description="Experiment tracking (MLflow)."
    )
    adaptive: AdaptiveSpec = Field(
        default_factory=AdaptiveSpec,
        description="Worker subsets of the adaptive stage (read only when `stage: adaptive`).",
    )
    recursive: RecursiveSpec = Field(
        default_factory=RecursiveSpec,
        description="Forced second rounds of the recursive stage (read only when "
        "`stage: recursive`).",
    )
    experimental: ExperimentalSpec = Field(
        default_factory=ExperimentalSpec,
        description="Options that exist because the tiny CPU recipe needed help (routing "
        "exploration, cut-off plans as format errors, shared round-2 contexts, recursion rounds "
        "in the warm-up); they may change or go without notice (docs/training.md, 'Experimental "
        "options').",
    )

    @field_validator("profile")
    @classmethod
    def _check_profile(cls, value: str | None) -> str | None:
        if value is not None and value not in PROFILES:
            raise ValueError(f"unknown profile '{value}'; use one of {', '.join(PROFILES)}")
        return value

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
        _refuse_simulated_pool(self)
        for name in ("routing_floor", "routing_coverage"):
            if getattr(self.experimental, name) and self.generation.backend != "transformers":
                raise ValueError(
                    f"experimental.{name} works with generation.backend: transformers only"
                )
        if self.adaptive.renumber and not self.data.descriptors:
            raise ValueError(
                "adaptive.renumber needs data.descriptors: true (with bare random ids nothing "
                "would tell the workers apart)"
            )
        if self.adaptive.mask_unoffered and self.generation.backend != "transformers":
            raise ValueError(
                "adaptive.mask_unoffered works with generation.backend: transformers only"
            )
        if self.generation.plan_grammar:
            clash = [
                name
                for name, on in (
                    ("generation.backend: vllm", self.generation.backend != "transformers"),
                    ("the recursive stage", self.stage == "recursive"),
                    ("experimental.routing_floor", bool(self.experimental.routing_floor)),
                    ("experimental.routing_coverage", bool(self.experimental.routing_coverage)),
                    ("adaptive.mask_unoffered", self.adaptive.mask_unoffered),
                    ("adaptive.renumber", self.adaptive.renumber),
                )
                if on
            ]
            if clash:
                raise ValueError(
                    f"generation.plan_grammar does not work with {', '.join(clash)} (see its "
                    "description)"
                )
        if self.recursive.round2_grammar and self.generation.backend != "transformers":
            raise ValueError(
                "recursive.round2_grammar works with generation.backend: transformers only"
            )
        if self.warmup.enabled and self.stage == "recursive":
            raise ValueError(
                "warmup works in the base and adaptive stages; the recursive stage starts from a "
                "trained model, and its expert_start teaches both round-2 decisions"
            )
        if self.ref_sync_steps and not self.beta:
            raise ValueError(
                "ref_sync_steps needs beta > 0 (without a KL term there is no reference)"
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


@functools.cache
def bundled_pool(name: str) -> str | None:
    """The path of the bundled pool ``resources/pools/<name>.yaml`` (e.g. ``paper``), or None."""
    path = Path(str(resources.files("conductor_core.resources") / "pools" / f"{name}.yaml"))
    return str(path) if name.replace("-", "_").isidentifier() and path.is_file() else None


def _refuse_simulated_pool(config: StageConfig) -> None:
    """The paper profile on a real model refuses a simulated pool unless allowed explicitly."""
    if config.profile != "paper" or config.model.path == "tiny":
        return
    if config.data.allow_simulated_pool:
        return
    pool = config.data.pool
    simulated = pool == "bundled"
    if not simulated and Path(pool).is_file():
        try:
            data = yaml.safe_load(Path(pool).read_text(encoding="utf-8")) or {}
            workers = data.get("workers", data) if isinstance(data, dict) else data
            simulated = any(
                isinstance(w, dict) and w.get("provider") == "simulated" for w in workers or []
            )
        except (OSError, yaml.YAMLError, AttributeError):
            simulated = False
    if simulated:
        raise ValueError(
            f"data.pool: the paper profile trains {config.model.path} on a simulated pool "
            f"({pool}); use real workers (data.pool: paper) or set data.allow_simulated_pool: "
            "true to do it on purpose"
        )


def _load_profile(name: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """A profile file's base values and its per-stage overrides (``stages:``), checked."""
    where = f"profile '{name}' (resources/train/profiles/{name}.yaml)"
    try:
        data = yaml.safe_load((_profiles_dir() / f"{name}.yaml").read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where}: not valid YAML ({exc})") from exc
    data = data or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of config fields at the top level")
    stages = data.pop("stages", None) or {}
    if not isinstance(stages, dict) or not all(isinstance(v, dict) for v in stages.values()):
        raise ConfigError(f"{where}: 'stages' must map a stage name to a mapping of overrides")
    unknown = sorted(set(stages) - set(STAGES))
    if unknown:
        raise ConfigError(
            f"{where}: stages: unknown stage '{unknown[0]}'; use one of {', '.join(STAGES)}"
        )
    return data, stages


def profile_values(profile: str, stage: str = "base") -> dict[str, Any]:
    """The values a named profile sets for ``stage``: its base values with the stage's overrides
    merged in (a fresh copy)."""
    if profile not in PROFILES:
        raise ConfigError(f"profile: unknown profile '{profile}'; use one of {', '.join(PROFILES)}")
    base, stages = _load_profile(profile)
    return deep_merge(base, stages.get(stage, {}))


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
    pool = (merged.get("data") or {}).get("pool")
    if isinstance(pool, str) and not Path(pool).exists() and bundled_pool(pool):
        merged["data"] = {**merged["data"], "pool": bundled_pool(pool)}
    try:
        return StageConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(
            f"{origin}: {format_validation_error(exc, unknown=_retired_key_message)}"
        ) from exc


def load_config(
    path: str | Path,
    *,
    stage: str | None = None,
    profile: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> StageConfig:
    """Load a stage config YAML file (see :func:`build_config` for the precedence)."""
    data = read_yaml_file(path, f"--config: file not found: {path} (give a stage YAML file)") or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of config fields at the top level")
    return build_config(data, stage=stage, profile=profile, overrides=overrides, origin=str(path))
