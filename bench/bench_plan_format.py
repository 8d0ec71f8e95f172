"""How often a model's sampled plans parse, unaided and under the plan grammar: what tells whether
GRPO from reward alone can start on it (a group whose plans all fail to parse scores 0 everywhere,
and gives no gradient).

Samples ``--plans`` plans for each of the first ``--questions`` training questions of the bundled
set, at ``--temperature`` (GRPO's sampling), through the library's local plan source, in each
prompt style asked, and prints the share that parse and a few of them. Figures:
docs/notes/training.md, "The small profile".

    .venv/bin/python bench/bench_plan_format.py                                    # bundled 135M
    .venv/bin/python bench/bench_plan_format.py --model runs/small/base/model --styles compact
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m-instruct")
    parser.add_argument("--styles", default="compact,full", help="prompt styles, comma-separated")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument(
        "--skip", type=int, default=0, help="start at this question of the split (0: the first)"
    )
    parser.add_argument("--split", default="train", help="the bundled set's split to ask")
    parser.add_argument("--plans", type=int, default=8, help="plans per question (one batch)")
    parser.add_argument("--tokens", type=int, default=128, help="completion length")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--grammar", action="store_true", help="also sample under the grammar")
    parser.add_argument("--max-subtask-chars", type=int, default=None)
    parser.add_argument("--show", type=int, default=2, help="plans printed per style")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")

    from conductor_core.policy.local import TransformersPlanSource
    from conductor_core.solve import plan_request
    from conductor_core.train.config import build_config
    from conductor_core.train.data import stage_options
    from conductor_core.train.grpo import load_inputs

    config = build_config({"data": {"split": args.split}}, stage="base", profile="small")
    train, _, pool = load_inputs(config)
    size = len(pool.workers)
    print(
        f"model: {args.model}; {args.questions} questions x {args.plans} plans, "
        f"{args.tokens} tokens, temperature {args.temperature}, split {args.split}; "
        f"{os.cpu_count()} cores"
    )
    modes = [False, True] if args.grammar else [False]
    for style in args.styles.split(","):
        options = stage_options(
            config.model_copy(
                update={"data": config.data.model_copy(update={"prompt_style": style})}
            ),
            None,
        )
        for grammar in modes:
            source = TransformersPlanSource(
                args.model,
                max_new_tokens=args.tokens,
                temperature=args.temperature,
                seed=0,
                prompt_style=style,
                plan_grammar=grammar,
                max_subtask_chars=args.max_subtask_chars,
            )
            started = time.perf_counter()
            results = []
            for problem in train[args.skip : args.skip + args.questions]:
                requests = [
                    plan_request(problem.question, size, options, sample_index=k)
                    for k in range(args.plans)
                ]
                results += source.generate_many(requests)
            seconds = time.perf_counter() - started
            parsed = sum(r.ok for r in results)
            how = "under the grammar" if grammar else "unaided"
            print(
                f"{style:8s} {how:18s} {parsed}/{len(results)} parse "
                f"({parsed / len(results):.0%}), {seconds:.0f}s"
            )
            errors = Counter(r.error.code.value for r in results if r.error is not None)
            if errors:
                print("    errors: " + ", ".join(f"{code} {n}" for code, n in errors.most_common()))
            for r in results[: args.show]:
                print(f"    {r.raw[:160]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
