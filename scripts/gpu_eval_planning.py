"""GPU check: plan a whole evaluation shard with vLLM's offline batch API (one LLM.chat call).

Builds a model directory with the Qwen2.5-7B architecture and random weights (vLLM
``load_format="dummy"``: nothing is downloaded), then plans N problems in one batch and prints
plans per second, tokens per second and the format-error rate (random weights write garbage, so
nearly every plan is a format error: this measures throughput, not quality). Needs a GPU and
``pip install 'conductor-core[vllm]'``.

    python scripts/gpu_eval_planning.py [--arch qwen2.5-7b] [--problems 512] [--max-tokens 256]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="qwen2.5-7b")
    ap.add_argument("--problems", type=int, default=512)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.85)
    args = ap.parse_args()

    from architectures import architecture_dir
    from vllm_batch import VLLMBatchPlanSource

    from conductor_core.policy.base import PlanRequest, WorkerInfo
    from conductor_core.tasks.problem import read_problems
    from conductor_core.workers.bundled import bundled_problems_path

    base = read_problems(bundled_problems_path())
    questions = [f"{base[i % len(base)].question} (#{i})" for i in range(args.problems)]
    workers = tuple(WorkerInfo(id=i) for i in range(4))
    requests = [
        PlanRequest(question=q, workers=workers, sample_index=i) for i, q in enumerate(questions)
    ]

    with tempfile.TemporaryDirectory() as tmp:
        model_dir = architecture_dir(f"{tmp}/model", args.arch)
        source = VLLMBatchPlanSource(
            model_dir,
            max_tokens=args.max_tokens,
            load_format="dummy",
            dtype="bfloat16",
            max_model_len=8192,
            gpu_memory_utilization=args.gpu_memory_utilization,
        )
        t0 = time.perf_counter()
        source.engine()
        load_s = time.perf_counter() - t0
        asyncio.run(source.plan_many(requests[:8]))  # warm-up (CUDA graphs, caches)
        t0 = time.perf_counter()
        results = asyncio.run(source.plan_many(requests))
        wall = time.perf_counter() - t0
    out_tokens = sum(r.output_tokens for r in results)
    in_tokens = sum(r.input_tokens for r in results)
    figures = {
        "arch": args.arch,
        "problems": len(results),
        "engine_load_s": round(load_s, 1),
        "wall_s": round(wall, 2),
        "plans_per_s": round(len(results) / wall, 1),
        "output_tokens_per_s": round(out_tokens / wall),
        "prompt_tokens": in_tokens,
        "format_error_rate": round(sum(not r.ok for r in results) / len(results), 3),
    }
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
