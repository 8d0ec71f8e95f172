"""Math grading: answer extraction, a fast normalised comparison, then ``math-verify``.

``math-verify``'s ``parse``/``verify`` guard themselves with ``signal.alarm``, which only works on
the main thread; graders run on event-loop and worker threads (TRL calls async rewards off the
main thread). So they are called with ``parsing_timeout=None`` / ``timeout_seconds=None`` and the
timeout is enforced here instead: each check runs in a daemon worker thread that is joined with a
timeout. A check that overruns is reported as a wrong answer with reason ``math-verify timeout``;
its thread is abandoned (Python threads cannot be killed) and finishes in the background, and as a
daemon it never blocks interpreter exit.
"""

from __future__ import annotations

import logging
import re
import threading
from fractions import Fraction
from typing import Any

from conductor_core.tasks.answers import extract_final_answer, strip_markup

DEFAULT_TIMEOUT_S = 10.0

_LATEX_NOISE = (
    ("\\left", ""),
    ("\\right", ""),
    ("\\!", ""),
    ("\\,", ""),
    ("\\;", ""),
    ("\\ ", ""),
    ("\\dfrac", "\\frac"),
    ("\\tfrac", "\\frac"),
    ("^{\\circ}", ""),
    ("^\\circ", ""),
    ("\\%", ""),
    ("%", ""),
    ("\\$", ""),
)
_TEXT_WRAP = re.compile(r"\\(?:text|mathrm|textbf|mbox)\{([^{}]*)\}")
_FRAC = re.compile(r"^\\frac\{(-?\d+)\}\{(-?\d+)\}$|^\\frac(\d)(\d)$")


def normalize_math(s: str) -> str:
    """A light, safe normalisation of a math answer string (no symbolic work)."""
    s = strip_markup(s)
    s = _TEXT_WRAP.sub(r"\1", s)
    for old, new in _LATEX_NOISE:
        s = s.replace(old, new)
    s = re.sub(r"\s+", "", s)
    s = s.rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", s):  # thousands separators
        s = s.replace(",", "")
    if s.startswith("x=") or s.startswith("y="):
        s = s[2:]
    return s


def as_number(s: str) -> Fraction | None:
    """``s`` as an exact rational number (ints, decimals, a/b, \\frac{a}{b}), else ``None``."""
    s = normalize_math(s)
    m = _FRAC.match(s)
    if m:
        num, den = (m.group(1), m.group(2)) if m.group(1) is not None else (m.group(3), m.group(4))
        return Fraction(int(num), int(den)) if int(den) != 0 else None
    if s.startswith("-\\frac"):
        inner = as_number(s[1:])
        return -inner if inner is not None else None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def quick_equal(reference: str, candidate: str) -> bool:
    """Cheap equality: identical after normalisation, or the same rational number."""
    a, b = normalize_math(reference), normalize_math(candidate)
    if a and a == b:
        return True
    na, nb = as_number(reference), as_number(candidate)
    return na is not None and nb is not None and na == nb


def _quiet_math_verify() -> None:
    """math-verify warns on every call that its own timeouts are off: we enforce ours."""
    log = logging.getLogger("math_verify")
    if log.level == logging.NOTSET:
        log.setLevel(logging.ERROR)


def _verify_worker(reference: str, candidate: str, full_text: str, out: dict[str, Any]) -> None:
    try:
        from math_verify import parse, verify

        _quiet_math_verify()

        gold = parse(f"\\boxed{{{reference}}}", parsing_timeout=None)
        if not gold:
            gold = parse(f"${reference}$", parsing_timeout=None)
        pred = parse(f"\\boxed{{{candidate}}}", parsing_timeout=None) if candidate else []
        if not pred and full_text:
            pred = parse(full_text, parsing_timeout=None)
        out["gold"] = [str(g) for g in gold]
        out["pred"] = [str(p) for p in pred]
        out["ok"] = bool(gold and pred and verify(gold, pred, timeout_seconds=None))
    except Exception as exc:  # math-verify/sympy can raise anything on odd input
        out["error"] = f"{type(exc).__name__}: {exc}"


def math_verify_equal(
    reference: str, candidate: str, *, full_text: str = "", timeout_s: float = DEFAULT_TIMEOUT_S
) -> tuple[bool | None, str]:
    """Equivalence with math-verify in a worker thread with a timeout.

    Returns ``(equal, note)``; ``equal`` is ``None`` when the check timed out or crashed.
    """
    out: dict[str, Any] = {}
    t = threading.Thread(
        target=_verify_worker,
        args=(reference, candidate, full_text, out),
        name="math-verify",
        daemon=True,
    )
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return None, f"math-verify timeout after {timeout_s:g}s"
    if "error" in out:
        return None, f"math-verify error: {out['error']}"
    if out.get("ok"):
        return True, "equivalent (math-verify)"
    if not out.get("pred"):
        return False, "math-verify could not parse the answer"
    return False, f"not equivalent: {out['pred'][0]} vs reference {out.get('gold', ['?'])[0]}"


def grade_math(
    reference: str, answer: str, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> tuple[bool, str, str | None]:
    """Grade a math answer. Returns ``(correct, reason, extracted)``."""
    extracted = extract_final_answer(answer)
    if extracted is None:
        return False, "no final answer found (no \\boxed{}, 'answer is' or number)", None
    if quick_equal(reference, extracted):
        return True, "equal after normalisation", extracted
    equal, note = math_verify_equal(reference, extracted, full_text=answer, timeout_s=timeout_s)
    return bool(equal), note, extracted
