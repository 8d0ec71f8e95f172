"""The GRPO stages on TRL's GRPOTrainer: base, adaptive pool and recursive.

:func:`run_stage` is the one entry point: it prepares the model (building the tiny model or
loading a checkpoint, plus the optional format warm-up and expert start), the dataset, the reward
and the trainer, resumes from the last checkpoint when one exists (same step, same data order: the
sampler is seeded and the trainer skips the batches already seen), tracks the run, saves the final
model to ``<output_dir>/model`` and returns a summary.

Under ``torchrun`` with several processes every rank runs :func:`run_stage` and trains on its
share of each generation batch (DDP through TRL and accelerate); only the main process logs to
MLflow, uploads checkpoints and writes the model and the summary
(:mod:`conductor_core.train.ranks`).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError, require
from conductor_core.policy.base import PreviousRound
from conductor_core.policy.pretrained import resolve_model_path
from conductor_core.policy.tiny import build_tiny_conductor, default_corpus, is_tiny_dir
from conductor_core.sample_streams import draw_index, training_index
from conductor_core.simulation.problem_bank import known_problems
from conductor_core.tasks.problem import read_problems
from conductor_core.track.registry import load_model_dir
from conductor_core.track.storage import Storage, is_s3, local_target, split_s3
from conductor_core.train import checkpoints, ranks
from conductor_core.train.adapters import lora_adapters
from conductor_core.train.config import StageConfig, flatten
from conductor_core.train.data import (
    build_dataset,
    id_range,
    problems_digest,
    select_problems,
    stage_prompt,
)
from conductor_core.train.expert_start import run_expert_start
from conductor_core.train.exploration import routing_exploration
from conductor_core.train.reward import ConductorReward, Truncation, stage_reward
from conductor_core.train.stage_tracker import NoopTracker, Tracker, make_tracker
from conductor_core.train.warmup import run_warmup, synthetic_plan
from conductor_core.workers.bundled import bundled_train_pool_path, bundled_train_problems_path
from conductor_core.workers.config import load_pool
from conductor_core.workflow.prompts import save_prompt_spec

SUMMARY_FILE = "summary.json"
WARM_DIR = "warmup-model"
EXPERT_DIR = "expert-model"
INIT_DIR = "init-model"
MODEL_DIR = "model"


@dataclass
class StageResult:
    """What a finished stage produced."""

    stage: str
    output_dir: Path
    model_dir: Path
    steps: int
    seconds: float
    resumed_from: str | None = None
    run_id: str | None = None
    dataset_digest: str | None = None
    """Content digest of the problems file the stage trained on (:func:`problems_digest`)."""
    history: list[dict[str, float]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Inputs: problems and pool


def load_inputs(config: StageConfig):
    """The training problems (of ``data.split``), all problems by id, and the pool.

    The pool's simulated workers know the problems of ``data.bank`` when set, else those of the
    training problems file (their ``simulation.problems`` is replaced).
    """
    spec = config.data
    problems_path = bundled_train_problems_path() if spec.problems == "bundled" else spec.problems
    if is_s3(str(problems_path)):
        # A job on another machine (a TrainJob node) reads the dataset its launcher uploaded.
        bucket, key = split_s3(str(problems_path))
        local = local_target(config.output_path() / "data", key.rsplit("/", 1)[-1])
        if not local.is_file():
            local.parent.mkdir(parents=True, exist_ok=True)
            Storage().client.download_file(bucket, key, str(local))
        problems_path = local
    pool_path = bundled_train_pool_path() if spec.pool == "bundled" else spec.pool
    problems = read_problems(problems_path)
    train = select_problems(problems, spec.split, spec.max_problems)
    if not train:
        raise ConfigError(
            f"data.split: no problems with metadata.split == '{spec.split}' in {problems_path}; "
            f"set data.split to null to use them all"
        )
    pool = load_pool(pool_path)
    if spec.worker_profile:
        pool = pool.with_profile(spec.worker_profile)
    pool = pool.with_simulation_problems([spec.bank or problems_path], replace=True)
    known_problems(pool)  # read the problem files now: a missing one fails here
    return train, {p.id: p for p in problems}, pool


# --------------------------------------------------------------------------------------------
# Model


def resolve_device(config: StageConfig) -> str:
    """``cpu`` or ``cuda`` (``auto``: cuda when available)."""
    if config.device != "auto":
        return config.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def tiny_corpus(problems, pool_size: int, config: StageConfig) -> list[str]:
    """Tokenizer corpus for a tiny model: the default corpus plus this stage's prompts and plans."""
    from random import Random

    rng = Random(config.seed)
    texts = default_corpus(seed=config.seed)
    for p in list(problems)[:400]:
        texts.append(stage_prompt(config, p.question, pool_size)[0]["content"])
        plan = synthetic_plan(rng, pool_size, max_plan_steps=2)
        texts.append(plan)
        if config.data.prompt_style == "compact":
            previous = PreviousRound(plan=plan, answer="\\boxed{42}")
            again = stage_prompt(config, p.question, pool_size, previous=previous)
            texts.append(again[-1]["content"])  # the recursion turn (its prompt and plan: above)
    return texts


def initial_model_dir(config: StageConfig, problems, pool_size: int) -> str:
    """Where the stage's starting weights are: ``init_from``, a built tiny model, the bundled
    ``smollm2-135m-instruct`` (its converted folder), or a model id."""
    if config.init_from:
        if config.init_from.startswith(("s3://", "models:/", "runs:/")):
            return str(load_model_dir(config.init_from, config.output_path() / "init-from"))
        path = Path(config.init_from).expanduser()
        if not (path / "config.json").is_file():
            raise ConfigError(
                f"init_from: {path} has no config.json; point it at a previous stage's "
                f"'{MODEL_DIR}' folder (for example runs/base/{MODEL_DIR})"
            )
        return str(path)
    if config.model.path == "tiny":
        out = config.output_path() / INIT_DIR
        if not is_tiny_dir(out):
            t = config.model.tiny
            build_tiny_conductor(
                out,
                hidden=t.hidden,
                layers=t.layers,
                heads=t.heads,
                kv_heads=t.kv_heads,
                vocab=t.vocab,
                seed=t.seed,
                corpus=tiny_corpus(problems, pool_size, config),
            )
        return str(out)

    # `smollm2-135m-instruct`: the bundled model's folder (converted once, then cached).
    return resolve_model_path(config.model.path)


def load_model(path: str, config: StageConfig, device: str):
    """Load a causal LM and its tokenizer (pad token set); a Hugging Face model id at
    ``model.revision``."""
    hub: dict[str, Any] = {}
    if Path(path).exists():
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
    else:  # a model id: the weights and tokenizer of one revision
        hub["revision"] = config.model.revision
    torch = require("torch", "train", "GRPO training")
    transformers = require("transformers", "train", "GRPO training")
    tokenizer = transformers.AutoTokenizer.from_pretrained(path, **hub)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(
            f"model.path: the tokenizer of {path} has no chat template; use an instruct model "
            f"or one whose tokenizer defines chat_template"
        )
    dtype = getattr(torch, weight_dtype(config))
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **hub)
    model.to(device)
    return model, tokenizer


def weight_dtype(config: StageConfig) -> str:
    """The dtype the stage loads its weights in: float32 for every weight it trains.

    ``model.dtype`` is the compute dtype (:func:`precision_args`): a full fine-tune keeps its
    weights, gradients and AdamW state in float32 and computes in bf16 under autocast, since a
    bf16 weight cannot take the paper's updates (at lr 1e-6 most round to nothing). With LoRA
    only the adapters train, and PEFT keeps them in float32: the frozen base model is stored in
    ``model.dtype``, which halves its memory.
    """
    if config.lora.enabled and config.model.dtype:
        return config.model.dtype
    return "float32"


def precision_args(config: StageConfig, device: str) -> dict[str, bool]:
    """The trainer's mixed-precision switches for ``model.dtype``: ``bfloat16`` runs forward and
    backward passes under bf16 autocast (on CPU too, where torch supports it), ``float16`` under
    fp16 autocast with loss scaling (CUDA only); ``null``/``float32`` computes in float32."""
    compute = config.model.dtype
    if compute == "float16" and device != "cuda":
        raise ConfigError("model.dtype: float16 needs a GPU; use bfloat16 or null on CPU")
    return {"bf16": compute == "bfloat16", "fp16": compute == "float16"}


def prepare_model(
    config: StageConfig,
    problems,
    pool: Any,
    device: str,
    log: Callable,
    descriptions: Sequence[str] = (),
):
    """Load the starting model; run (or reuse) the format warm-up, then the expert start, when
    enabled (``descriptions``, by pool id: what descriptor mode shows)."""
    expert = config.output_path() / EXPERT_DIR
    if config.expert_start.enabled and (expert / "config.json").is_file():
        log(f"expert start: reusing {expert}")
        return load_model(str(expert), config, device)
    model, tokenizer = _warmed_up(config, problems, len(pool.workers), device, log, descriptions)
    if config.expert_start.enabled:
        steps = config.expert_start.steps
        what = (
            "on the better of keeping and a new plan"
            if config.stage == "recursive"
            else "on the best-answering workers"
        )
        log(f"expert start: {steps} steps {what}")
        stats = run_expert_start(
            model,
            tokenizer,
            problems,
            pool,
            config,
            descriptions=descriptions,
            log=log,
            on_step=_loss_lines(log, "expert start", steps),
        )
        log(f"expert start: done in {stats['seconds']:.0f}s, loss {stats['loss']:.3f}")
        _save_start(config, model, tokenizer, expert)
    return model, tokenizer


def _loss_lines(log: Callable, what: str, steps: int) -> Callable[[int, float], None]:
    """An ``on_step`` callback of supervised training that logs the loss ten times in all."""
    every = max(1, steps // 10)

    def on_step(step: int, loss: float) -> None:
        if step % every == 0:
            log(f"{what} step {step}: loss {loss:.3f}")

    return on_step


def _save_start(config: StageConfig, model: Any, tokenizer: Any, where: Path) -> None:
    """Save a model GRPO starts from (after the warm-up or the expert start) with its prompt spec,
    and make it the KL reference: TRL builds the reference (beta > 0) from the path in the model's
    config, as when a resumed run reuses the folder, not the weights before it."""
    model.save_pretrained(where)
    tokenizer.save_pretrained(where)
    save_prompt_spec(
        where,
        config.data.prompt_style,
        config.generation.max_completion_length,
        config.data.descriptors,
    )
    model.config._name_or_path = str(where)


def _warmed_up(
    config: StageConfig,
    problems,
    pool_size: int,
    device: str,
    log: Callable,
    descriptions: Sequence[str] = (),
):
    """Load the starting model; run (or reuse) the format warm-up when enabled."""
    path = initial_model_dir(config, problems, pool_size)
    warm = config.output_path() / WARM_DIR
    if config.warmup.enabled and (warm / "config.json").is_file():
        log(f"warm-up: reusing {warm}")
        return load_model(str(warm), config, device)
    model, tokenizer = load_model(path, config, device)
    if config.warmup.enabled:
        spec = config.warmup
        what = "own plans under the plan grammar" if spec.targets == "own" else "synthetic plans"
        log(f"warm-up: {spec.steps} steps of supervised format training on {what}")
        stats = run_warmup(
            model,
            tokenizer,
            problems,
            pool_size,
            config,
            descriptions=descriptions,
            on_step=_loss_lines(log, "warm-up", config.warmup.steps),
            log=log,
        )
        parsed = (
            f", from {stats['parsed']:.0f} of {stats['sampled']:.0f} sampled plans that parse"
            if "parsed" in stats
            else ""
        )
        log(f"warm-up: done in {stats['seconds']:.0f}s, loss {stats['loss']:.3f}{parsed}")
        _save_start(config, model, tokenizer, warm)
    return model, tokenizer


# --------------------------------------------------------------------------------------------
# Trainer


def truncation_rule(config: StageConfig, tokenizer: Any) -> Truncation | None:
    """The reward's rule for cut-off plans (``experimental.truncated_is_format_error``), or
    None."""
    if not config.experimental.truncated_is_format_error:
        return None
    ends = {tokenizer.eos_token_id, tokenizer.pad_token_id} - {None}
    return Truncation(config.generation.max_completion_length, frozenset(ends))


def rank_batch(config: StageConfig, world_size: int) -> tuple[int, int]:
    """``(completions per forward pass, micro-batches per optimiser step)`` on each of
    ``world_size`` ranks, so that one optimiser step still takes ``questions_per_step x
    plans_per_question`` completions in all (TRL's generation batch is per-device batch x
    processes x accumulation steps).

    A question's group of plans may span ranks: TRL gathers the rewards of every process before
    it normalises them per group, so any number of ranks that divides a step's completions works
    (the paper profile's 4 x 64 on 2, 8 or 16 GPUs). Two mechanisms need more:
    ``experimental.routing_coverage`` (a tiny-profile aid) spreads a group's plans over workers
    within one rank's batch, so each rank takes whole groups; the recursive stage pairs a
    round-1 group with the round-2 group that continues it on one rank
    (:func:`~conductor_core.train.recursive.rank_pairs`), so each rank takes whole pairs of
    groups. A forward pass never takes more than ``micro_batch_size`` completions.
    """
    if world_size <= 1:
        return config.micro_batch, config.accumulation_steps
    total = config.completions_per_step
    fix = "change questions_per_step or torchrun's --nproc-per-node / the number of nodes"
    if total % world_size:
        raise ConfigError(
            f"questions_per_step x plans_per_question ({total}) must be a multiple of the number "
            f"of training processes ({world_size}): each rank takes an equal share; {fix}"
        )
    groups, extra = divmod(config.questions_per_step, world_size)
    if config.experimental.routing_coverage and extra:
        raise ConfigError(
            f"questions_per_step ({config.questions_per_step}) must be a multiple of the number "
            f"of training processes ({world_size}) with experimental.routing_coverage: it spreads "
            f"a question's plans over workers within one rank; {fix}"
        )
    if config.stage == "recursive" and config.recursive.forced_fraction and (extra or groups % 2):
        raise ConfigError(
            f"questions_per_step ({config.questions_per_step}) must be a multiple of twice the "
            f"number of training processes ({2 * world_size}) in the recursive stage: each rank "
            f"holds whole (round-1, round-2) pairs of question groups; {fix}"
        )
    per_rank = total // world_size
    micro = math.gcd(config.micro_batch, per_rank)
    return micro, per_rank // micro


def check_backend(config: StageConfig, device: str) -> None:
    """Refuse a generation backend ``device`` cannot run (before any minute is spent)."""
    if config.generation.backend == "vllm" and device != "cuda":
        raise ConfigError("generation.backend: vllm needs a GPU; use 'transformers' on CPU")


def grpo_args(config: StageConfig, checkpoint_dir: Path, device: str, progress: bool):
    """The TRL ``GRPOConfig`` for ``config``.

    Under a distributed launch each rank's batch is :func:`rank_batch`, and on CPU the process
    group uses gloo (CUDA: nccl, accelerate's default).

    The warm-up goes to transformers as a whole number of optimiser steps,
    ``ceil(steps * warmup_ratio)`` (what transformers 5 derives from a ratio): a float
    ``warmup_steps`` is a ratio only from transformers 5.0 (4.x takes a step count there; 4.57
    rejects a float) and ``warmup_ratio`` is gone from 5.2, while an integer means the same in
    every version. transformers' ``constant`` schedule ignores the warm-up, so a
    warm-up with ``lr_scheduler: constant`` uses ``constant_with_warmup``.
    """
    trl = require("trl", "train", "GRPO training")
    gen = config.generation
    launch = ranks.current()
    micro, accumulation = rank_batch(config, launch.world_size)
    use_vllm = gen.backend == "vllm"
    check_backend(config, device)
    warmup_steps = math.ceil(config.steps * config.warmup_ratio)
    scheduler = config.lr_scheduler
    if scheduler == "constant" and warmup_steps:
        scheduler = "constant_with_warmup"
    kwargs: dict[str, Any] = {
        "output_dir": str(checkpoint_dir),
        "per_device_train_batch_size": micro,
        "gradient_accumulation_steps": accumulation,
        "num_generations": config.plans_per_question,
        "max_completion_length": gen.max_completion_length,
        "temperature": gen.temperature,
        "top_p": gen.top_p,
        "learning_rate": config.learning_rate,
        "lr_scheduler_type": scheduler,
        "warmup_steps": warmup_steps,
        "beta": config.beta,
        "loss_type": config.loss_type,
        "num_iterations": config.num_iterations,
        "scale_rewards": config.scale_rewards,
        "mask_truncated_completions": config.mask_truncated_completions,
        "max_grad_norm": config.max_grad_norm,
        "optim": "adamw_torch",  # the paper's AdamW; transformers' default became the fused one
        "max_steps": config.steps,
        "save_strategy": "steps",
        "save_steps": config.checkpoint.save_steps,
        "save_total_limit": config.checkpoint.keep,
        "logging_steps": 1,
        "report_to": "none",
        "seed": config.seed,
        "data_seed": config.seed,
        "use_cpu": device == "cpu",
        **precision_args(config, device),
        "disable_tqdm": not progress,
        "log_completions": False,
        "shuffle_dataset": True,
        "remove_unused_columns": False,
        "use_vllm": use_vllm,
        # Always passed: TRL turns it on when not told (a tiny model recomputed for nothing).
        "gradient_checkpointing": config.gradient_checkpointing,
    }
    if config.ref_sync_steps:  # the reference becomes the policy every N steps
        kwargs.update(
            sync_ref_model=True,
            ref_model_sync_steps=config.ref_sync_steps,
            ref_model_mixup_alpha=1.0,
        )
    if launch.distributed and device == "cpu":
        kwargs["ddp_backend"] = "gloo"
    if use_vllm:
        kwargs.update(
            vllm_mode=gen.vllm_mode,
            vllm_gpu_memory_utilization=gen.vllm_gpu_memory_utilization,
            vllm_tensor_parallel_size=gen.vllm_tensor_parallel_size,
        )
        if gen.vllm_mode == "server" and gen.vllm_server_base_url:
            kwargs["vllm_server_base_url"] = gen.vllm_server_base_url
    return trl.GRPOConfig(**kwargs)


def peft_config(config: StageConfig):
    """A PEFT LoRA config when ``lora.enabled``, else None."""
    return lora_adapters(config.lora) if config.lora.enabled else None


def make_callbacks(
    config: StageConfig,
    tracker: Tracker,
    history: list[dict[str, float]],
    samples: list[dict[str, Any]],
):
    """Trainer callbacks: metrics to the tracker and history, sample plans, S3 checkpoint sync
    (:mod:`~conductor_core.train.callbacks`)."""
    # lazy: callbacks imports transformers at its top
    from conductor_core.train.callbacks import S3CheckpointSync, TrackingCallback

    remote = config.checkpoint_uri() if checkpoints.is_s3(config.checkpoint_uri()) else None
    if not ranks.is_main_process():
        remote = None  # the trainer saves checkpoints on rank 0; rank 0 uploads them
    callbacks: list[Any] = [
        TrackingCallback(
            tracker,
            history,
            samples,
            plans_per_question=config.plans_per_question,
            sample_plans=config.tracking.sample_plans,
        )
    ]
    if remote:
        callbacks.append(S3CheckpointSync(remote))
    return callbacks


def reference_from_checkpoint(trainer: Any) -> Any:
    """A callback for a resumed run with ``ref_sync_steps`` that makes the KL reference the
    checkpoint's policy before the first step
    (:class:`~conductor_core.train.callbacks.ReferenceFromCheckpoint`)."""
    # lazy: callbacks imports transformers at its top
    from conductor_core.train.callbacks import ReferenceFromCheckpoint

    return ReferenceFromCheckpoint(trainer)


def stop_reward_loop(trainer: Any) -> None:
    """Stop the event-loop thread TRL starts for async reward functions (it would otherwise run
    until the process exits: one more thread per stage in a pipeline or a test run)."""
    thread = getattr(trainer, "async_loop_thread", None)
    loop = getattr(trainer, "async_loop", None)
    if thread is None or loop is None or not thread.is_alive():
        return
    from trl.trainer.utils import shutdown_event_loop_in_daemon

    shutdown_event_loop_in_daemon(thread, loop)
    if not thread.is_alive():
        # The rewards' worker threads (asyncio.to_thread). The loop stays open: TRL's exit hook
        # stops it once more.
        loop.run_until_complete(loop.shutdown_default_executor())


def build_trainer(
    config: StageConfig,
    model: Any,
    tokenizer: Any,
    dataset: Any,
    reward: ConductorReward,
    args: Any,
    callbacks: list[Any],
):
    """A GRPOTrainer (or the recursive subclass) that scores with the stage's reward and hands
    each scored batch to ``callbacks``; it records which workers each prompt offers, for the
    routing exploration (:class:`~conductor_core.train.trainers.OfferedGRPOTrainer`).

    Raises:
        SampleIndexError: the last step's plans do not fit the training stream of sample
            indices (:mod:`conductor_core.sample_streams`): refused now, not at that step.
    """
    rows, executions = config.completions_per_step, reward.executions
    draw_index(training_index(config.steps - 1, rows, rows - 1), executions, executions - 1)
    require("trl", "train", "GRPO training")
    kwargs: dict[str, Any] = {
        "model": model,
        "conductor_reward": reward,
        "args": args,
        "train_dataset": dataset,
        "processing_class": tokenizer,
        "callbacks": callbacks,
        "peft_config": peft_config(config),
    }
    if config.stage == "recursive":
        os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # before TRL's trainer is imported
        # lazy: trainers imports torch, transformers and trl at its top (about 10 s)
        from conductor_core.train.trainers import RecursiveGRPOTrainer

        return RecursiveGRPOTrainer(
            **kwargs,
            forced_fraction=config.recursive.forced_fraction,
            first_round_discount=config.recursive.first_round_discount,
            round2_grammar=config.recursive.round2_grammar,
        )
    # lazy: trainers imports torch, transformers and trl at its top (about 10 s)
    from conductor_core.train.trainers import OfferedGRPOTrainer

    return OfferedGRPOTrainer(**kwargs, plan_grammar=config.generation.plan_grammar)


def log_training_dataset(config: StageConfig, tracker: Tracker, by_id, trained: int) -> str:
    """Log the problems file the stage trains on as the run's MLflow dataset input (context
    ``training``: its source and content digest, with the counts as the input's tags); returns
    the digest. A tracker without ``log_dataset`` only gets the digest computed."""
    spec = config.data
    source = str(bundled_train_problems_path() if spec.problems == "bundled" else spec.problems)
    digest = problems_digest(by_id.values())
    log_dataset = getattr(tracker, "log_dataset", None)
    if log_dataset is not None:
        name = source.rstrip("/").rsplit("/", 2)
        log_dataset(
            source,
            digest,
            name=name[-2] if len(name) > 1 and name[-2] else name[-1],
            context="training",
            tags={
                "conductor.problems": len(by_id),
                "conductor.trained_problems": trained,
                "conductor.split": spec.split or "all",
            },
        )
    return digest


# --------------------------------------------------------------------------------------------
# The stage


def run_stage(
    config: StageConfig,
    *,
    tracker: Tracker | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> StageResult:
    """Run one training stage end to end (resuming from the last checkpoint if there is one).

    Under a distributed launch (:mod:`conductor_core.train.ranks`) every rank trains; ranks other
    than 0 track nothing (``tracker`` is replaced by a :class:`NoopTracker`), write no outputs
    and log one line at the end; their result's ``run_id`` is None.
    """
    launch = ranks.current()
    main = launch.is_main
    tell = log or _quiet
    say = tell if main else _quiet  # other ranks: one line at the end
    if not main:
        tracker = NoopTracker()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    out = config.output_path()
    out.mkdir(parents=True, exist_ok=True)
    if main:
        config.to_yaml(out / "config.yaml")
    point = checkpoints.find_resume_point(config)
    tracker = tracker or make_tracker(config, resume=point.exists)
    started = time.perf_counter()
    tracker.start()
    if getattr(tracker, "resumed", False):
        say(f"tracking: continuing MLflow run {tracker.run_id}")
    status = "FAILED"
    try:
        require("trl", "train", "GRPO training")
        device = resolve_device(config)
        check_backend(config, device)
        ranks.init_distributed(device)
        # This node's local main prepares the files (tiny model, warm-up, a checkpoint from S3)
        # first; the node's other ranks then find them.
        with ranks.local_main_first():
            train, by_id, pool = load_inputs(config)
            tracker.log_params(
                {
                    **config.flat(),
                    **{f"pool.{k}": v for k, v in _flat_pool(pool).items()},
                    "data.train_problems": len(train),
                }
            )
            digest = log_training_dataset(config, tracker, by_id, len(train))
            descriptions = pool.descriptions()  # shown in descriptor mode
            model, tokenizer = prepare_model(config, train, pool, device, say, descriptions)
            if not launch.is_local_main:
                point = checkpoints.find_resume_point(config)  # what the local main downloaded
            local_ckpt = point.local_dir
            local_ckpt.mkdir(parents=True, exist_ok=True)
            resume = point.local
            if point.remote:
                say(f"resume: downloading {point.remote} from {config.checkpoint_uri()}")
                resume = checkpoints.download_checkpoint(
                    config.checkpoint_uri(), point.remote, local_ckpt
                )
        dataset = build_dataset(train, len(pool.workers), config, descriptions)
        reward = stage_reward(
            config,
            by_id,
            pool,
            descriptions=descriptions,  # round-2 prompts show them too
            truncation=truncation_rule(config, tokenizer),
        )
        if resume is not None:
            say(f"resume: from {resume}")
        history: list[dict[str, float]] = []
        samples: list[dict[str, Any]] = []
        args = grpo_args(config, local_ckpt, device, progress)
        callbacks = make_callbacks(config, tracker, history, samples)
        trainer = build_trainer(config, model, tokenizer, dataset, reward, args, callbacks)
        if resume and config.ref_sync_steps:
            trainer.add_callback(reference_from_checkpoint(trainer))
        exp = config.experimental
        masked = config.stage == "adaptive" and config.adaptive.mask_unoffered
        shown_ids = len(pool.workers)
        if config.stage == "adaptive" and config.adaptive.renumber:
            shown_ids = id_range(shown_ids)
        try:
            with routing_exploration(
                model,
                tokenizer,
                trainer.offered_prompts,
                exp.routing_floor,
                exp.routing_coverage,
                mask_pool=shown_ids if masked else 0,
            ):
                trainer.train(resume_from_checkpoint=str(resume) if resume else None)
        finally:
            stop_reward_loop(trainer)
        steps = int(trainer.state.global_step)
        model_dir = out / MODEL_DIR
        state = sharded_state_dict(trainer)  # a collective: every rank takes part
        if main:
            _save_outputs(config, trainer, tokenizer, model_dir, say, state)
        summary = summarize_history(history)
        summary.update(
            stage=config.stage,
            steps=steps,
            seconds=round(time.perf_counter() - started, 1),
            model_dir=str(model_dir),
            resumed_from=str(resume) if resume else None,
            dataset_digest=digest,
        )
        if main:
            (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
            (out / "history.json").write_text(json.dumps(history) + "\n", encoding="utf-8")
            tracker.log_table(samples, "sample_plans.json")
            tracker.log_artifact(out / SUMMARY_FILE)
            tracker.log_artifact(out / "config.yaml")
            if config.tracking.log_model and config.tracking.backend != "none":
                tracker.log_model(
                    model_dir,
                    registered_name=config.tracking.registered_model,
                    alias=config.tracking.alias,
                )
        if launch.distributed:
            ranks.wait_for_everyone()  # every rank returns once rank 0's outputs exist
            tell(
                f"{launch.label()}: trained {steps} steps, its reward scored "
                f"{trainer.batches_scored} batches of plans; "
                + ("wrote the model and tracked the run" if main else "rank 0 writes the outputs")
            )
        status = "FINISHED"
        return StageResult(
            stage=config.stage,
            output_dir=out,
            model_dir=model_dir,
            steps=steps,
            seconds=time.perf_counter() - started,
            resumed_from=str(resume) if resume else None,
            run_id=tracker.run_id,
            dataset_digest=digest,
            history=history,
            summary=summary,
        )
    finally:
        tracker.finish(status)


def _quiet(message: str) -> None:
    """The log of ranks other than 0: the main process says it once."""


def sharded_state_dict(trainer: Any) -> dict[str, Any] | None:
    """Under FSDP (the TrainJob's sharding plan, ``cluster/sharding.py``) the whole model's
    state gathered to rank 0, which every rank must call; None when the weights are not
    sharded (each process holds them whole)."""
    if not getattr(trainer, "is_fsdp_enabled", False):
        return None
    return trainer.accelerator.get_state_dict(trainer.model)


def _save_outputs(
    config: StageConfig,
    trainer: Any,
    tokenizer: Any,
    model_dir: Path,
    say: Callable[[str], None],
    state: dict[str, Any] | None = None,
) -> None:
    """The final model folder (LoRA merged; from ``state``, the gathered weights, under FSDP),
    its prompt spec and its copy at ``model_uri`` (the main process only)."""
    final = trainer.model
    if state is not None:
        trainer.accelerator.unwrap_model(final).save_pretrained(model_dir, state_dict=state)
    else:
        if config.lora.enabled and hasattr(final, "merge_and_unload"):
            final = final.merge_and_unload()
        final.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    save_prompt_spec(
        model_dir,
        config.data.prompt_style,
        config.generation.max_completion_length,
        config.data.descriptors,
    )
    if config.model_uri:
        say(f"model: copying to {config.model_uri}")
        Storage().upload_dir(model_dir, config.model_uri)


def summarize_history(history: list[dict[str, float]], window: int = 5) -> dict[str, Any]:
    """First-vs-last averages (over ``window`` logged steps) of the headline metrics."""
    keys = {
        "reward": "reward",
        "format_error_rate": "conductor/format_error_rate",
        "best_worker_share": "conductor/best_worker_share",
        "mean_steps": "conductor/mean_steps",
    }
    out: dict[str, Any] = {}
    for label, key in keys.items():
        values = [h[key] for h in history if key in h]
        if values:
            head, tail = values[:window], values[-window:]
            out[f"{label}_first"] = round(sum(head) / len(head), 4)
            out[f"{label}_last"] = round(sum(tail) / len(tail), 4)
    return out


def _flat_pool(pool: Any) -> dict[str, Any]:
    return flatten({"workers": {str(i): w for i, w in enumerate(pool.public_dict()["workers"])}})
