"""What a simulated worker writes: a right or wrong answer to a known problem in its domain's
format (``\\boxed{...}`` for math, ``Answer: X`` for multiple choice, a fenced Python block for
code, the bare string for free-form), a sentence of doubt closing a hedged answer, and a generic
reply to an unknown question. Every choice is drawn from the ``Random`` the caller passes.

Also used by training's warm-up, which shows previous answers as a simulated worker writes them.
"""

from __future__ import annotations

import ast
import re
import string
from fractions import Fraction
from random import Random

from conductor_core.simulation.problem_bank import ProblemBank, normalize_text
from conductor_core.tasks.problem import Domain, Problem

__all__ = [
    "HEDGES",
    "broken_code",
    "generic_answer",
    "hedge_answer",
    "is_right_text",
    "render_answer",
    "wrong_math",
]


# -- right and wrong answers to known problems ---------------------------------------------------


def hedge_answer(problem: Problem, text: str, rng: Random) -> str:
    """``text`` closed by a sentence of doubt (graded the same)."""
    if problem.domain == Domain.FREEFORM:
        # A bare free-form answer needs a stated-answer marker once a sentence follows it.
        text = f"The final answer is {text}."
    return f"{text}\n{rng.choice(HEDGES)}"


def is_right_text(problem: Problem, text: str) -> bool:
    """True when ``text`` contains the problem's reference in the simulator's answer format."""
    flat = normalize_text(text)
    ref = normalize_text(problem.reference)
    if not ref:
        return False
    if problem.domain == Domain.MATH:
        return f"\\boxed{{{ref}}}" in flat
    if problem.domain == Domain.MCQ:
        found = re.findall(r"Answer:\s*\(?([A-Za-z])\)?", flat)
        return bool(found) and found[-1].upper() == ref.upper()
    if problem.domain == Domain.CODE:
        return ref in flat
    pattern = r"(?<!\w)" + re.escape(ref.casefold()) + r"(?!\w)"
    return re.search(pattern, flat.casefold()) is not None


def render_answer(problem: Problem, right: bool, rng: Random, bank: ProblemBank) -> str:
    """A right or wrong answer to ``problem`` in the simulator's format for its domain."""
    if problem.domain == Domain.MATH:
        value = problem.reference if right else wrong_math(problem.reference, rng)
        return _math_text(value, rng)
    if problem.domain == Domain.MCQ:
        letter = problem.reference.strip().upper() if right else _wrong_letter(problem, rng)
        return _mcq_text(letter, rng)
    if problem.domain == Domain.CODE:
        entry = str(problem.tests.get("entry_point") or "") or None
        if right and problem.reference.strip():
            code = problem.reference.strip("\n")
        else:
            code = broken_code(problem.reference, entry, rng)
        return _code_text(code, rng)
    return problem.reference if right else _wrong_freeform(problem, rng, bank)


HEDGES: tuple[str, ...] = (
    "I am not confident about this one.",
    "This might be wrong; please double-check it.",
    "I am unsure here, so treat this with caution.",
)
"""Sentences of doubt a hedging simulated worker ends its answer with."""

_MATH_OPENERS = (
    "Let me work through this carefully.",
    "Setting up the quantities from the problem statement.",
    "I will translate the words into an equation and solve it.",
    "Breaking the problem into smaller steps.",
)
_MATH_MIDDLES = (
    "Collecting the known values and applying the relevant operations gives the result.",
    "Simplifying step by step and checking the arithmetic along the way.",
    "Substituting back confirms the value is consistent with the conditions.",
)


def _math_text(value: str, rng: Random) -> str:
    return (
        f"{rng.choice(_MATH_OPENERS)}\n{rng.choice(_MATH_MIDDLES)}\n\n"
        f"The final answer is \\boxed{{{value}}}."
    )


def wrong_math(reference: str, rng: Random) -> str:
    """A plausible value different from ``reference`` (ref±k for numbers, perturbed otherwise)."""
    ref = reference.strip()
    number = _as_number(ref)
    if number is not None:
        for _ in range(8):
            delta = rng.choice((1, -1, 2, -2, 10, -10))
            doubled = rng.random() < 0.3 and number != 0
            candidate = number * 2 if doubled else number + delta
            text = _format_number(candidate, like=ref)
            if text != ref:
                return text
        return _format_number(number + 1, like=ref)
    digits = [i for i, ch in enumerate(ref) if ch.isdigit()]
    if digits:
        i = rng.choice(digits)
        new_digit = str((int(ref[i]) + rng.randint(1, 8)) % 10)
        return ref[:i] + new_digit + ref[i + 1 :]
    return f"{ref} + 1" if ref else "0"


def _as_number(text: str) -> Fraction | None:
    cleaned = text.replace(",", "").replace("$", "").strip()
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def _format_number(value: Fraction, like: str) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    if "/" in like:
        return f"{value.numerator}/{value.denominator}"
    decimals = len(like.split(".", 1)[1]) if "." in like else 2
    return f"{float(value):.{decimals}f}"


_MCQ_REASONS = (
    "Comparing the options one by one, most can be ruled out by the definitions involved.",
    "Eliminating the choices that contradict the question leaves one candidate.",
    "Recalling the relevant facts and checking each option against them.",
)


def _mcq_text(letter: str, rng: Random) -> str:
    return f"{rng.choice(_MCQ_REASONS)}\n\nAnswer: {letter}"


def _wrong_letter(problem: Problem, rng: Random) -> str:
    n = len(problem.choices) or 4
    letters = [string.ascii_uppercase[i] for i in range(min(n, 26))]
    ref = problem.reference.strip().upper()
    others = [x for x in letters if x != ref] or ["A" if ref != "A" else "B"]
    return rng.choice(others)


_CODE_INTROS = (
    "Here is an implementation of the function.",
    "The following solution handles the cases described in the task.",
    "A straightforward implementation:",
)


def _code_text(code: str, rng: Random) -> str:
    return f"{rng.choice(_CODE_INTROS)}\n\n```python\n{code}\n```"


def broken_code(reference: str, entry_point: str | None, rng: Random) -> str:
    """A variant of ``reference`` that still parses but is wrong (off-by-one, None or raise)."""
    try:
        tree = ast.parse(reference)
    except SyntaxError:
        tree = None
    func = _find_function(tree, entry_point) if tree is not None else None
    if tree is None or func is None:
        name = entry_point or "solution"
        return f"def {name}(*args, **kwargs):\n    return None"
    variant = rng.choice(("off_by_one", "return_none", "raise"))
    if variant == "off_by_one" and _bump_first_int(func):
        return ast.unparse(tree)
    body_start = _docstring_len(func)
    if variant == "raise":
        stmt = ast.parse('raise ValueError("unsupported input")').body[0]
    else:
        stmt = ast.parse("return None").body[0]
    func.body = [*func.body[:body_start], stmt]
    return ast.unparse(ast.fix_missing_locations(tree))


def _find_function(tree: ast.Module, entry_point: str | None) -> ast.FunctionDef | None:
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if entry_point:
        for f in funcs:
            if f.name == entry_point:
                return f
    return funcs[-1] if funcs else None


def _docstring_len(func: ast.FunctionDef) -> int:
    first = func.body[0] if func.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return 1
    return 0


def _bump_first_int(func: ast.FunctionDef) -> bool:
    """Add one to the first integer literal in a return value or comparison (in place)."""
    for node in ast.walk(func):
        if isinstance(node, ast.Return | ast.Compare):
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Constant)
                    and isinstance(sub.value, int)
                    and not isinstance(sub.value, bool)
                ):
                    sub.value += 1
                    return True
    return False


def _wrong_freeform(problem: Problem, rng: Random, bank: ProblemBank) -> str:
    ref = normalize_text(problem.reference).casefold()
    others = [
        r for r in bank.references(str(problem.domain)) if normalize_text(r).casefold() != ref
    ]
    if others:
        return rng.choice(others)
    return "I am not certain; my best guess is that it cannot be determined."


_GENERIC_OPENERS = (
    "Here is my response to the subtask.",
    "I considered the request carefully.",
    "Working on the assigned subtask:",
)
_GENERIC_BODIES = (
    "The key points are the definitions involved, the constraints given, and how they interact; "
    "taking them in turn leads to a consistent conclusion.",
    "After outlining the relevant considerations and checking them against the question, the "
    "most reasonable answer follows directly from the stated facts.",
    "A careful reading suggests addressing the main requirement first and then verifying the "
    "details, which gives a coherent and complete answer.",
)


def generic_answer(request: str, rng: Random) -> str:
    """A plausible free-text reply about ``request`` (the subtask, else the question): what a
    simulated worker says to a question it does not know."""
    topic = normalize_text(request)
    if len(topic) > 120:
        topic = topic[:117] + "..."
    return f"{rng.choice(_GENERIC_OPENERS)} Regarding: {topic}\n\n{rng.choice(_GENERIC_BODIES)}"
