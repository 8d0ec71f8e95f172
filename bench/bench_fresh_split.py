"""A fresh held-out split for the bundled training problems: questions of the same generator
(``conductor_core.simulation.routing_problems.synthetic_problems``, another seed) that the
bundled set does not hold, 40 a domain as in its test split. Every recipe of the tiny profile
was chosen reading the bundled test split; this one was never read before (docs/results.md).

    .venv/bin/python bench/bench_fresh_split.py --out FRESH.jsonl [--seed 1] [--per-domain 40]
    conductor eval run --benchmark FRESH.jsonl --problems FRESH.jsonl \\
        --pool conductor_core/resources/train/pool.yaml --conductor MODEL --baselines single,moa
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv: list[str] | None = None) -> int:
    """Write the fresh split; print how many questions of each domain it holds."""
    from conductor_core.simulation.routing_problems import synthetic_problems
    from conductor_core.tasks.problem import read_problems, write_jsonl
    from conductor_core.workers.bundled import bundled_train_problems_path

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=1, help="Generator seed (the bundled set's: 0).")
    ap.add_argument("--per-domain", type=int, default=40)
    args = ap.parse_args(argv)
    if args.seed == 0:
        raise SystemExit("--seed 0 is the bundled set's own seed")
    bundled = {p.question for p in read_problems(bundled_train_problems_path())}
    kept: list = []
    counts: Counter = Counter()
    for p in synthetic_problems(args.per_domain * 5, seed=args.seed):
        if p.question in bundled or counts[p.domain] >= args.per_domain:
            continue
        counts[p.domain] += 1
        kept.append(p.model_copy(update={"id": f"fresh-{p.id}", "metadata": {"split": "fresh"}}))
    write_jsonl(kept, args.out)
    print(
        f"{args.out}: {len(kept)} questions ({', '.join(f'{d}: {n}' for d, n in counts.items())})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
