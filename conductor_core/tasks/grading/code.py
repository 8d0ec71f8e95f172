"""Code grading through the sandbox (never any other way).

The program is the answer's last fenced ``python`` block (then any fenced block, then the raw
text when it looks like code). ``problem.tests`` takes one of these shapes:

- ``{"kind": "functional", "entry_point", "test_code", "prompt"?}`` (HumanEval): program, then
  ``test_code``, then ``check(entry_point)``.
- ``{"kind": "unittest", "test_code", "entry_point"?, "prompt"?}`` (BigCodeBench): the
  ``unittest.TestCase`` classes of ``test_code`` run against the program; all must pass.
- ``{"kind": "stdio", "cases": [{"input", "output"}]}`` (LiveCodeBench stdin/stdout): each case
  runs the program with that stdin; stdout is compared line by line after stripping whitespace,
  lines that differ may still match as decimal numbers (LiveCodeBench's rule).
- ``{"kind": "call", "func_name", "cases": [{"input", "output"}]}`` (LiveCodeBench functional):
  ``Solution().<func_name>(*args)`` (or a top-level function) with the JSON-decoded lines of
  ``input`` as arguments; a tuple result counts as a list; equality with the JSON ``output``.

When ``prompt`` is given (the code prompt that ends in an open ``def``) the program is
"calibrated" as BigCodeBench does: a program that defines the entry point itself runs after a
stub of the prompt (so the prompt's imports and helpers exist); a bare function body is appended
to the prompt (HumanEval's completion convention).

One sandbox run per problem: a driver (``_driver.py``) runs the program in a process of its own,
compares its results with the expected ones, stops at the first failure and reports through a
nonce-tagged line. The tests (expected outputs included) and the nonce reach the driver on its
stdin, never as files, and the program's results come back as data, so the program can neither
read the answers nor forge the report nor pass with an object that equals everything (the
``unittest`` kind excepted: see docs/sandbox.md, "Grading"). ``timeout_s`` is per case for
``stdio`` and ``call`` and for the whole test program otherwise.
"""

from __future__ import annotations

import functools
import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor_core.tasks.answers import extract_code
from conductor_core.tasks.grading.verdict import Verdict
from conductor_core.tasks.problem import Problem
from conductor_core.tasks.sandbox import SandboxLimits, arun_python, run_python

_DRIVER = Path(__file__).with_name("_driver.py")
_KINDS = ("functional", "unittest", "stdio", "call")
_MB = 1 << 20


class CodeTestsError(ValueError):
    """``problem.tests`` does not have one of the accepted shapes."""


@dataclass
class PreparedRun:
    """Everything one sandbox run needs (built on the host, no code executed)."""

    code: str
    stdin: str
    files: dict[str, str]
    limits: Any  # SandboxLimits (imported lazily)
    nonce: str
    program: str
    kind: str


def check_tests(tests: dict[str, Any]) -> str:
    """Validate the shape of ``tests``; return its kind or raise CodeTestsError naming the field."""
    kind = tests.get("kind")
    if kind not in _KINDS:
        raise CodeTestsError(f"tests.kind must be one of {', '.join(_KINDS)}; got {kind!r}")
    need = {
        "functional": ("entry_point", "test_code"),
        "unittest": ("test_code",),
        "stdio": ("cases",),
        "call": ("func_name", "cases"),
    }[kind]
    for key in need:
        if not tests.get(key) and tests.get(key) != []:
            raise CodeTestsError(f"tests.{key} is required for kind '{kind}'")
    if kind in ("stdio", "call"):
        cases = tests["cases"]
        if not isinstance(cases, list) or not cases:
            raise CodeTestsError(f"tests.cases must be a non-empty list for kind '{kind}'")
        for i, c in enumerate(cases):
            if not isinstance(c, dict) or "input" not in c or "output" not in c:
                raise CodeTestsError(f"tests.cases[{i}] must have 'input' and 'output'")
    return kind


def _defines(program: str, name: str) -> bool:
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", program, re.M) is not None


def _compiles(source: str) -> bool:
    try:
        compile(source, "<prompt>", "exec")  # compile only: nothing is executed
    except (SyntaxError, ValueError):
        return False
    return True


@functools.lru_cache(maxsize=1024)  # every answer to a problem grades against its one prompt
def prompt_stub(prompt: str | None) -> str | None:
    """The code prompt with ``pass`` as the open function's body, when that compiles: its
    imports and helpers (e.g. HumanEval's ``poly``), which the program and the tests may use."""
    if not prompt:
        return None
    stub = prompt.rstrip("\n") + "\n    pass\n"
    return stub if _compiles(stub) else None


@functools.cache
def _driver_source() -> str:
    """The grading driver's source, read once per process."""
    return _DRIVER.read_text(encoding="utf-8")


def calibrate(program: str, prompt: str | None, entry_point: str | None) -> str:
    """Combine the answer's program with the problem's code prompt (see the module doc)."""
    if not prompt:
        return program
    if entry_point and not _defines(program, entry_point):
        return prompt + program
    stub = prompt_stub(prompt)
    return program if stub is None else stub + "\n\n" + program


def prepare(
    problem: Problem, answer: str | None, *, timeout_s: float = 10
) -> PreparedRun | Verdict:
    """Build the sandbox run for grading ``answer``; a Verdict when there is nothing to run."""
    kind = check_tests(problem.tests)
    program = extract_code(answer or "")
    if program is None or not program.strip():
        return Verdict(False, "no code found in the answer", None)
    tests = problem.tests
    if kind in ("functional", "unittest"):
        program = calibrate(program, tests.get("prompt"), tests.get("entry_point"))
    # The tests travel on the driver's stdin after the nonce, never as files of the run: the
    # program's process could read a file, not the driver's memory.
    spec: dict[str, Any] = {"kind": kind, "timeout_s": float(timeout_s)}
    n_runs = 1
    if kind in ("functional", "unittest"):
        spec["test_code"] = tests["test_code"]
        spec["entry_point"] = tests.get("entry_point")
        if kind == "functional":  # the tests run in the driver, beside the prompt's helpers
            spec["prelude"] = prompt_stub(tests.get("prompt"))
    else:
        spec["func_name"] = tests.get("func_name")
        spec["cases"] = []
        for case in tests["cases"]:
            out = case["output"]
            text = out if isinstance(out, str) else json.dumps(out)
            spec["cases"].append({"input": str(case["input"]), "output": text})
        n_runs = len(spec["cases"])
    nonce = secrets.token_hex(16)
    stdin = f"{nonce}\n{json.dumps(spec)}\n"
    size_mb = (len(program) + len(stdin)) / _MB
    total = min(float(timeout_s) * n_runs + n_runs * 0.5, 900.0)
    limits = SandboxLimits(
        cpu_s=total + 5,
        wall_s=total + 10,
        memory_mb=max(1024, int(512 + 8 * size_mb)),
        file_size_mb=max(16, int(size_mb) + 8),
    )
    return PreparedRun(
        code=_driver_source(),
        stdin=stdin,
        files={"solution.py": program},
        limits=limits,
        nonce=nonce,
        program=program,
        kind=kind,
    )


def interpret(run: PreparedRun, result: Any) -> Verdict:
    """Turn a SandboxResult of a prepared run into a Verdict."""
    details: dict[str, Any] = {
        "kind": run.kind,
        "sandbox_status": result.status,
        "wall_s": result.wall_s,
        "isolation": list(result.isolation),
    }
    if result.status == "sandbox_error":
        return Verdict(
            False, f"sandbox failure: {result.reason}", run.program, details, infra_error=True
        )
    report = None
    prefix = run.nonce + " "
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(prefix):
            try:
                report = json.loads(line[len(prefix) :])
            except json.JSONDecodeError:
                report = None
            break
    if report is not None:
        details.update({k: v for k, v in report.items() if k not in ("passed", "reason")})
        return Verdict(bool(report.get("passed")), str(report.get("reason")), run.program, details)
    stderr_tail = [ln for ln in result.stderr.strip().splitlines() if ln.strip()][-1:]
    why = {
        "timeout": "timeout: the run exceeded its time limit",
        "memory": "memory limit exceeded",
        "output_limit": "output limit exceeded",
        "killed": f"killed: {result.reason}",
    }.get(result.status)
    if why is None:
        why = "the program stopped the test driver"
        if stderr_tail:
            why += f": {stderr_tail[0][:200]}"
    return Verdict(False, why, run.program, details)


def grade_code(problem: Problem, answer: str | None, *, timeout_s: float = 10) -> Verdict:
    """Grade a code answer in the sandbox (blocking)."""
    run = prepare(problem, answer, timeout_s=timeout_s)
    if isinstance(run, Verdict):
        return run
    result = run_python(run.code, stdin=run.stdin, limits=run.limits, files=run.files)
    return interpret(run, result)


async def agrade_code(problem: Problem, answer: str | None, *, timeout_s: float = 10) -> Verdict:
    """Grade a code answer in the sandbox without blocking the event loop."""
    run = prepare(problem, answer, timeout_s=timeout_s)
    if isinstance(run, Verdict):
        return run
    result = await arun_python(run.code, stdin=run.stdin, limits=run.limits, files=run.files)
    return interpret(run, result)
