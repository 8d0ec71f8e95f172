"""GPU memory of one training process: the arithmetic behind a TrainJob's sharding plan.

:func:`memory_plan` adds up, for one GPU, what a GRPO stage holds in each phase of a step and
takes the largest sum as the peak. The table of docs/training.md ("Memory at the paper's scale")
is :func:`memory_table` of the plans of :func:`paper_plans`; a test checks that they agree.

Units: GB = 10^9 bytes. What is counted, per GPU (P parameters, N processes sharing them, B
completions per forward pass of T tokens each, C of them completion tokens; h hidden size, I MLP
size, V vocabulary, L layers):

* weights, gradients, AdamW moments: 4 + 4 + 8 bytes per trainable parameter, fp32 (master
  weights with bf16 compute), divided by N under FSDP2;
* bf16 compute copies: FSDP2 gathers the root unit (embeddings, LM head, final norm; it stays
  gathered through forward and backward) and two decoder layers (the current one and the
  prefetched next) in bf16, and their bf16 gradients before the reduce-scatter; unsharded, bf16
  autocast caches a bf16 copy of every fp32 weight for the forward, and DDP keeps its gradient
  buckets (a second fp32 copy of the gradients: accelerate's default
  ``gradient_as_bucket_view=False``);
* activations with gradient checkpointing: each layer's input (2·h bytes a token, L layers), and
  in the backward one layer recomputed: (32·h + 8·I) bytes a token saved for its backward (bf16
  compute, RMSNorm's fp32 upcasts; measured on a Qwen2 layer of the 7B's size: 31·h + 8·I) plus
  4·I for the gradients in flight. Attention runs in SDPA's flash/memory-efficient kernels (no
  T^2 term);
* the LM head: TRL 1.16 computes the log-probabilities of the completion tokens in tiles
  (``trl/kernels/chunked_logprob.py``: 4096 tokens x 32768 vocabulary entries) without the
  (B, T, V) logits, accumulating the head's weight gradient (4·V·h) and the hidden states'
  gradient (4·B·C·h) in fp32;
* the colocated vLLM: ``vllm_gpu_memory_utilization`` of the GPU, all the time (without sleep
  mode): its bf16 weights (2·P), activations and CUDA graphs, the rest KV cache; under FSDP2 the
  weight sync gathers one full fp32 parameter at a time (the largest: 4·V·h);
* the CUDA context, NCCL buffers and allocator slack: a fixed allowance.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

GB = 1e9
"""Bytes in a GB (decimal, as GPU memory is sold: an "80 GB" H100 reports 85.5 GB)."""

GENERATION = "generation"
"""Phase: vLLM samples the plans (after the weight sync); no gradients exist."""
LM_HEAD = "LM-head backward"
"""Phase: the backward through the LM head, first of the backward pass."""
BACKWARD = "layer backward"
"""Phase: the backward through one decoder layer, recomputed from its checkpoint."""
PHASES = (GENERATION, LM_HEAD, BACKWARD)

TOKEN_TILE = 4096
"""Tokens per LM-head tile (TRL 1.16, ``trl/kernels/chunked_logprob.py``: TOKEN_CHUNK_SIZE)."""
VOCAB_TILE = 32768
"""Vocabulary entries per LM-head tile (TRL 1.16: ``_CHUNKED_LOGPROB_CHUNK_SIZE``)."""
VLLM_RUNTIME_GB = 2.0
"""What a colocated vLLM takes of its share besides weights and KV cache (activations of a
4096-token batch, CUDA graphs): an estimate, used to report its KV cache."""

Sharding = Literal["none", "fsdp2"]


@dataclass(frozen=True)
class ModelShape:
    """A dense decoder-only transformer in the Qwen2/Llama layout (q/k/v/o projections with
    grouped KV heads, a gated MLP, RMSNorm)."""

    name: str
    layers: int
    hidden: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    tied_embeddings: bool = False
    qkv_bias: bool = True

    @property
    def head_dim(self) -> int:
        """Size of one attention head."""
        return self.hidden // self.heads

    @property
    def kv_dim(self) -> int:
        """Size of the keys (and of the values) of one token."""
        return self.kv_heads * self.head_dim

    def module_params(self) -> dict[str, int]:
        """Weights of each linear layer of one decoder layer (biases included)."""
        h, kv, inter = self.hidden, self.kv_dim, self.intermediate
        bias = 1 if self.qkv_bias else 0
        return {
            "q_proj": h * h + bias * h,
            "k_proj": h * kv + bias * kv,
            "v_proj": h * kv + bias * kv,
            "o_proj": h * h,
            "gate_proj": h * inter,
            "up_proj": h * inter,
            "down_proj": inter * h,
        }

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (its linear layers and two norms)."""
        return sum(self.module_params().values()) + 2 * self.hidden

    @property
    def root_params(self) -> int:
        """Parameters outside the decoder layers: embeddings, LM head (unless tied), final norm."""
        embeddings = self.vocab * self.hidden
        return embeddings * (1 if self.tied_embeddings else 2) + self.hidden

    @property
    def params(self) -> int:
        """All parameters."""
        return self.layers * self.layer_params + self.root_params

    def lora_params(self, rank: int, targets: Sequence[str]) -> int:
        """Parameters of LoRA adapters of ``rank`` on the ``targets`` of every layer."""
        h, kv, inter = self.hidden, self.kv_dim, self.intermediate
        shapes = {
            "q_proj": (h, h),
            "k_proj": (h, kv),
            "v_proj": (h, kv),
            "o_proj": (h, h),
            "gate_proj": (h, inter),
            "up_proj": (h, inter),
            "down_proj": (inter, h),
        }
        return self.layers * sum(rank * sum(shapes[name]) for name in targets)

    @property
    def kv_bytes_per_token(self) -> int:
        """bf16 KV cache of one token (keys and values of every layer)."""
        return 2 * self.layers * self.kv_dim * 2


QWEN2_5_7B = ModelShape(
    name="Qwen/Qwen2.5-7B",
    layers=28,
    hidden=3584,
    intermediate=18944,
    vocab=152064,
    heads=28,
    kv_heads=4,
)
"""The paper's Conductor: 7.62B parameters (config.json of Qwen/Qwen2.5-7B)."""


@dataclass(frozen=True)
class MemoryItem:
    """One thing a training process keeps on its GPU, and the phases in which it is there."""

    name: str
    gb: float
    phases: frozenset[str]


@dataclass(frozen=True)
class MemoryPlan:
    """What one GPU holds in each phase of a GRPO step, and whether the peak fits."""

    label: str
    gpu_gb: float
    items: tuple[MemoryItem, ...]
    notes: dict[str, float] = field(default_factory=dict)
    """Figures the docs quote beside the table (e.g. the vLLM KV cache in GB and in tokens)."""

    def phase_gb(self, phase: str) -> float:
        """GB held during ``phase``."""
        return sum(item.gb for item in self.items if phase in item.phases)

    @property
    def peak_phase(self) -> str:
        """The phase with the most memory."""
        return max(PHASES, key=self.phase_gb)

    @property
    def peak_gb(self) -> float:
        """GB held at the peak."""
        return self.phase_gb(self.peak_phase)

    @property
    def fits(self) -> bool:
        """Whether the peak fits the GPU."""
        return self.peak_gb <= self.gpu_gb

    def item_gb(self, name: str) -> float:
        """GB of the item called ``name`` (0 when the plan has none)."""
        return sum(item.gb for item in self.items if item.name == name)


ALL = frozenset(PHASES)
TRAINING = frozenset({LM_HEAD, BACKWARD})

WEIGHTS = "weights (fp32 master; LoRA: frozen base + adapters)"
GRADIENTS = "gradients (fp32)"
ADAM = "AdamW moments (fp32)"
COMPUTE_COPIES = "bf16 weights for compute (FSDP2: gathered units; else autocast copies)"
UNREDUCED = "gradients before reduction (FSDP2: bf16 units; DDP: fp32 buckets)"
CHECKPOINTS = "activations: layer-input checkpoints"
RECOMPUTE = "activations: one layer recomputed, with its gradients"
LM_HEAD_ITEM = "LM head, fused and tiled (fp32 gradients, tiles)"
SYNC = "weight sync to vLLM (one full fp32 parameter)"
VLLM = "colocated vLLM (weights, KV cache, graphs)"
OVERHEAD = "CUDA context, NCCL, allocator slack"
ITEM_NAMES = (
    WEIGHTS,
    GRADIENTS,
    ADAM,
    COMPUTE_COPIES,
    UNREDUCED,
    CHECKPOINTS,
    RECOMPUTE,
    LM_HEAD_ITEM,
    SYNC,
    VLLM,
    OVERHEAD,
)
"""The rows of :func:`memory_table`, in order."""


def memory_plan(
    model: ModelShape,
    gpus: int,
    *,
    sharding: Sharding = "fsdp2",
    gpu_gb: float = 80.0,
    micro_batch: int = 16,
    prompt_tokens: int = 2048,
    completion_tokens: int = 1024,
    vllm_gpu_memory_utilization: float = 0.3,
    vllm_tensor_parallel_size: int = 1,
    vllm_sleep_mode: bool = False,
    gradient_checkpointing: bool = True,
    lora_rank: int = 0,
    lora_targets: Sequence[str] = ("q_proj", "k_proj", "v_proj", "o_proj"),
    frozen_weight_bytes: int = 2,
    overhead_gb: float = 4.0,
    label: str = "",
) -> MemoryPlan:
    """The memory of one of ``gpus`` training processes of ``model`` (see the module docstring).

    Args:
        model: the policy's shape (e.g. :data:`QWEN2_5_7B`).
        gpus: processes (one per GPU) that train together; FSDP2 shards over all of them.
        sharding: ``fsdp2`` (fully sharded, fp32 master weights, bf16 compute) or ``none``
            (every process holds everything: DDP when ``gpus`` > 1).
        gpu_gb: memory of one GPU, in GB.
        micro_batch: completions per forward/backward pass on one process.
        prompt_tokens, completion_tokens: the padded prompt and completion lengths of a pass.
        vllm_gpu_memory_utilization: the colocated vLLM's share of the GPU (0: no colocated vLLM).
        vllm_tensor_parallel_size: GPUs each vLLM engine spreads its weights over.
        vllm_sleep_mode: vLLM sleeps (level 2: weights and KV cache released) outside
            generation, as TRL's ``vllm_enable_sleep_mode`` makes it; its share then counts in
            the generation phase only.
        gradient_checkpointing: recompute each layer in the backward instead of storing it
            (without it the checkpoints item holds every layer's activations).
        lora_rank: LoRA adapters of this rank on ``lora_targets`` instead of a full fine-tune
            (0: full fine-tune); the frozen base is stored in ``frozen_weight_bytes`` per
            parameter (2: bf16, 4: fp32).
        overhead_gb: the allowance for the CUDA context, NCCL buffers and fragmentation.
        label: a name for the plan (the column heading of :func:`memory_table`).
    """
    if gpus < 1 or micro_batch < 1:
        raise ValueError("gpus and micro_batch must be at least 1")
    h, inter, vocab = model.hidden, model.intermediate, model.vocab
    params = model.params
    lora = lora_rank > 0
    trainable = model.lora_params(lora_rank, lora_targets) if lora else params
    shards = gpus if sharding == "fsdp2" else 1
    tokens = micro_batch * (prompt_tokens + completion_tokens)
    scored = micro_batch * completion_tokens

    if lora:
        weights = (frozen_weight_bytes * params + 4 * trainable) / shards
    else:
        weights = 4 * trainable / shards
    if sharding == "fsdp2":
        copies = 2 * (model.root_params + 2 * model.layer_params)
        unreduced = copies
    else:
        # bf16 autocast caches a bf16 copy of each fp32 weight that requires grad; a bf16 frozen
        # base needs none (and a frozen fp32 base is cast per op, not cached).
        copies = 2 * trainable
        unreduced = 4 * trainable if gpus > 1 else 0.0
    if gradient_checkpointing:
        checkpoints = model.layers * tokens * 2 * h
        recompute = tokens * (32 * h + 12 * inter)
    else:
        checkpoints = model.layers * tokens * (32 * h + 8 * inter)
        recompute = tokens * 4 * inter
    head_trainable = not lora
    lm_head = (
        (4 * vocab * h if head_trainable else 0) + 4 * scored * h + 2 * TOKEN_TILE * VOCAB_TILE * 4
    )
    sync = 4 * vocab * h if sharding == "fsdp2" and not lora else 0.0
    vllm = vllm_gpu_memory_utilization * gpu_gb * GB
    vllm_weights = 2 * params / vllm_tensor_parallel_size
    kv = vllm - vllm_weights - VLLM_RUNTIME_GB * GB if vllm else 0.0

    items = (
        MemoryItem(WEIGHTS, weights / GB, ALL),
        MemoryItem(GRADIENTS, 4 * trainable / shards / GB, TRAINING),
        MemoryItem(ADAM, 8 * trainable / shards / GB, ALL),
        MemoryItem(COMPUTE_COPIES, copies / GB, TRAINING),
        MemoryItem(UNREDUCED, unreduced / GB, frozenset({BACKWARD})),
        MemoryItem(CHECKPOINTS, checkpoints / GB, TRAINING),
        MemoryItem(RECOMPUTE, recompute / GB, frozenset({BACKWARD})),
        MemoryItem(LM_HEAD_ITEM, lm_head / GB, frozenset({LM_HEAD})),
        MemoryItem(SYNC, sync / GB, frozenset({GENERATION})),
        MemoryItem(VLLM, vllm / GB, frozenset({GENERATION}) if vllm_sleep_mode else ALL),
        MemoryItem(OVERHEAD, overhead_gb, ALL),
    )
    notes = {
        "params_b": params / 1e9,
        "trainable_b": trainable / 1e9,
        "tokens_per_pass": float(tokens),
        "vllm_weights_gb": vllm_weights / GB if vllm else 0.0,
        "vllm_kv_gb": kv / GB,
        "vllm_kv_tokens": float(max(0, math.floor(kv / model.kv_bytes_per_token))),
    }
    return MemoryPlan(label=label, gpu_gb=gpu_gb, items=items, notes=notes)


def paper_plans(gpus: int = 8, gpu_gb: float = 80.0) -> list[MemoryPlan]:
    """The plans of the docs table: the paper profile's stage on ``gpus`` GPUs of ``gpu_gb``
    (16 completions per pass, prompts of up to 2048 tokens padded, completions of 1024, a
    colocated vLLM at 0.3), fully sharded (what the TrainJob runs), unsharded (DDP), LoRA (r 16 on
    the attention projections, bf16 base, unsharded), and the recursive stage's longer prompts
    (the previous plan and the previous answer: up to 6144 tokens) fully sharded."""
    common = {"gpus": gpus, "gpu_gb": gpu_gb}
    return [
        memory_plan(QWEN2_5_7B, sharding="fsdp2", label="full, FSDP2 (the TrainJob)", **common),
        memory_plan(QWEN2_5_7B, sharding="none", label="full, unsharded (DDP)", **common),
        memory_plan(QWEN2_5_7B, sharding="none", lora_rank=16, label="LoRA r=16, DDP", **common),
        memory_plan(
            QWEN2_5_7B,
            sharding="fsdp2",
            prompt_tokens=6144,
            label="full, FSDP2, recursive prompts",
            **common,
        ),
    ]


def memory_table(plans: Sequence[MemoryPlan]) -> str:
    """A Markdown table: one row per item (GB per GPU), one column per plan, then the peak per
    phase, the peak and whether it fits."""
    head = "| GB per GPU | " + " | ".join(plan.label for plan in plans) + " |"
    rule = "|---|" + "---:|" * len(plans)
    rows = [head, rule]
    for name in ITEM_NAMES:
        rows.append(f"| {name} | " + " | ".join(f"{p.item_gb(name):.1f}" for p in plans) + " |")
    for phase in PHASES:
        rows.append(
            f"| **held during {phase}** | "
            + " | ".join(f"{p.phase_gb(phase):.1f}" for p in plans)
            + " |"
        )
    rows.append(
        "| **peak / fits the GPU** | "
        + " | ".join(
            f"**{p.peak_gb:.1f} / {'yes' if p.fits else 'no'}** ({p.gpu_gb:.0f} GB)" for p in plans
        )
        + " |"
    )
    return "\n".join(rows)
