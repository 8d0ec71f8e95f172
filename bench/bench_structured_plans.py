"""Structured-output benchmark: format-error rate of a served tiny Conductor with and without the
plan grammar (vLLM ``structured_outputs.regex``), and plans per second.

    python bench/bench_structured_plans.py [--n 100] [--concurrency 8] [--random]
        [--model-dir DIR] [--max-tokens 512] [--max-subtask-chars 120]

Starts a real vLLM server on CPU (``.venv-vllm``, made by ``scripts/setup_vllm_cpu.sh``) the same
way as ``tests/integration/test_vllm_gateway.py`` (``tests/support/vllm_server.py``), serving the
tiny Conductor after the format warm-up (``--random``: the untrained random model), and asks it
N training questions for a pool of 4 workers through :class:`OpenAIPlanSource`, once decoding
freely and once under the grammar. Prints figures, not pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conductor_core.policy.openai_policy import OpenAIPlanSource
from conductor_core.solve import plan_request, solve_options
from conductor_core.tasks.problem import read_problems
from conductor_core.workers.bundled import bundled_pool_path, bundled_train_problems_path
from conductor_core.workers.config import load_pool
from tests.support.vllm_server import (
    VllmUnavailable,
    build_warm_conductor,
    ensure_vllm_venv,
    start_vllm,
)


async def run_mode(url: str, model: str, style: str, questions: list[str], args, structured: bool):
    pool = load_pool(bundled_pool_path())
    options = solve_options(pool, prompt_style=style)
    source = OpenAIPlanSource(
        url,
        model,
        temperature=1.0,
        max_tokens=args.max_tokens,
        timeout_s=300,
        max_retries=0,
        seed=args.seed,
        prompt_style=style,
        structured=structured,
        max_subtask_chars=args.max_subtask_chars if structured else None,
    )
    gate = asyncio.Semaphore(args.concurrency)

    async def one(i: int, question: str):
        async with gate:
            return await source.plan(plan_request(question, len(pool.workers), options, i))

    # One untimed request first, so that grammar compilation and warm caches are not counted.
    await source.plan(plan_request(questions[0], len(pool.workers), options, 10_000))
    start = time.perf_counter()
    results = await asyncio.gather(*(one(i, q) for i, q in enumerate(questions)))
    seconds = time.perf_counter() - start
    await source.aclose()
    return results, seconds


def report(name: str, results, seconds: float) -> dict:
    errors = [r for r in results if r.error is not None]
    codes = Counter(str(r.error.code) for r in errors)
    length = sum(1 for r in results if r.extra.get("finish_reason") == "length")
    tokens = sum(r.output_tokens for r in results) / max(1, len(results))
    steps = Counter(len(r.workflow) for r in results if r.workflow is not None)
    row = {
        "mode": name,
        "n": len(results),
        "format_errors": len(errors),
        "error_rate": len(errors) / max(1, len(results)),
        "plans_per_s": len(results) / seconds,
        "seconds": seconds,
        "mean_output_tokens": tokens,
        "cut_by_max_tokens": length,
        "codes": dict(codes),
        "steps": dict(sorted(steps.items())),
    }
    print(
        f"{name:>12}: format errors {len(errors):3d}/{len(results)} "
        f"({row['error_rate']:.0%}), {row['plans_per_s']:.2f} plans/s ({seconds:.1f} s), "
        f"{tokens:.0f} output tokens/plan, {length} cut by max_tokens, "
        f"errors {dict(codes) or '-'}, plan lengths {row['steps']}"
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100, help="questions per mode")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=512)
    parser.add_argument("--max-subtask-chars", type=int, default=120)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random", action="store_true", help="serve the untrained random model")
    parser.add_argument("--model-dir", help="reuse (or build into) this folder")
    parser.add_argument("--show", type=int, default=2, help="sample outputs to print per mode")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-structured-") as tmp:
        work = Path(tmp)
        try:
            python, setup_s = ensure_vllm_venv()
        except VllmUnavailable as exc:
            print(f"vLLM on CPU is not available: {exc}", file=sys.stderr)
            return 2
        model_dir = Path(args.model_dir) if args.model_dir else work / "model"
        start = time.monotonic()
        conductor = build_warm_conductor(model_dir)
        served = (
            conductor.path.with_name(conductor.path.name + "-random")
            if args.random
            else conductor.path
        )
        what = "the random (untrained) model" if args.random else "the warmed-up model"
        print(
            f"setup: venv {setup_s:.1f} s; tiny Conductor warm-up "
            f"{conductor.warmup['steps']:.0f} steps, loss {conductor.warmup['loss']:.2f}, "
            f"{time.monotonic() - start:.0f} s; serving {what}"
        )
        try:
            server = start_vllm(python, served, work / "scratch")
        except VllmUnavailable as exc:
            print(f"the vLLM server could not start: {exc}", file=sys.stderr)
            return 2
        try:
            print(f"vLLM ready in {server.ready_s:.0f} s at {server.url}")
            problems = read_problems(bundled_train_problems_path())
            questions = [p.question for p in problems[: args.n]]
            rows = []
            for name, structured in (("free", False), ("structured", True)):
                results, seconds = asyncio.run(
                    run_mode(
                        server.url,
                        server.model,
                        conductor.prompt_style,
                        questions,
                        args,
                        structured,
                    )
                )
                rows.append(report(name, results, seconds))
                for r in results[: args.show]:
                    print(f"    sample: {r.raw[:160]!r}")
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
