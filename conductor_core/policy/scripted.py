"""A deterministic, heuristic plan source: the embedded default until a trained Conductor exists.

This is NOT a learned model. It guesses the question's domain from surface cues, routes the question
to a worker chosen by a fixed mapping (or by keywords in the workers' descriptions), and writes a
two-step plan: solve, then a different worker verifies with access to everything. Its raw text is
real Conductor-format output (a reasoning line and the three lists), labelled as scripted in a
comment line, and it goes through the real parser, so the whole solve path is exercised.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping

from conductor_core.errors import ConfigError
from conductor_core.policy.base import PlanRequest, PlanResult, WorkerInfo, parse_result
from conductor_core.workflow.model import ALL, Step, Workflow

DOMAINS: tuple[str, ...] = ("math", "mcq", "code", "freeform")

LABEL = "# scripted plan source: deterministic heuristic, not a learned Conductor"
"""First line of every raw text this source writes."""

_MCQ = re.compile(r"(?m)(^|\s)(\(?[A-Ea-e]\)|[A-E][.:])\s+\S")
_CODE = re.compile(
    r"\bdef\s+\w+\s*\(|\bfunction\b|\bimplement\b|\breturns?\b|```|\bclass\s+\w+|\bprogram\b",
    re.IGNORECASE,
)
_MATH_WORDS = re.compile(
    r"\b(compute|calculate|solve|evaluate|simplify|integral|derivative|equation|prove|"
    r"remainder|probability|how many|sum of|product of)\b",
    re.IGNORECASE,
)
_EQUATION = re.compile(r"\d\s*[-+*/^=<>]\s*[\d(a-z]|[a-z]\s*[=^]\s*\d|\\frac|\\sqrt|\$", re.I)

DESCRIPTION_KEYWORDS: dict[str, tuple[str, ...]] = {
    "math": ("math", "arithmetic", "reasoning", "olympiad", "stem"),
    "code": ("code", "coding", "program", "software", "python"),
    "mcq": ("knowledge", "multiple choice", "multiple-choice", "mcq", "trivia", "science"),
    "freeform": ("writing", "general", "chat", "free-form", "freeform", "assistant"),
}
"""Keywords in a worker's description that make it the default route for a domain."""

SOLVE_SUBTASKS: dict[str, str] = {
    "math": "Solve the problem step by step and give the final answer in \\boxed{}.",
    "mcq": "Answer the multiple-choice question; reason briefly, then end with the letter "
    "of the correct option.",
    "code": "Write a correct and complete solution in one code block, handling edge cases.",
    "freeform": "Answer the question accurately and concisely.",
}

VERIFY_SUBTASKS: dict[str, str] = {
    "math": "Check the previous solution step by step; fix any error and give the final answer "
    "in \\boxed{}.",
    "mcq": "Check the previous answer; if it is wrong, correct it. End with the letter of the "
    "correct option.",
    "code": "Review the previous code for bugs and edge cases; return the corrected complete "
    "solution in one code block.",
    "freeform": "Check the previous answer for errors and omissions; give the corrected final "
    "answer.",
}


def guess_domain(question: str) -> str:
    """The question's domain from surface cues: ``mcq``, ``code``, ``math`` or ``freeform``.

    Lettered options (``A)``, ``(A)``, ``A.``) mean multiple choice; code words (``def``,
    ``function``, ``implement``, ``return``) mean code; digits with an operator or equation, or a
    math verb (``compute``, ``solve``...) mean math; anything else is free-form.
    """
    if len(_MCQ.findall(question)) >= 2:
        return "mcq"
    if _CODE.search(question):
        return "code"
    if _EQUATION.search(question) or (_MATH_WORDS.search(question) and re.search(r"\d", question)):
        return "math"
    if _MATH_WORDS.search(question):
        return "math"
    return "freeform"


class ScriptedPlanSource:
    """Deterministic heuristic plans: route by domain, solve, then verify with another worker.

    ``routes`` maps a domain (``math``, ``mcq``, ``code``, ``freeform``) to the worker id that
    solves it; domains not in ``routes`` go to the first worker whose description has one of
    :data:`DESCRIPTION_KEYWORDS`, else to the first offered worker. A route to a worker that is
    not offered falls back the same way (and is noted in ``PlanResult.extra``). With ``verify``
    (the default) a second, different worker checks the answer with access to all earlier steps.
    """

    def __init__(self, routes: Mapping[str, int] | None = None, *, verify: bool = True) -> None:
        routes = dict(routes or {})
        for domain, worker in routes.items():
            if domain not in DOMAINS:
                raise ConfigError(
                    f"routes: unknown domain {domain!r}; use one of {', '.join(DOMAINS)}"
                )
            if not isinstance(worker, int) or isinstance(worker, bool) or worker < 0:
                raise ConfigError(
                    f"routes[{domain!r}]: worker id must be a non-negative integer, got {worker!r}"
                )
        self.routes = routes
        self.verify = verify

    async def plan(self, request: PlanRequest) -> PlanResult:
        """Write the scripted plan for ``request`` and parse it with the real parser."""
        start = time.perf_counter()
        raw, extra = self.render(request)
        return parse_result(
            request,
            raw,
            latency_s=time.perf_counter() - start,
            extra=extra,
        )

    async def aclose(self) -> None:
        """Nothing to release."""

    def render(self, request: PlanRequest) -> tuple[str, dict]:
        """The raw Conductor-format text for ``request`` and a dict describing the choice."""
        if request.previous is not None:
            reasoning = "Recursion round: the previous answer stands; keep it."
            return _text(reasoning, Workflow(access_mode=request.access_mode)), {
                "scripted": True,
                "decision": "keep",
            }
        if not request.workers:
            raise ConfigError("workers: the plan request offers no workers; offer at least one")
        domain = guess_domain(request.question)
        solver, fallback = self.route(domain, request.workers)
        steps = [Step(worker=solver, subtask=SOLVE_SUBTASKS[domain], access=())]
        checker = _other_worker(solver, request.workers)
        if self.verify and checker is not None and request.max_steps >= 2:
            steps.append(Step(worker=checker, subtask=VERIFY_SUBTASKS[domain], access=ALL))
        reasoning = f"The question looks like a {domain} question; Model {solver} solves it"
        reasoning += f", then Model {checker} verifies it." if len(steps) == 2 else "."
        extra: dict = {"scripted": True, "domain": domain, "solver": solver}
        if len(steps) == 2:
            extra["verifier"] = checker
        if fallback:
            extra["route_fallback"] = True
        workflow = Workflow(steps=tuple(steps), access_mode=request.access_mode)
        return _text(reasoning, workflow), extra

    def route(self, domain: str, workers: tuple[WorkerInfo, ...]) -> tuple[int, bool]:
        """The solver for ``domain`` among ``workers``, and whether a configured route fell back."""
        offered = {w.id for w in workers}
        if domain in self.routes:
            if self.routes[domain] in offered:
                return self.routes[domain], False
            return _by_description(domain, workers), True
        return _by_description(domain, workers), False


def _by_description(domain: str, workers: tuple[WorkerInfo, ...]) -> int:
    """The first worker whose description names ``domain``'s keywords, else the first worker."""
    for worker in workers:
        text = worker.description.lower()
        if any(keyword in text for keyword in DESCRIPTION_KEYWORDS[domain]):
            return worker.id
    return min(w.id for w in workers)


def _other_worker(solver: int, workers: tuple[WorkerInfo, ...]) -> int | None:
    """The next offered worker after ``solver`` (cyclically), or None with a single worker."""
    ids = sorted({w.id for w in workers})
    if len(ids) < 2:
        return None
    later = [i for i in ids if i > solver]
    return later[0] if later else ids[0]


def _text(reasoning: str, workflow: Workflow) -> str:
    return f"{LABEL}\n{reasoning}\n\n{workflow.render()}"
