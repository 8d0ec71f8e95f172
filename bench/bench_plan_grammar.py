"""Plan-grammar benchmark: a local transformers Conductor with and without the plan grammar
(:mod:`conductor_core.policy.plan_mask`): format errors, tokens and milliseconds per plan, and the
decoding overhead (time spent computing and applying the token masks).

    python bench/bench_plan_grammar.py --model DIR [--workers 4] [--repeats 3] [--batch 1]

``DIR`` is a model folder (e.g. ``runs/pipelines/<run>/recursive/model`` from ``conductor
pipeline run training --local``); without ``--model`` the untrained tiny Conductor is used. The
questions are the 60 bundled demo problems; each is planned ``--repeats`` times (sample index =
repeat) at temperature 1, in batches of ``--batch``. Prints figures, not pass/fail. Accuracy
needs the workers: ``conductor eval run --benchmark demo ... [--no-plan-grammar]``
(``docs/evaluation.md``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conductor_core.policy.base import PlanRequest, WorkerInfo
from conductor_core.policy.local import TransformersPlanSource
from conductor_core.tasks.problem import read_problems

DEMO = Path(__file__).resolve().parents[1] / "conductor_core/resources/problems/demo.jsonl"


def warm_source(model: Path, requests: list[PlanRequest], args, grammar: bool):
    source = TransformersPlanSource(model, seed=args.seed, plan_grammar=grammar)
    source.load()
    source.generate_many(requests[: args.batch])  # first-call costs (and the vocabulary read)
    return source


def run_modes(sources: dict, requests: list[PlanRequest], args) -> dict:
    """Each batch planned by every source in turn (so that load on the machine hits all alike)."""
    results: dict = {k: [] for k in sources}
    wall: dict = dict.fromkeys(sources, 0.0)
    for i in range(0, len(requests), args.batch):
        batch = requests[i : i + args.batch]
        for key, source in sources.items():
            start = time.perf_counter()
            results[key] += source.generate_many(batch)
            wall[key] += time.perf_counter() - start
    return {key: figures(results[key], wall[key]) for key in sources}


def figures(results: list, wall: float) -> dict:
    plans = len(results)
    tokens = sum(r.output_tokens for r in results)
    mask = sum(r.extra.get("grammar_s", 0.0) / r.extra["batch_size"] for r in results)
    return {
        "plans": plans,
        "errors": Counter(r.error.code.value for r in results if not r.ok),
        "cut": sum(r.extra["finish_reason"] == "length" for r in results),
        "tokens": tokens / plans,
        "ms_plan": 1000 * wall / plans,
        "ms_token": 1000 * wall / tokens,
        "mask_ms_plan": 1000 * mask / plans,
        "mask_us_token": 1e6 * mask / tokens,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="Model folder (default: tiny).")
    parser.add_argument("--workers", type=int, default=4, help="Offered workers (default 4).")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.model is None:
        from conductor_core.policy.tiny import default_tiny_dir

        args.model = default_tiny_dir()
    workers = tuple(WorkerInfo(i) for i in range(args.workers))
    questions = [p.question for p in read_problems(DEMO)]
    requests = [
        PlanRequest(question=q, workers=workers, sample_index=r)
        for r in range(args.repeats)
        for q in questions
    ]
    print(
        f"model {args.model}: {len(requests)} plans ({len(questions)} demo questions x "
        f"{args.repeats}), {args.workers} workers, batch {args.batch}"
    )
    header = (
        f"{'grammar':8} {'format errors':>14} {'cut short':>9} {'tokens/plan':>11} "
        f"{'ms/plan':>8} {'ms/token':>8} {'mask ms/plan':>12} {'mask us/token':>13}"
    )
    print(header)
    sources = {grammar: warm_source(args.model, requests, args, grammar) for grammar in (0, 1)}
    for grammar, f in run_modes(sources, requests, args).items():
        errors = sum(f["errors"].values())
        print(
            f"{'on' if grammar else 'off':8} {100 * errors / f['plans']:13.1f}% "
            f"{f['cut']:9d} {f['tokens']:11.1f} {f['ms_plan']:8.1f} {f['ms_token']:8.2f} "
            f"{f['mask_ms_plan']:12.2f} {f['mask_us_token']:13.1f}"
        )
        if f["errors"]:
            print(f"{'':8} error codes: {dict(f['errors'].most_common())}")


if __name__ == "__main__":
    main()
