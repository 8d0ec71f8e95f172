"""How far above the hand-written workflows any plan can get in the workflow world, and how long
the best plans are on easy and hard questions: the room issue 46 §3's goals need.

    .venv/bin/python bench/bench_workflow_ceiling.py [--persistence RHO] [--split validation] \\
        [--questions 120] [--draws 300]

For each question of the split (the first ``--questions``) it scores, by ``--draws`` simulated
runs each (:func:`conductor_core.simulation.workflow_eval.plan_success`), every hand-written
topology and two plans beyond them: ``parts-check-each`` (each part to its specialist, the
checker checks each part, then reads the checks and answers; a one-part question is
``solve-check``) and ``parts-check-each-twice`` (each part checked by the checker, then by the
part's second-best worker). It prints the mean success and steps of each plan per class of
question (difficulty, one part or composite), the best plan of each class, and two policies
built from those: ``best per class`` (the most accurate plan of each class: a ceiling for a
Conductor that reads difficulty and shape) and ``fewest calls within 1 point`` (the shortest
plan within a point of the class's best), with their accuracy, calls, and the ratio of mean
steps on the hardest third to the easiest (difficulty 3 against 1). ``--persistence`` sets every
worker's ``error_persistence`` (default: the bundled pool's).
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_workflows import MAX_STEPS, persistent_pool, share  # noqa: E402
from conductor_core.simulation.workflow_baselines import (  # noqa: E402
    CHECK,
    SOLVE,
    TOPOLOGIES,
    Roles,
    part_domains,
    topology_workflow,
)
from conductor_core.workers.bundled import (  # noqa: E402
    bundled_workflow_pool_path,
    bundled_workflow_problems_path,
)
from conductor_core.workflow.model import ALL, Step, Workflow  # noqa: E402

EXTRA = ("parts-check-each", "parts-check-each-twice")


def extra_plan(name: str, question: str, roles: Roles, second: dict[str, int]) -> Workflow | None:
    """A plan beyond the topologies (the module doc), or None when it needs more than
    :data:`MAX_STEPS` steps."""
    domains = part_domains(question)
    if len(domains) == 1:
        steps = [Step(worker=roles.specialists[domains[0]], subtask=SOLVE)]
        steps.append(Step(worker=roles.checker, subtask=CHECK, access=(0,)))
        if name == "parts-check-each-twice":
            steps.append(Step(worker=second[domains[0]], subtask=CHECK, access=(1,)))
        return Workflow(steps=tuple(steps))
    steps = [
        Step(worker=roles.specialists[d], subtask=f"Solve part {k + 1}.")
        for k, d in enumerate(domains)
    ]
    last = list(range(len(domains)))
    for rounds, checker in enumerate((lambda d: roles.checker, lambda d: second[d])):
        if rounds and name != "parts-check-each-twice":
            break
        checks = []
        for k, d in enumerate(domains):
            checks.append(len(steps))
            steps.append(Step(worker=checker(d), subtask=f"Check part {k + 1}.", access=(last[k],)))
        last = checks
    steps.append(Step(worker=roles.checker, subtask=SOLVE, access=ALL))
    return Workflow(steps=tuple(steps)) if len(steps) <= MAX_STEPS else None


def main(argv: list[str] | None = None) -> int:
    """Print the table; returns 0."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument(
        "--persistence",
        type=share,
        default=None,
        help="Every worker's simulation.workflow.error_persistence (default: the pool's).",
    )
    ap.add_argument("--split", default="validation", choices=("train", "validation", "test"))
    ap.add_argument("--questions", type=int, default=120, help="The split's first N questions.")
    ap.add_argument("--draws", type=int, default=300, help="Simulated runs per plan and question.")
    args = ap.parse_args(argv)

    from conductor_core.simulation.workflow_eval import plan_success
    from conductor_core.simulation.workflow_world import world_question
    from conductor_core.tasks.problem import read_problems
    from conductor_core.workers.config import load_pool, parse_pool

    if args.persistence is None:
        pool = load_pool(bundled_workflow_pool_path())
    else:
        pool = parse_pool(persistent_pool(args.persistence))
    profiles = [w.simulation for w in pool.workers]
    roles = Roles()
    # each domain's second-best worker other than the checker (a different specialist)
    second = {}
    for domain, best in roles.specialists.items():
        others = [i for i in range(roles.workers) if i not in (best, roles.checker)]
        second[domain] = max(others, key=lambda i: profiles[i].skills.get(domain, 0.0))
    problems = [
        p
        for p in read_problems(bundled_workflow_problems_path())
        if p.metadata["split"] == args.split
    ][: args.questions]

    names = [*TOPOLOGIES, *EXTRA]
    # class -> plan -> [(success, steps)] per question
    table: dict[tuple[int, bool], dict[str, list[tuple[float, int]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for done, p in enumerate(problems, 1):
        question = world_question(p.metadata)
        cls = (question.difficulty, question.composite)
        for seed, name in enumerate(names):
            if name in TOPOLOGIES:
                plan = topology_workflow(name, p.question, roles)
            else:
                plan = extra_plan(name, p.question, roles, second)
            if plan is None:
                continue
            ok = plan_success(question, plan, profiles, draws=args.draws, seed=seed)
            table[cls][name].append((ok, len(plan.steps)))
        if done % 20 == 0 or done == len(problems):
            print(f"scored {done}/{len(problems)} questions", file=sys.stderr, flush=True)

    def mean(rows: list[tuple[float, int]], i: int) -> float:
        return sum(r[i] for r in rows) / len(rows)

    classes = sorted(table)
    print(f"error_persistence: {args.persistence}; {len(problems)} {args.split} questions")
    print(
        "| plan | "
        + " | ".join(f"h{h} {'composite' if c else 'one part'}" for h, c in classes)
        + " | all |"
    )
    print("|---" * (len(classes) + 2) + "|")
    for name in names:
        cells, rows = [], []
        for cls in classes:
            got = table[cls].get(name, [])
            rows += got
            cells.append(f"{mean(got, 0):.3f} ({mean(got, 1):.1f})" if got else "-")
        overall = f"{mean(rows, 0):.3f}" if len(rows) == len(problems) else "-"
        print(f"| {name} | " + " | ".join(cells) + f" | {overall} |")

    def policy(pick) -> tuple[float, float, float]:
        right = calls = 0.0
        steps_by_h: dict[int, list[int]] = defaultdict(list)
        for cls in classes:
            name = pick(table[cls])
            rows = table[cls][name]
            right += sum(r[0] for r in rows)
            calls += sum(r[1] for r in rows)
            steps_by_h[cls[0]] += [r[1] for r in rows]
        n = len(problems)
        h = sorted(steps_by_h)
        ratio = (sum(steps_by_h[h[-1]]) / len(steps_by_h[h[-1]])) / (
            sum(steps_by_h[h[0]]) / len(steps_by_h[h[0]])
        )
        return right / n, calls / n, ratio

    def whole(plans: dict) -> list[str]:
        """The plans written for every question of a class (a plan over six steps is not)."""
        return [k for k in plans if len(plans[k]) == len(plans[names[0]])]

    def best(plans: dict) -> str:
        return max(whole(plans), key=lambda k: mean(plans[k], 0))

    def frugal(plans: dict) -> str:
        top = mean(plans[best(plans)], 0)
        near = [k for k in whole(plans) if mean(plans[k], 0) >= top - 0.01]
        return min(near, key=lambda k: mean(plans[k], 1))

    for label, pick in (("best per class", best), ("fewest calls within 1 point", frugal)):
        acc, calls, ratio = policy(pick)
        chosen = ", ".join(f"h{h}{'c' if c else ''}:{pick(table[(h, c)])}" for h, c in classes)
        print(
            f"{label}: accuracy {acc:.3f}, calls {calls:.2f}, steps hard/easy {ratio:.2f} "
            f"({chosen})"
        )
    fixed = max(TOPOLOGIES, key=lambda k: sum(sum(r[0] for r in table[c][k]) for c in classes))
    acc = sum(sum(r[0] for r in table[c][fixed]) for c in classes) / len(problems)
    print(f"best fixed topology: {fixed}, accuracy {acc:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
