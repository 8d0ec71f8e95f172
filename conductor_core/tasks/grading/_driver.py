"""The test driver that runs INSIDE the sandbox (as ``main.py``); it is never run on the host.

Inputs (in the sandbox working directory): ``solution.py`` (the program), ``spec.json``
(``kind``, ``timeout_s``, ``entry_point``/``func_name``, ``test_code``, ``n_cases``) and, for
``stdio``/``call``, ``cases/<i>.in`` and ``cases/<i>.out``. The first stdin line is a nonce; the
report is one line ``<nonce> <json>`` written to the original stdout, whose descriptor is saved
before the program runs and whose normal ``sys.stdout`` is diverted to a file, so the program's
own output cannot forge a report and ``sys.exit`` in the program cannot fake a pass.

The comparison helpers (:func:`stdio_equal`, :func:`call_equal`) follow LiveCodeBench's rules and
are imported by the host-side tests as well.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import traceback
from decimal import Decimal, InvalidOperation
from typing import Any

IMPORT_HEADER = """\
from typing import *
from collections import *
from itertools import *
from functools import *
from heapq import *
from bisect import *
from math import *
from string import *
from operator import *
import collections, itertools, functools, heapq, bisect, math, string, operator
import re, sys, json, random, copy
sys.setrecursionlimit(50000)
"""


class CaseTimeout(BaseException):
    """Raised by the alarm inside a test case (BaseException: `except Exception` won't eat it)."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise CaseTimeout()


def _arm(seconds: float) -> None:
    signal.setitimer(signal.ITIMER_REAL, max(0.001, seconds))


def _disarm() -> None:
    signal.setitimer(signal.ITIMER_REAL, 0)


def _short(value: Any, n: int = 200) -> str:
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def _stripped_lines(text: str) -> list[str]:
    return [line.strip() for line in text.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(tok) for tok in line.split()]
    except (InvalidOperation, ValueError):
        return None


def stdio_equal(got: str, expected: str) -> tuple[bool, str]:
    """LiveCodeBench's stdout rule: whitespace-stripped lines equal, or equal as decimals."""
    got_lines, exp_lines = _stripped_lines(got), _stripped_lines(expected)
    if len(got_lines) != len(exp_lines):
        return False, f"expected {len(exp_lines)} output line(s), got {len(got_lines)}"
    for i, (g, e) in enumerate(zip(got_lines, exp_lines, strict=True)):
        if g == e:
            continue
        dg, de = _decimals(g), _decimals(e)
        if dg is None or de is None or dg != de:
            return False, f"line {i + 1}: got {_short(g, 80)!r}, expected {_short(e, 80)!r}"
    return True, ""


def call_equal(got: Any, expected: Any) -> bool:
    """LiveCodeBench's call rule: a tuple result counts as a list, then plain equality."""
    if isinstance(got, tuple):
        got = list(got)
    return got == expected


def _error_line(exc: BaseException, test_source: str | None = None) -> str:
    msg = f"{type(exc).__name__}: {_short(str(exc), 160)}".rstrip(": ")
    if test_source is not None:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "tests.py"]
        if frames and frames[-1].lineno:
            lines = test_source.splitlines()
            if 0 < frames[-1].lineno <= len(lines):
                msg += f" at `{_short(lines[frames[-1].lineno - 1].strip(), 120)}`"
    return msg


def _join_threads(deadline_s: float) -> None:
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join(deadline_s)


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def _run_functional(code: Any, spec: dict[str, Any]) -> dict[str, Any]:
    test_source = spec["test_code"]
    ns: dict[str, Any] = {"__name__": "solution"}
    _arm(spec["timeout_s"])
    try:
        exec(code, ns)
        exec(compile(test_source, "tests.py", "exec"), ns)
        if spec["entry_point"] not in ns:
            return {"passed": False, "reason": f"the program defines no '{spec['entry_point']}'"}
        ns["check"](ns[spec["entry_point"]])
    except CaseTimeout:
        return {"passed": False, "reason": f"timeout after {spec['timeout_s']:g}s"}
    except SystemExit:
        return {"passed": False, "reason": "the program called exit() before the tests finished"}
    except BaseException as exc:
        return {"passed": False, "reason": _error_line(exc, test_source)}
    finally:
        _disarm()
    return {"passed": True, "reason": "all tests passed"}


def _run_unittest(code: Any, spec: dict[str, Any]) -> dict[str, Any]:
    import types
    import unittest

    module = types.ModuleType("solution")
    sys.modules["solution"] = module
    _arm(spec["timeout_s"])
    try:
        exec(code, module.__dict__)
        exec(compile(spec["test_code"], "tests.py", "exec"), module.__dict__)
        suite = unittest.defaultTestLoader.loadTestsFromModule(module)
        result = unittest.TestResult()
        suite.run(result)
    except CaseTimeout:
        return {"passed": False, "reason": f"timeout after {spec['timeout_s']:g}s"}
    except SystemExit:
        return {"passed": False, "reason": "the program called exit() before the tests finished"}
    except BaseException as exc:
        return {"passed": False, "reason": _error_line(exc)}
    finally:
        _disarm()
    problems = [("failed", t, tb) for t, tb in result.failures]
    problems += [("error", t, tb) for t, tb in result.errors]
    if result.testsRun == 0:
        return {"passed": False, "reason": "no tests ran"}
    if problems:
        what, test, tb = problems[0]
        last = [ln for ln in tb.strip().splitlines() if ln.strip()][-1]
        return {
            "passed": False,
            "reason": f"{test.id().split('.', 1)[-1]} {what}: {_short(last, 200)}",
            "n_failed": len(problems),
            "n_tests": result.testsRun,
        }
    return {"passed": True, "reason": f"all {result.testsRun} tests passed"}


def _run_call(code: Any, spec: dict[str, Any]) -> dict[str, Any]:
    ns: dict[str, Any] = {"__name__": "solution"}
    exec(IMPORT_HEADER, ns)
    try:
        _arm(spec["timeout_s"])
        exec(code, ns)
    except CaseTimeout:
        return {"passed": False, "reason": "timeout while loading the program"}
    except BaseException as exc:
        return {"passed": False, "reason": f"error while loading the program: {_error_line(exc)}"}
    finally:
        _disarm()
    name = spec["func_name"]
    if "Solution" in ns and hasattr(ns["Solution"], name):
        target = getattr(ns["Solution"](), name)
    elif callable(ns.get(name)):
        target = ns[name]
    else:
        return {"passed": False, "reason": f"the program defines no Solution.{name} or {name}"}
    for i in range(spec["n_cases"]):
        raw_in = _read(f"cases/{i}.in").rstrip("\n")
        args = [json.loads(line) for line in raw_in.split("\n")] if raw_in else []
        expected = json.loads(_read(f"cases/{i}.out"))
        try:
            _arm(spec["timeout_s"])
            got = target(*args)
        except CaseTimeout:
            return {"passed": False, "reason": f"case {i}: timeout after {spec['timeout_s']:g}s"}
        except BaseException as exc:
            return {"passed": False, "reason": f"case {i}: runtime error {_error_line(exc)}"}
        finally:
            _disarm()
        if not call_equal(got, expected):
            return {
                "passed": False,
                "reason": f"case {i}: wrong answer: got {_short(got)}, expected {_short(expected)}",
            }
    return {"passed": True, "reason": f"all {spec['n_cases']} cases passed"}


def _redirect(fd: int, target: int) -> None:
    """Make ``target`` refer to ``fd``'s file (the program may have closed ``target``)."""
    if fd != target:
        os.dup2(fd, target)
        os.close(fd)


def _run_stdio(code: Any, spec: dict[str, Any]) -> dict[str, Any]:
    header = compile(IMPORT_HEADER, "header.py", "exec")
    for i in range(spec["n_cases"]):
        _redirect(os.open(f"cases/{i}.in", os.O_RDONLY), 0)
        _redirect(os.open("_stdout.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        ns: dict[str, Any] = {"__name__": "__main__"}
        failure = None
        try:
            _arm(spec["timeout_s"])
            exec(header, ns)
            with contextlib.suppress(SystemExit):
                exec(code, ns)
            _join_threads(spec["timeout_s"])
        except CaseTimeout:
            failure = f"case {i}: timeout after {spec['timeout_s']:g}s"
        except BaseException as exc:
            failure = f"case {i}: runtime error {_error_line(exc)}"
        finally:
            _disarm()
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()
        if failure:
            return {"passed": False, "reason": failure}
        ok, why = stdio_equal(_read("_stdout.txt"), _read(f"cases/{i}.out"))
        if not ok:
            return {"passed": False, "reason": f"case {i}: wrong answer: {why}"}
    return {"passed": True, "reason": f"all {spec['n_cases']} cases passed"}


_KINDS = {
    "functional": _run_functional,
    "unittest": _run_unittest,
    "call": _run_call,
    "stdio": _run_stdio,
}


def main() -> None:
    """Run the tests named in spec.json against solution.py and report on the saved stdout."""
    nonce = sys.stdin.readline().strip()
    report_fd = os.dup(1)
    signal.signal(signal.SIGALRM, _on_alarm)
    spec = json.loads(_read("spec.json"))
    sink = os.open("_program_stdout.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(sink, 1)
    os.close(sink)
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    try:
        code = compile(_read("solution.py"), "solution.py", "exec")
    except (SyntaxError, ValueError) as exc:
        report = {"passed": False, "reason": f"the program does not compile: {_error_line(exc)}"}
    else:
        try:
            report = _KINDS[spec["kind"]](code, spec)
        except BaseException as exc:
            report = {"passed": False, "reason": f"test driver stopped: {_error_line(exc)}"}
    os.write(report_fd, f"\n{nonce} {json.dumps(report)}\n".encode())
    os._exit(0)  # skip atexit handlers and lingering threads of the program


if __name__ == "__main__":
    main()
