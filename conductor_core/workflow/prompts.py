"""Prompts: the Conductor's prompt, the recursion round's prompt and the worker message.

The texts live in ``workflow/templates/*.txt`` (package data) and are filled with ``{{name}}``
markers in one pass, so text such as a question containing ``{{models}}`` is never re-expanded.
Bump :data:`PROMPT_VERSION` whenever a template changes: trained Conductors depend on the exact
wording, and traces record the version.

Workers appear to the Conductor only as anonymous numbered models ("Model 0", "Model 1", ...),
optionally with one line of description each (descriptor mode).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from conductor_core.workflow.model import AccessMode

__all__ = [
    "PROMPT_VERSION",
    "conductor_messages",
    "conductor_prompt",
    "prompt_digest",
    "prompt_from_request",
    "recursion_prompt",
    "worked_examples",
    "worker_message",
]

PROMPT_VERSION = "1"
"""Version of the prompt templates; bump it whenever a template's wording changes."""

_MARKER = re.compile(r"\{\{(\w+)\}\}")
_EXAMPLE_SEPARATOR = "%%"

Workers = int | Sequence[int] | Sequence[Any]
"""A pool size ``n`` (models 0..n-1), the offered ids, or objects with an ``id`` attribute."""


@cache
def _template(name: str) -> str:
    """The text of ``templates/<name>.txt`` (without its final newline)."""
    from importlib.resources import files

    resource = files("conductor_core.workflow").joinpath("templates", f"{name}.txt")
    return resource.read_text(encoding="utf-8").rstrip("\n")


def _fill(template: str, values: dict[str, str]) -> str:
    """Replace every ``{{name}}`` in one pass (values are not scanned again)."""

    def repl(m: re.Match[str]) -> str:
        return values[m.group(1)] if m.group(1) in values else m.group(0)

    return _MARKER.sub(repl, template)


def prompt_digest(text: str) -> str:
    """Short stable digest of a prompt for traces: the first 16 hex chars of its sha256."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def worked_examples(access_mode: AccessMode | str = AccessMode.BINARY) -> list[str]:
    """The four worked examples (question, short reasoning, the three lists) for ``access_mode``.

    Each example ends with a plan that :func:`~conductor_core.workflow.parser.parse_plan`
    accepts in that access mode.
    """
    mode = AccessMode(access_mode)
    keep, drop = ("binary: ", "index: ") if mode is AccessMode.BINARY else ("index: ", "binary: ")
    examples: list[str] = []
    for block in _template("examples").split(f"\n{_EXAMPLE_SEPARATOR}\n"):
        lines = []
        for line in block.strip("\n").splitlines():
            if line.startswith(drop):
                continue
            lines.append(line.removeprefix(keep))
        examples.append("\n".join(lines))
    return examples


def _model_ids(workers: Workers) -> list[int]:
    if isinstance(workers, bool):
        raise ValueError(f"workers: expected a pool size or a list of worker ids, got {workers!r}")
    if isinstance(workers, int):
        if workers < 1:
            raise ValueError(f"workers: the pool needs at least one model, got {workers}")
        return list(range(workers))
    ids = [int(getattr(w, "id", w)) for w in workers]
    if not ids:
        raise ValueError("workers: the pool needs at least one model, got an empty list")
    return ids


def _models_block(workers: Workers, descriptors: Sequence[str] | None) -> str:
    ids = _model_ids(workers)
    if descriptors is None:
        return "\n".join(f"Model {i}" for i in ids)
    if len(descriptors) != len(ids):
        raise ValueError(
            f"descriptors: got {len(descriptors)} descriptions for {len(ids)} models; "
            f"give one description per offered model"
        )
    lines = []
    for i, text in zip(ids, descriptors, strict=True):
        text = " ".join(str(text).split())
        lines.append(f"Model {i}: {text}" if text else f"Model {i}")
    return "\n".join(lines)


def conductor_prompt(
    question: str,
    workers: Workers,
    *,
    max_steps: int = 5,
    access_mode: AccessMode | str = AccessMode.BINARY,
    descriptors: Sequence[str] | None = None,
) -> str:
    """The Conductor's prompt for ``question`` with the offered ``workers``.

    Args:
        question: the user's question.
        workers: the pool size ``n`` (models 0..n-1), the list of offered model ids, or objects
            with an ``id`` attribute (such as ``WorkerInfo``).
        max_steps: the most steps a plan may have (stated in the prompt).
        access_mode: ``binary`` or ``index``; selects the output specification and examples.
        descriptors: one description per offered model (descriptor mode), or ``None`` for
            anonymous models.
    """
    if max_steps < 1:
        raise ValueError(f"max_steps: must be at least 1, got {max_steps}")
    mode = AccessMode(access_mode)
    examples = "\n\n".join(
        f"Example {n}:\n{text}" for n, text in enumerate(worked_examples(mode), start=1)
    )
    return _fill(
        _template("conductor"),
        {
            "max_steps": str(max_steps),
            "output_spec": _template(f"output_{mode.value}"),
            "examples": examples,
            "question": question.strip(),
            "models": _models_block(workers, descriptors),
        },
    )


def recursion_prompt(
    question: str,
    workers: Workers,
    previous_plan: str,
    previous_answer: str,
    *,
    max_steps: int = 5,
    access_mode: AccessMode | str = AccessMode.BINARY,
    descriptors: Sequence[str] | None = None,
) -> str:
    """The Conductor's prompt for a further round: the usual prompt, then the previous plan and
    its final answer, with the instruction to write a new plan or three empty lists (= keep)."""
    base = conductor_prompt(
        question,
        workers,
        max_steps=max_steps,
        access_mode=access_mode,
        descriptors=descriptors,
    )
    section = _fill(
        _template("recursion"),
        {"previous_plan": previous_plan.strip(), "previous_answer": previous_answer.strip()},
    )
    return f"{base}\n\n{section}"


def conductor_messages(
    question: str,
    workers: Workers,
    *,
    max_steps: int = 5,
    access_mode: AccessMode | str = AccessMode.BINARY,
    descriptors: Sequence[str] | None = None,
    previous_plan: str | None = None,
    previous_answer: str | None = None,
) -> list[dict[str, str]]:
    """The Conductor's prompt in chat form (one user message).

    With ``previous_plan`` and ``previous_answer`` it is the recursion round's prompt.
    """
    if (previous_plan is None) != (previous_answer is None):
        raise ValueError("previous_plan and previous_answer: give both (a recursion round) or none")
    if previous_plan is not None and previous_answer is not None:
        text = recursion_prompt(
            question,
            workers,
            previous_plan,
            previous_answer,
            max_steps=max_steps,
            access_mode=access_mode,
            descriptors=descriptors,
        )
    else:
        text = conductor_prompt(
            question,
            workers,
            max_steps=max_steps,
            access_mode=access_mode,
            descriptors=descriptors,
        )
    return [{"role": "user", "content": text}]


def prompt_from_request(request: Any) -> str:
    """The Conductor's prompt for a ``PlanRequest`` (``conductor_core.policy.base``).

    Uses the request's workers (renumbered ids as offered), their descriptions when
    ``request.descriptors`` is set, and the recursion prompt when ``request.previous`` is set.
    """
    workers = list(request.workers)
    descriptors = [w.description for w in workers] if request.descriptors else None
    kwargs: dict[str, Any] = {
        "max_steps": request.max_steps,
        "access_mode": request.access_mode,
        "descriptors": descriptors,
    }
    if request.previous is not None:
        return recursion_prompt(
            request.question, workers, request.previous.plan, request.previous.answer, **kwargs
        )
    return conductor_prompt(request.question, workers, **kwargs)


def worker_message(
    question: str,
    visible: Sequence[tuple[int, str, str]],
    subtask: str,
    previous_answer: str | None = None,
) -> str:
    """The user message a worker receives for one step.

    Args:
        question: the original question (every worker sees it).
        visible: ``(step index, subtask, response)`` of each earlier step this step may read,
            in order.
        subtask: this step's own subtask.
        previous_answer: the previous round's final answer, when this step may see it.

    The layout is a contract (the simulated workers parse it): preamble, ``<question>`` block,
    optional ``<previous_answer>`` block, one ``<step agent="agent_i">`` block per visible step,
    then ``Your assigned subtask:`` and the subtask, separated by blank lines.
    """
    parts = [_template("worker_preamble"), f"<question>\n{question}\n</question>"]
    if previous_answer is not None:
        parts.append(f"<previous_answer>\n{previous_answer}\n</previous_answer>")
    for index, step_subtask, response in visible:
        parts.append(
            f'<step agent="agent_{index}">\n'
            f"<subtask>\n{step_subtask}\n</subtask>\n"
            f"<response>\n{response}\n</response>\n"
            f"</step>"
        )
    parts.append(f"Your assigned subtask:\n{subtask}")
    return "\n\n".join(parts)
