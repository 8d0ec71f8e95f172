"""Routing inside offered subsets: does an adaptive Conductor send each question to the best
worker it is offered?

For a trained Conductor (a model folder, e.g. ``runs/adaptive/model``) and a simulated pool (the
tiny profile's, ``conductor_core/resources/train/pool.yaml``, unless ``--pool``), every 2- and
3-worker subset of the pool is offered in turn (under its pool ids, as in training) on the
held-out (``test`` split) questions. For each question the worker whose output is the answer
(the last step that ran; the single step of a one-step plan) is compared with the best offered
worker for the question's domain: the highest simulated skill for that domain among the offered
(any of those tied for it). Questions whose offered workers all have the same skill for their
domain are left out (no choice is better there). A plan that does not parse, or names a worker
that was not offered, counts as a miss. Plans go through the library's evaluation path
(:class:`~conductor_core.evaluate.methods.PlanSourceMethod` over
:class:`~conductor_core.policy.local.TransformersPlanSource`, then
:func:`~conductor_core.evaluate.runner.run_eval`), so they are planned and run as anywhere else.
They are decoded under the plan grammar, as deployment decodes a local or served Conductor (only
offered ids can be written); ``--no-plan-grammar`` measures the model unaided.

Descriptor mode (``--descriptors``): each offered worker is shown with its pool description. With
``--new-worker DOMAIN`` the pool's best worker for DOMAIN is replaced by a newcomer no training
saw (a new name and simulation seed, the same skills, its description, at the last id), and the
share of DOMAIN's questions answered by the newcomer is printed for every subset offering it,
beside the share of the other domains' questions it answered (a policy that always picks one
position or id would score high on the first and the second alike).

    .venv/bin/python bench/bench_adaptive_routing.py runs/adaptive/model [--held-out 60]
        [--plans 1] [--temperature 0] [--sizes 2 3] [--pool POOL] [--seed 0] [--no-plan-grammar]
        [--descriptors [--new-worker DOMAIN [--new-description TEXT]]]
    .venv/bin/python bench/bench_adaptive_routing.py --train OUT [--base-steps 130]
        [--adaptive-steps 80]     # no model: train the tiny profile's base + adaptive stages
    .venv/bin/python bench/bench_adaptive_routing.py --train OUT --descriptors
        [--adaptive-steps 160] [--new-worker DOMAIN]   # descriptor mode's recipe, then measure

Training (the learning test's recipe: warm-up 300 steps, base GRPO, then the adaptive stage) takes
about 10 CPU-minutes; with ``--descriptors`` it trains descriptor mode's recipe instead
(:data:`experiment.DESCRIPTOR_MODE`: the adaptive stage from a random
model, with a format warm-up and the expert start in descriptor mode, then the tiny profile's
160 GRPO steps), about 10 CPU-minutes. The measurement itself takes about a minute for 10
subsets x 60 questions.
Prints a table (one row per subset) and the share averaged over subsets.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conductor_core.tasks.problem import Problem
    from conductor_core.workers.config import PoolConfig


@dataclass
class SubsetResult:
    """The figures of one offered subset."""

    subset: tuple[int, ...]
    judged: int = 0
    """Plans of questions where the offered workers differ in skill for the domain."""
    best: int = 0
    """Of those, the plans whose answer came from a best offered worker."""
    format_errors: int = 0
    correct: int = 0
    plans: int = 0
    routed: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    """Per domain: how many plans' answers came from each worker (None: no answer)."""

    @property
    def share(self) -> float:
        return self.best / self.judged if self.judged else float("nan")


def skill(pool: PoolConfig, worker: int, domain: str) -> float:
    """The simulated skill of pool worker ``worker`` for ``domain``."""
    sim = pool.workers[worker].simulation
    if sim is None:
        raise SystemExit(f"worker {worker} is not simulated: this bench needs a simulated pool")
    return sim.skills.get(domain, sim.default_skill)


def best_offered(pool: PoolConfig, subset: Sequence[int], domain: str) -> set[int] | None:
    """The offered workers with the highest skill for ``domain`` (None: all offered tie)."""
    skills = {w: skill(pool, w, domain) for w in subset}
    top = max(skills.values())
    best = {w for w, s in skills.items() if s == top}
    return None if len(best) == len(skills) else best


def subsets(size: int, sizes: Sequence[int]) -> list[tuple[int, ...]]:
    """Every subset of ``range(size)`` with a size in ``sizes``, in pool order."""
    out: list[tuple[int, ...]] = []
    for k in sizes:
        if 1 <= k <= size:
            out.extend(itertools.combinations(range(size), k))
    return out


def measure(
    model_dir: Path,
    problems: Sequence[Problem],
    pool: PoolConfig,
    config: Any,
    *,
    sizes: Sequence[int],
    plans: int,
    temperature: float,
    seed: int,
    plan_grammar: bool = True,
    descriptors: bool = False,
) -> list[SubsetResult]:
    """Plan, run and judge every subset's held-out questions (``descriptors``: each offered
    worker shown with its pool description)."""
    from conductor_core.evaluate.methods import PlanSourceMethod
    from conductor_core.evaluate.runner import RunConfig, run_eval
    from conductor_core.policy.local import TransformersPlanSource
    from conductor_core.train.data import stage_options
    from conductor_core.workers.pool import WorkerPool

    source = TransformersPlanSource(
        model_dir, temperature=temperature, seed=seed, plan_grammar=plan_grammar
    )
    base = replace(
        stage_options(config),
        descriptors=descriptors,
        descriptions=pool.descriptions(),
    )
    chosen = subsets(len(pool.workers), sizes)
    methods = [
        PlanSourceMethod(
            "subset " + ",".join(map(str, ids)),
            source,
            replace(base, worker_ids=ids, max_rounds=1),
            keep_trace=False,
        )
        for ids in chosen
    ]
    run = RunConfig(repeats=plans, seed=seed, progress=False, infra_retries=0, keep_traces=False)

    async def go() -> list[Any]:
        async with WorkerPool(pool) as workers:
            with tempfile.TemporaryDirectory(prefix="bench-adaptive-routing-") as tmp:
                return await run_eval(problems, methods, workers, Path(tmp) / "r.jsonl", run)

    records = asyncio.run(go())
    results = {m.name: SubsetResult(ids) for m, ids in zip(methods, chosen, strict=True)}
    for record in records:
        result = results[record.method]
        result.plans += 1
        result.format_errors += record.format_error
        result.correct += record.correct
        result.routed[record.domain][record.final_worker] += 1
        best = best_offered(pool, result.subset, record.domain)
        if best is None:
            continue
        result.judged += 1
        result.best += record.final_worker in best
    return list(results.values())


def with_new_worker(pool: PoolConfig, domain: str, description: str | None) -> tuple[Any, int]:
    """``pool`` with its best worker for ``domain`` replaced by a newcomer that no training saw:
    a new name and simulation seed, the same skills, ``description`` (default: the replaced
    worker's), moved to the last id (the workers after it move up one). Returns the pool and the
    newcomer's id."""
    known = {d for w in pool.workers if w.simulation for d in w.simulation.skills}
    if domain not in known:
        raise SystemExit(f"--new-worker: unknown domain {domain!r}; one of {sorted(known)}")
    best = max(range(len(pool.workers)), key=lambda i: skill(pool, i, domain))
    old = pool.workers[best]
    assert old.simulation is not None
    newcomer = old.model_copy(
        update={
            "name": "sim-newcomer",
            "model": "sim-newcomer",
            "description": old.description if description is None else description,
            "simulation": old.simulation.model_copy(update={"seed": old.simulation.seed + 1000}),
        }
    )
    workers = [w for i, w in enumerate(pool.workers) if i != best] + [newcomer]
    return pool.model_copy(update={"workers": workers}), len(workers) - 1


def newcomer_share(results: Sequence[SubsetResult], newcomer: int, domain: str) -> str:
    """Over the subsets offering the newcomer: the share of ``domain``'s plans it answered, and
    the share of the other domains' plans it answered (low when routing reads the description,
    not a position or an id)."""
    lines = ["", f"answered by the newcomer (pool id {newcomer}) where offered: {domain} | others"]
    mine, others = [], []
    for r in results:
        if newcomer not in r.subset:
            continue
        own = r.routed.get(domain, Counter())
        rest: Counter = Counter()
        for d, counts in r.routed.items():
            if d != domain:
                rest.update(counts)
        if sum(own.values()) and sum(rest.values()):
            mine.append(own[newcomer] / sum(own.values()))
            others.append(rest[newcomer] / sum(rest.values()))
            lines.append(
                f"  offered {', '.join(map(str, r.subset))}: {mine[-1]:.3f} | {others[-1]:.3f}"
            )
    if mine:
        lines.append(
            f"mean over {len(mine)} subsets: {sum(mine) / len(mine):.3f} of {domain} | "
            f"{sum(others) / len(others):.3f} of the others"
        )
    return "\n".join(lines)


def render(results: Sequence[SubsetResult], pool: PoolConfig) -> str:
    """The per-subset table (Markdown) and the means over subsets (all, and per subset size)."""
    names = [w.display_name for w in pool.workers]
    lines = [
        "| offered (pool ids) | workers | judged plans | best offered | format errors | accuracy |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {', '.join(map(str, r.subset))} | {', '.join(names[i] for i in r.subset)} "
            f"| {r.judged} | {r.share:.3f} | {r.format_errors / max(1, r.plans):.3f} "
            f"| {r.correct / max(1, r.plans):.3f} |"
        )
    scored = [r for r in results if r.judged]
    lines.append("")
    for k in sorted({len(r.subset) for r in scored}):
        shares = [r.share for r in scored if len(r.subset) == k]
        lines.append(f"mean over the {len(shares)} subsets of {k}: {sum(shares) / len(shares):.3f}")
    if scored:
        mean = sum(r.share for r in scored) / len(scored)
        lines.append(f"mean best-offered share over {len(scored)} subsets: {mean:.3f}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="trained Conductor folder (default: --train)")
    parser.add_argument("--train", metavar="OUT", help="train base + adaptive into OUT first")
    parser.add_argument("--base-steps", type=int, default=130)
    parser.add_argument(
        "--adaptive-steps",
        type=int,
        help="GRPO steps of the adaptive stage (80; descriptor mode: the profile's 160)",
    )
    parser.add_argument("--pool", help="simulated pool YAML (default: the tiny profile's)")
    parser.add_argument("--held-out", type=int, default=60, help="held-out questions (0: all)")
    parser.add_argument("--plans", type=int, default=1, help="plans per question and subset")
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 3])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--plan-grammar",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="decode under the plan grammar (deployment's default: only offered ids can be named)",
    )
    parser.add_argument("--descriptors", action="store_true", help="show each worker's description")
    parser.add_argument(
        "--new-worker",
        metavar="DOMAIN",
        help="replace DOMAIN's best worker by a newcomer at a new id and report its share",
    )
    parser.add_argument("--new-description", help="the newcomer's description (default: the same)")
    args = parser.parse_args(argv)
    from experiment import (
        held_out_problems,
        learning_config,
        train_base_and_adaptive,
        train_descriptor_mode,
    )

    extra = {"data": {"pool": args.pool}} if args.pool else None
    if args.model:
        model_dir = Path(args.model)
    else:
        out = Path(args.train or tempfile.mkdtemp(prefix="bench-adaptive-train-"))
        if extra:
            raise SystemExit("--pool with --train: train on it with conductor train instead")
        if args.descriptors:
            print(f"training descriptor mode's adaptive stage into {out}", file=sys.stderr)
            model_dir = train_descriptor_mode(out, steps=args.adaptive_steps, seed=args.seed)
        else:
            print(f"training the tiny base and adaptive stages into {out}", file=sys.stderr)
            model_dir = train_base_and_adaptive(
                out,
                base_steps=args.base_steps,
                adaptive_steps=args.adaptive_steps or 80,
                seed=args.seed,
            )
    with tempfile.TemporaryDirectory(prefix="bench-adaptive-config-") as tmp:
        config = learning_config(tmp, stage="adaptive", seed=args.seed, extra=extra)
        problems, pool = held_out_problems(config)
    if args.held_out:
        problems = problems[:: max(1, len(problems) // args.held_out)][: args.held_out]
    newcomer = None
    if args.new_worker:
        pool, newcomer = with_new_worker(pool, args.new_worker, args.new_description)
    start = time.perf_counter()
    results = measure(
        model_dir,
        problems,
        pool,
        config,
        sizes=args.sizes,
        plans=args.plans,
        temperature=args.temperature,
        seed=args.seed,
        plan_grammar=args.plan_grammar,
        descriptors=args.descriptors,
    )
    print(
        f"{model_dir}: {len(problems)} held-out questions x {args.plans} plan(s), "
        f"temperature {args.temperature}, {'under' if args.plan_grammar else 'without'} the "
        f"plan grammar, {time.perf_counter() - start:.0f} s"
    )
    print(render(results, pool))
    if newcomer is not None:
        print(newcomer_share(results, newcomer, args.new_worker))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
