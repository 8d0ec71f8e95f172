"""Code grading through the sandbox: HumanEval, BigCodeBench-style unittest, LiveCodeBench
(grading without running code: tests/unit/test_grading_code.py)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from conductor_core.tasks.grading import agrade, grade
from conductor_core.tasks.problem import Problem
from conductor_core.tasks.sources import load_benchmark

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks"


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def humaneval() -> dict[str, Problem]:
    return {p.id: p for p in load_benchmark("humaneval")}


@pytest.fixture(scope="module")
def lcb() -> dict[str, Problem]:
    ps = load_benchmark("livecodebench", path=str(FIX / "livecodebench.jsonl"))
    return {p.id.split("/")[1]: p for p in ps}


# ---------------------------------------------------------------- HumanEval in the sandbox


@pytest.mark.parametrize("task", ["HumanEval/0", "HumanEval/10", "HumanEval/32", "HumanEval/53"])
def test_humaneval_canonical_passes_and_broken_fails(
    humaneval: dict[str, Problem], task: str
) -> None:
    p = humaneval[task]
    ok = grade(p, fenced(p.reference))
    assert ok.correct, ok.reason
    assert ok.details["sandbox_status"] == "ok"
    broken = p.tests["prompt"] + "    return None\n"
    bad = grade(p, fenced(broken))
    assert not bad.correct
    assert bad.reason


def test_humaneval_body_only_completion_and_missing_imports(
    humaneval: dict[str, Problem],
) -> None:
    p = humaneval["HumanEval/0"]
    body = p.reference[len(p.tests["prompt"]) :]
    assert grade(p, fenced(body)).correct  # body appended to the prompt
    # a full function without `from typing import List` still runs (prompt stub first)
    fn = p.reference.split("\n\n\n", 1)[1]
    assert "from typing" not in fn
    assert grade(p, fenced(fn)).correct


def test_exit_early_and_forged_output_do_not_pass(humaneval: dict[str, Problem]) -> None:
    p = humaneval["HumanEval/0"]
    early = "import sys\nsys.exit(0)\n"
    v = grade(p, fenced(early))
    assert not v.correct and "exit" in v.reason
    forged = "import os\nos.write(1, b'{\"passed\": true}\\n')\nos._exit(0)\n"
    v = grade(p, fenced(forged))
    assert not v.correct and "ended before its result was reported" in v.reason


def test_infinite_loop_times_out(humaneval: dict[str, Problem]) -> None:
    p = humaneval["HumanEval/0"]
    loop = "def has_close_elements(numbers, threshold):\n    while True:\n        pass\n"
    v = grade(p, fenced(loop), timeout_s=1)
    assert not v.correct and "timeout" in v.reason


def test_timeout_is_the_drivers_an_ignored_alarm_changes_nothing(lcb: dict[str, Problem]) -> None:
    deaf = "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass\n"
    v = grade(lcb["abc300_a"], fenced(deaf), timeout_s=1)
    assert not v.correct and v.reason == "case 0: timeout after 1s"
    assert v.details["wall_s"] < 4  # not the sandbox's wall clock (3 cases x 1 s + 11.5 s)


def test_driver_makes_itself_undumpable() -> None:
    """What keeps the program process (same uid) out of the driver's memory and descriptors
    where no uid drop already did (a grader that is not root): PR_GET_DUMPABLE before, after."""
    probe = (
        "import ctypes\n"
        "from conductor_core.tasks.grading._driver import _make_undumpable\n"
        "get = lambda: ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)\n"
        "before = get()\n"
        "_make_undumpable()\n"
        "print(before, get())\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["1", "0"], out.stderr


def test_syntax_error_and_no_code(humaneval: dict[str, Problem]) -> None:
    p = humaneval["HumanEval/0"]
    v = grade(p, fenced("def has_close_elements(:\n"))
    assert not v.correct and "does not compile" in v.reason
    v = grade(p, "I think you should sort the list.")
    assert not v.correct and v.reason == "no code found in the answer"


# ---------------------------------------------------------------- BigCodeBench unittest


def test_bigcodebench_unittest() -> None:
    ps = load_benchmark("bigcodebench", path=str(FIX / "bigcodebench.jsonl"))
    sort_p, count_p = ps
    assert grade(sort_p, fenced(sort_p.reference)).correct
    assert grade(count_p, fenced(count_p.reference)).correct
    # program without the prompt's `import collections`: calibrated with the prompt stub
    assert grade(
        count_p, fenced("def task_func(text):\n    return dict(collections.Counter(text.split()))")
    ).correct
    bad = grade(sort_p, fenced("def task_func(xs):\n    return xs\n"))
    assert not bad.correct and "test_basic failed" in bad.reason
    assert bad.details["n_failed"] == 1 and bad.details["n_tests"] == 2


# ---------------------------------------------------------------- LiveCodeBench


def test_lcb_stdio(lcb: dict[str, Problem]) -> None:
    p = lcb["abc300_a"]
    assert grade(p, "```python\na, b = map(int, input().split())\nprint(a + b)\n```").correct
    # reading fd 0 directly and sys.stdin.buffer work too (and across cases)
    assert grade(p, fenced("a, b = map(int, open(0).read().split())\nprint(a + b)")).correct
    assert grade(p, fenced("import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))"))
    wrong = grade(p, fenced("a, b = map(int, input().split())\nprint(a - b)"))
    assert not wrong.correct and wrong.reason.startswith("case 0: wrong answer")
    crash = grade(p, fenced("print(1 // 0)"))
    assert not crash.correct and "ZeroDivisionError" in crash.reason
    half = lcb["abc380_b"]
    assert grade(half, fenced("print(f'{int(input()) / 2:.2f}')")).correct  # 1.50 == 1.5


def test_lcb_call_based(lcb: dict[str, Problem]) -> None:
    p = lcb["1"]
    sol = (
        "class Solution:\n"
        "    def twoSum(self, nums: List[int], target: int) -> List[int]:\n"
        "        seen = {}\n"
        "        for i, x in enumerate(nums):\n"
        "            if target - x in seen:\n"
        "                return (seen[target - x], i)\n"
        "            seen[x] = i\n"
    )
    v = grade(p, fenced(sol))
    assert v.correct, v.reason
    wrong = sol.replace("return (seen[target - x], i)", "return [i, seen[target - x]]")
    v = grade(p, fenced(wrong))
    assert not v.correct and v.reason.startswith("case 0: wrong answer")
    v = grade(p, fenced("class Solution:\n    def other(self):\n        pass\n"))
    assert not v.correct and "twoSum" in v.reason


def test_agrade_runs_code_off_the_loop(lcb: dict[str, Problem]) -> None:
    p = lcb["2050A"]

    async def both() -> list:
        return await asyncio.gather(
            agrade(p, fenced("print(int(input()) * 2)")),
            agrade(p, fenced("print(int(input()) + 2)")),
        )

    good, bad = asyncio.run(both())
    assert good.correct and not bad.correct


@pytest.mark.slow
def test_all_humaneval_canonical_solutions_pass(humaneval: dict[str, Problem]) -> None:
    async def run_all() -> list:
        return await asyncio.gather(*(agrade(p, fenced(p.reference)) for p in humaneval.values()))

    verdicts = asyncio.run(run_all())
    failed = [(p, v.reason) for p, v in zip(humaneval, verdicts, strict=True) if not v.correct]
    assert failed == []
