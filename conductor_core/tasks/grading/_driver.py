"""The test driver that runs INSIDE the sandbox (as ``main.py``); it is never run on the host.

Two processes, so that the graded program can neither forge a verdict nor read the answers:

* the **driver** (this process, trusted) first makes itself non-dumpable (``PR_SET_DUMPABLE``
  0: a process of the same uid can then neither read its memory through ``/proc/<pid>/mem`` or
  ptrace nor reopen its descriptors through ``/proc/<pid>/fd``) and forks the program process.
  Only then does it read its stdin to the end: the report nonce on the first line, then one JSON
  line with the tests (``kind``, ``timeout_s``, ``entry_point``/``func_name``, ``prelude``,
  ``test_code``, ``cases``: expected outputs included). They never touch the disk. The driver
  compares, and writes the report, one line ``<nonce> <json>``, on its stdout.
* the **program process** starts with stdin and stdout on ``/dev/null`` and every other
  descriptor but its two pipes to the driver closed; its memory is the driver's before the nonce
  and the tests were read. It runs ``solution.py`` (the only file of the run) on request: one
  stdin (``stdio``), one call of the entry point (``call``, ``functional``). What it sends back
  is data only, JSON with tags for tuples, sets, dicts, bytes and complex numbers (see
  :func:`encode`), which the driver decodes to plain values before comparing: an object whose
  ``__eq__`` always says True, or an ``int``/``list`` subclass that does, reaches the driver as
  the plain value it holds.

``functional`` tests (HumanEval) run in the driver, against a stand-in for the entry point that
calls into the program process. ``unittest`` tests (BigCodeBench) patch the program's own modules
(``unittest.mock``), so they run in the program process and the driver reports what that process
says: a program can still forge that verdict (docs/sandbox.md, "Grading").

The comparison helpers (:func:`stdio_equal`, :func:`call_equal`) follow LiveCodeBench's rules and
are imported by the host-side tests as well.
"""

from __future__ import annotations

import contextlib
import json
import numbers
import operator
import os
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
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
_PR_SET_DUMPABLE = 4
_MAX_REPLY = 64 << 20  # bytes of one reply of the program process (a stdout, a return value)
_EXIT_GRACE_S = 0.2


class CaseTimeout(BaseException):
    """The program process did not answer in time (BaseException: `except Exception` in test
    code won't eat it)."""


class ProgramGone(BaseException):
    """The program process ended, or closed its pipe, before it answered."""


class ProgramExit(BaseException):
    """The program called ``exit()`` (``SystemExit``) while the tests were running."""


class ProgramError(Exception):
    """The program raised; the message is the program process's one-line description."""


# ---------------------------------------------------------------- comparison (LiveCodeBench)


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
    """LiveCodeBench's call rule: a tuple result counts as a list, then plain equality.

    The driver only ever passes plain values decoded from the program's reply (:func:`decode`),
    never an object of the program's.
    """
    if isinstance(got, tuple):
        got = list(got)
    return got == expected


# ---------------------------------------------------------------- values as data


def encode(value: Any) -> Any:
    """A JSON-ready tree of a plain value: None, bool, int, float, str and lists as themselves,
    tuples, sets, frozensets, dicts, bytes and complex numbers as one-key tagged dicts.

    Subclasses count as their base type (an ``int`` subclass is sent as the int it holds);
    numbers of other libraries (numpy) as Python numbers. Raises TypeError for anything else.
    """
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int.__int__(operator.index(value))
    if isinstance(value, numbers.Real):
        return float.__float__(float(value))
    if isinstance(value, numbers.Complex):
        z = complex(value)
        return {"complex": [z.real, z.imag]}
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, bytes | bytearray):
        return {"bytes": bytes(value).decode("latin-1")}
    if isinstance(value, list):
        return [encode(item) for item in value]
    for kind, tag in ((tuple, "tuple"), (frozenset, "frozenset"), (set, "set")):
        if isinstance(value, kind):
            return {tag: [encode(item) for item in value]}
    if isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in value.items()]}
    raise TypeError(f"a {type(value).__name__} is not plain data (cannot be compared)")


_DECODERS: dict[str, Callable[[list[Any]], Any]] = {
    "tuple": tuple,
    "set": set,
    "frozenset": frozenset,
    "dict": dict,  # from [key, value] pairs
    "complex": lambda parts: complex(*parts),
}


def decode(tree: Any) -> Any:
    """The plain value of an :func:`encode` tree (as parsed by ``json.loads``).

    Only builtin types come out, whatever the sender was; raises ValueError or TypeError for a
    tree :func:`encode` cannot produce.
    """
    if tree is None or isinstance(tree, bool | int | float | str):
        return tree
    if isinstance(tree, list):
        return [decode(item) for item in tree]
    if isinstance(tree, dict) and len(tree) == 1:
        ((tag, body),) = tree.items()
        if tag == "bytes" and isinstance(body, str):
            return body.encode("latin-1")
        if tag in _DECODERS and isinstance(body, list):
            return _DECODERS[tag](decode(body))
    raise ValueError(f"not an encoded value: {_short(tree, 80)}")


# ---------------------------------------------------------------- the program process


def _error_line(exc: BaseException, test_source: str | None = None) -> str:
    if isinstance(exc, ProgramError):  # already "Type: message" from the program process
        msg = str(exc)
    else:
        msg = f"{type(exc).__name__}: {_short(str(exc), 160)}".rstrip(": ")
    if test_source is not None:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "tests.py"]
        if frames and frames[-1].lineno:
            lines = test_source.splitlines()
            if 0 < frames[-1].lineno <= len(lines):
                msg += f" at `{_short(lines[frames[-1].lineno - 1].strip(), 120)}`"
    return msg


def _failure(exc: BaseException) -> dict[str, Any]:
    return {"error": _error_line(exc), "exit": isinstance(exc, SystemExit)}


def _join_threads(deadline_s: float) -> None:
    for t in threading.enumerate():
        if t is not threading.main_thread() and not t.daemon:
            t.join(deadline_s)


def _read(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _redirect(fd: int, target: int) -> None:
    """Make ``target`` refer to ``fd``'s file (the program may have closed ``target``)."""
    if fd != target:
        os.dup2(fd, target)
        os.close(fd)


class _ProgramSide:
    """The program process's half: load ``solution.py``, then answer the driver's requests."""

    def __init__(self) -> None:
        self.code: Any = None
        self.header = compile(IMPORT_HEADER, "header.py", "exec")
        self.target: Any = None
        self.timeout_s = 0.0

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        """One reply (``error`` and ``exit`` when the program raised)."""
        op = request["op"]
        if op == "load":
            return self.load(request)
        if op == "call":
            return self.call(request)
        if op == "stdio":
            return self.stdio(request["input"])
        raise ValueError(f"unknown request {op!r}")

    def load(self, request: dict[str, Any]) -> dict[str, Any]:
        """Compile the program; for ``call``/``functional`` run it and find the entry point."""
        kind, name = request["kind"], request.get("name")
        self.timeout_s = float(request["timeout_s"])
        self.code = compile(_read("solution.py"), "solution.py", "exec")
        if kind == "stdio":
            return {}
        if kind == "unittest":
            return self.unittest(request["test_code"])
        ns: dict[str, Any] = {"__name__": "solution"}
        try:
            if kind == "call":
                exec(self.header, ns)
            exec(self.code, ns)
        except BaseException as exc:
            return _failure(exc)
        if kind == "call" and "Solution" in ns and hasattr(ns["Solution"], name):
            self.target = getattr(ns["Solution"](), name)
        elif callable(ns.get(name)):
            self.target = ns[name]
        else:
            return {"missing": True}
        return {}

    def call(self, request: dict[str, Any]) -> dict[str, Any]:
        """Call the entry point with the decoded arguments; reply with the encoded result."""
        args, kwargs = decode(request["args"]), decode(request["kwargs"])
        try:
            return {"value": encode(self.target(*args, **kwargs))}
        except BaseException as exc:
            return _failure(exc)

    def stdio(self, text: str) -> dict[str, Any]:
        """Run the program as ``__main__`` with ``text`` on stdin; reply with its stdout."""
        with open("_stdin.txt", "w", encoding="utf-8") as fh:
            fh.write(text)
        _redirect(os.open("_stdin.txt", os.O_RDONLY), 0)
        _redirect(os.open("_stdout.txt", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        ns: dict[str, Any] = {"__name__": "__main__"}
        try:
            exec(self.header, ns)
            with contextlib.suppress(SystemExit):
                exec(self.code, ns)
            _join_threads(self.timeout_s)
        except BaseException as exc:
            return _failure(exc)
        finally:
            with contextlib.suppress(OSError, ValueError):
                sys.stdout.flush()
        return {"stdout": _read("_stdout.txt")}

    def unittest(self, test_code: str) -> dict[str, Any]:
        """Run the ``unittest.TestCase`` classes of ``test_code`` against the program."""
        import types
        import unittest

        module = types.ModuleType("solution")
        sys.modules["solution"] = module
        try:
            exec(self.code, module.__dict__)
            exec(compile(test_code, "tests.py", "exec"), module.__dict__)
            suite = unittest.defaultTestLoader.loadTestsFromModule(module)
            result = unittest.TestResult()
            suite.run(result)
        except BaseException as exc:
            return _failure(exc)
        problems = [("failed", t, tb) for t, tb in result.failures]
        problems += [("error", t, tb) for t, tb in result.errors]
        report: dict[str, Any] = {"n_tests": result.testsRun, "n_failed": len(problems)}
        if problems:
            what, test, tb = problems[0]
            last = [ln for ln in tb.strip().splitlines() if ln.strip()][-1]
            report["first"] = f"{test.id().split('.', 1)[-1]} {what}: {_short(last, 200)}"
        return {"unittest": report}


def _serve_program(requests_fd: int, replies_fd: int) -> None:
    """The program process: its own stdio and descriptors, then one reply per request."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    low, high = sorted((requests_fd, replies_fd))
    os.closerange(3, low)
    os.closerange(low + 1, high)
    os.closerange(high + 1, 1 << 16)
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
    side = _ProgramSide()
    with os.fdopen(requests_fd, "r", encoding="utf-8") as requests:
        for line in requests:
            try:
                reply = side.handle(json.loads(line))
            except BaseException as exc:  # a bad request, or the program broke this process
                reply = {"error": f"program process: {_error_line(exc)}", "exit": False}
            try:
                data = (json.dumps(reply) + "\n").encode()
            except ValueError as exc:  # an int of more digits than str() allows
                data = (json.dumps(_failure(exc)) + "\n").encode()
            while data:
                data = data[os.write(replies_fd, data) :]


# ---------------------------------------------------------------- the driver


class _Program:
    """The driver's handle on the program process: ask, wait for the reply, stop it."""

    def __init__(self) -> None:
        requests_r, self._requests = os.pipe()
        self._replies, replies_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self._requests)
            os.close(self._replies)
            status = 1
            try:
                _serve_program(requests_r, replies_w)
                status = 0
            finally:
                os._exit(status)
        os.close(requests_r)
        os.close(replies_w)
        self._buffer = bytearray()
        self._ended: str | None = None

    def ask(self, request: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send ``request``; the reply (a dict), or raise CaseTimeout / ProgramGone."""
        data = (json.dumps(request) + "\n").encode()
        try:
            while data:
                data = data[os.write(self._requests, data) :]
        except BrokenPipeError:
            raise ProgramGone(self.stop(_EXIT_GRACE_S)) from None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._replies], [], [], left)[0]:
                self.stop()
                raise CaseTimeout()
            chunk = os.read(self._replies, 1 << 16)
            if not chunk:
                raise ProgramGone(self.stop(_EXIT_GRACE_S))
            self._buffer += chunk
            if len(self._buffer) > _MAX_REPLY:
                self.stop()
                raise ProgramGone(f"it sent more than {_MAX_REPLY >> 20} MiB at once")
        line, _, rest = self._buffer.partition(b"\n")
        self._buffer = bytearray(rest)
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):
            reply = None
        if not isinstance(reply, dict):
            text = line.decode("utf-8", "replace")
            raise ProgramGone(f"it sent something other than a reply: {_short(text, 80)}")
        return reply

    def stop(self, grace_s: float = 0.0) -> str:
        """Reap the program process, killed if it still runs after ``grace_s`` (it may be
        exiting right now: its pipe just closed); say how it ended."""
        if self._ended is None:
            deadline = time.monotonic() + grace_s
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            while pid == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid == 0:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                self._ended = "it stopped answering"
            elif os.WIFSIGNALED(status):
                self._ended = f"killed by signal {os.WTERMSIG(status)}"
            else:
                self._ended = f"exit status {os.waitstatus_to_exitcode(status)}"
        return self._ended


def _program_error(reply: dict[str, Any]) -> BaseException | None:
    """The exception a failed reply stands for (None for a successful one)."""
    if "error" not in reply:
        return None
    if reply.get("exit"):
        return ProgramExit()
    return ProgramError(str(reply["error"]))


def _ended_early(exc: ProgramGone) -> str:
    return f"the program ended before its result was reported ({exc})"


def _load(
    program: _Program, spec: dict[str, Any], name: str | None, missing: str = ""
) -> dict[str, Any] | None:
    """Load the program in its process; a failed report (``missing`` when it defines no
    ``name``; a unittest run's report), or None when it is ready for requests."""
    request = {"op": "load", "kind": spec["kind"], "name": name, "timeout_s": spec["timeout_s"]}
    if spec["kind"] == "unittest":
        request["test_code"] = spec["test_code"]
    try:
        reply = program.ask(request, spec["timeout_s"])
    except CaseTimeout:
        return {"passed": False, "reason": f"timeout after {spec['timeout_s']:g}s"}
    except ProgramGone as exc:
        return {"passed": False, "reason": _ended_early(exc)}
    error = _program_error(reply)
    if isinstance(error, ProgramExit):
        return {"passed": False, "reason": "the program called exit() before the tests finished"}
    if error is not None:
        return {"passed": False, "reason": f"error while loading the program: {error}"}
    if reply.get("missing"):
        return {"passed": False, "reason": missing}
    if "unittest" in reply:
        return _unittest_report(reply["unittest"])
    return None


def _unittest_report(raw: Any) -> dict[str, Any]:
    """The report of a unittest run, as the program process described it (trusted as is)."""
    n_tests, n_failed = (
        raw.get(k) if isinstance(raw, dict) else None for k in ("n_tests", "n_failed")
    )
    if not isinstance(n_tests, int) or not isinstance(n_failed, int):
        return {"passed": False, "reason": "the program process sent a malformed test summary"}
    if n_tests == 0:
        return {"passed": False, "reason": "no tests ran"}
    if n_failed:
        reason = str(raw.get("first", "a test failed"))
        return {"passed": False, "reason": reason, "n_failed": n_failed, "n_tests": n_tests}
    return {"passed": True, "reason": f"all {n_tests} tests passed"}


def _check_functional(program: _Program, spec: dict[str, Any]) -> dict[str, Any]:
    """HumanEval: the test code runs here, its ``candidate`` calls into the program process."""
    deadline = time.monotonic() + spec["timeout_s"]
    name = spec["entry_point"]
    failed = _load(program, spec, name, f"the program defines no '{name}'")
    if failed is not None:
        return failed

    def candidate(*args: Any, **kwargs: Any) -> Any:
        request = {"op": "call", "args": encode(list(args)), "kwargs": encode(kwargs)}
        reply = program.ask(request, deadline - time.monotonic())
        error = _program_error(reply)
        if error is not None:
            raise error
        return decode(reply.get("value"))

    test_source = spec["test_code"]
    ns: dict[str, Any] = {"__name__": "tests"}
    try:
        exec(spec.get("prelude") or "", ns)
        ns[name] = candidate
        exec(compile(test_source, "tests.py", "exec"), ns)
        ns["check"](candidate)
    except CaseTimeout:
        return {"passed": False, "reason": f"timeout after {spec['timeout_s']:g}s"}
    except ProgramExit:
        return {"passed": False, "reason": "the program called exit() before the tests finished"}
    except ProgramGone as exc:
        return {"passed": False, "reason": _ended_early(exc)}
    except BaseException as exc:
        return {"passed": False, "reason": _error_line(exc, test_source)}
    return {"passed": True, "reason": "all tests passed"}


def _check_unittest(program: _Program, spec: dict[str, Any]) -> dict[str, Any]:
    """BigCodeBench: load runs the tests in the program process (see the module doc)."""
    report = _load(program, spec, None)
    return report if report is not None else {"passed": False, "reason": "no tests ran"}


def _check_cases(
    program: _Program,
    spec: dict[str, Any],
    request: Callable[[str], dict[str, Any]],
    verdict: Callable[[dict[str, Any], str], str | None],
) -> dict[str, Any]:
    """Run each case of ``spec`` (``request`` of its input) and stop at the first failure
    (``verdict`` of the reply and the expected output: None when right, else why not)."""
    timeout_s = spec["timeout_s"]
    for i, case in enumerate(spec["cases"]):
        try:
            reply = program.ask(request(case["input"]), timeout_s)
        except CaseTimeout:
            return {"passed": False, "reason": f"case {i}: timeout after {timeout_s:g}s"}
        except ProgramGone as exc:
            return {"passed": False, "reason": f"case {i}: {_ended_early(exc)}"}
        error = _program_error(reply)
        if error is not None and not isinstance(error, ProgramExit):
            return {"passed": False, "reason": f"case {i}: runtime error {error}"}
        if error is not None:
            return {"passed": False, "reason": f"case {i}: the program called exit()"}
        wrong = verdict(reply, case["output"])
        if wrong is not None:
            return {"passed": False, "reason": f"case {i}: wrong answer: {wrong}"}
    return {"passed": True, "reason": f"all {len(spec['cases'])} cases passed"}


def _check_stdio(program: _Program, spec: dict[str, Any]) -> dict[str, Any]:
    """LiveCodeBench stdin/stdout: the program's stdout per case against the expected text."""
    failed = _load(program, spec, None)
    if failed is not None:
        return failed

    def verdict(reply: dict[str, Any], expected: str) -> str | None:
        got = reply.get("stdout")
        if not isinstance(got, str):
            return "the program process sent no stdout"
        ok, why = stdio_equal(got, expected)
        return None if ok else why

    return _check_cases(program, spec, lambda text: {"op": "stdio", "input": text}, verdict)


def _check_call(program: _Program, spec: dict[str, Any]) -> dict[str, Any]:
    """LiveCodeBench functional: ``Solution().<func_name>(*args)`` against the JSON output."""
    name = spec["func_name"]
    failed = _load(program, spec, name, f"the program defines no Solution.{name} or {name}")
    if failed is not None:
        return failed

    def request(text: str) -> dict[str, Any]:
        raw = text.rstrip("\n")
        args = [json.loads(line) for line in raw.split("\n")] if raw else []
        return {"op": "call", "args": encode(args), "kwargs": encode({})}

    def verdict(reply: dict[str, Any], expected: str) -> str | None:
        try:
            got = decode(reply.get("value"))
        except (ValueError, TypeError, RecursionError) as exc:
            return f"unreadable result ({_short(str(exc), 80)})"
        want = json.loads(expected)
        return None if call_equal(got, want) else f"got {_short(got)}, expected {_short(want)}"

    return _check_cases(program, spec, request, verdict)


_KINDS = {
    "functional": _check_functional,
    "unittest": _check_unittest,
    "call": _check_call,
    "stdio": _check_stdio,
}


def _make_undumpable() -> None:
    """PR_SET_DUMPABLE 0: processes of our uid cannot ptrace us or open /proc/<our pid>/mem or
    /proc/<our pid>/fd (raises OSError where the kernel refuses)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def main() -> None:
    """Grade solution.py against the tests on stdin; report on stdout (see the module doc)."""
    _make_undumpable()
    program = _Program()  # forked before the nonce and the tests are read: they are not in it
    nonce, _, job = sys.stdin.read().partition("\n")
    _redirect(os.open(os.devnull, os.O_RDONLY), 0)
    sys.stdout = sys.stderr  # the tests' own prints: stdout carries the report only
    spec = json.loads(job)
    try:
        compile(_read("solution.py"), "solution.py", "exec")  # nothing runs here
    except (SyntaxError, ValueError) as exc:
        report = {"passed": False, "reason": f"the program does not compile: {_error_line(exc)}"}
    else:
        try:
            report = _KINDS[spec["kind"]](program, spec)
        except BaseException as exc:
            report = {"passed": False, "reason": f"test driver stopped: {_error_line(exc)}"}
    program.stop()
    os.write(1, f"\n{nonce.strip()} {json.dumps(report)}\n".encode())
    os._exit(0)


if __name__ == "__main__":
    main()
