"""Prompts: the Conductor's prompt, the recursion round's messages and the worker message.

The texts live in ``workflow/templates/*.txt`` (package data) and are filled with ``{{name}}``
markers in one pass, so text such as a question containing ``{{models}}`` is never re-expanded.
Bump :data:`PROMPT_VERSION` whenever a template or the layout of the messages changes: trained
Conductors depend on the exact wording, and each saves the version it learned.

A recursion round (a second round of :func:`~conductor_core.solve.solve`, where the Conductor
keeps the previous answer or writes a new plan) is a conversation of three messages: the round-1
prompt as a user turn (byte-identical to what round 1 was asked), the previous plan as the
Conductor's own (assistant) turn, then a user turn with that plan's final answer and the
instruction to write a new plan or three empty lists (keep). A model saved with prompt version 1
or 2 learned it as one user message, the round-1 prompt followed by a section quoting the previous
plan and answer; the plan sources that load a model folder read its version and still ask it that
way (:func:`conductor_messages`, ``version``; a served model is asked in the current layout).

Two prompt styles (:class:`PromptStyle`): ``full`` (the paper's prompt with worked examples) and
``compact`` (a short prompt for tiny models). Every plan source and the training data build the
Conductor's messages with :func:`plan_messages` from a plan request, so a model is asked at
serving time exactly as it was trained; a trained model's style is saved next to its weights
(:func:`save_prompt_spec`) and read back when it is loaded (:func:`load_prompt_spec`).

Workers appear to the Conductor as anonymous models numbered by their POOL ids ("Model 0",
"Model 1", ...), optionally with one line of description each (descriptor mode). A subset of
the pool is shown under the same ids ("Model 1", "Model 3"): it is never renumbered here, so an id
names the same worker in every prompt and a Conductor can learn which worker is good at what, also
inside a subset. Plans use those ids and run as written. (Training in descriptor mode may show
workers under random ids, ``adaptive.renumber``, so that the description is their only identity;
the training data maps those ids back.)
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from pathlib import Path
from typing import Any

from conductor_core.workflow.model import AccessMode, OfferedWorkers, offered_ids

__all__ = [
    "PROMPT_SPEC_FILE",
    "PROMPT_VERSION",
    "PromptSpec",
    "PromptStyle",
    "compact_prompt",
    "conductor_messages",
    "conductor_prompt",
    "load_prompt_spec",
    "plan_messages",
    "prompt_digest",
    "save_prompt_spec",
    "worked_examples",
    "worker_message",
]

PROMPT_VERSION = "3"
"""Version of the prompts; bump it whenever a template's wording, the layout of the messages or
the meaning of what is shown changes. 3: a recursion round shows the previous plan as the
Conductor's own (assistant) turn, then the previous answer and the instruction as a new user turn
(2: one user message, the round-1 prompt followed by a section quoting both). 2: an offered subset
of the pool is shown under its pool ids (1: renumbered 0..k-1). Saved with a trained model
(:func:`save_prompt_spec`); the plan sources that load a model folder ask it its recursion round
in the layout of its saved version (:func:`conductor_messages`); the subset numbering of version 1
is not reproduced."""

_ONE_MESSAGE_RECURSION = frozenset({"1", "2"})
"""Prompt versions whose recursion round is one user message (see :data:`PROMPT_VERSION`)."""

PROMPT_SPEC_FILE = "conductor_prompt.json"
"""Written next to a trained Conductor's weights: how the model was asked during training."""


class PromptStyle(StrEnum):
    """How the Conductor is asked for a plan."""

    FULL = "full"
    """The paper's prompt: role, format, worked examples, the question, the model list."""
    COMPACT = "compact"
    """A short prompt (model list, one-line format, the question last) for tiny models."""


@dataclass(frozen=True)
class PromptSpec:
    """How a trained Conductor was asked: saved with its weights, read back when it is loaded."""

    style: PromptStyle = PromptStyle.FULL
    version: str = PROMPT_VERSION
    max_plan_tokens: int | None = None
    """The longest plan (in tokens) the model was trained to write; plan sources cap generation
    there (a model trained on truncated completions may never learn to stop)."""
    descriptors: bool = False
    """Trained in descriptor mode: plan sources show it the workers' descriptions."""


def save_prompt_spec(
    model_dir: str | Path,
    style: PromptStyle | str,
    max_plan_tokens: int | None = None,
    descriptors: bool = False,
) -> Path:
    """Write :data:`PROMPT_SPEC_FILE` into ``model_dir`` (the folder of saved weights)."""
    path = Path(model_dir) / PROMPT_SPEC_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {
        "prompt_style": PromptStyle(style).value,
        "prompt_version": PROMPT_VERSION,
    }
    if max_plan_tokens is not None:
        data["max_plan_tokens"] = int(max_plan_tokens)
    if descriptors:
        data["descriptors"] = True
    path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return path


def load_prompt_spec(model_dir: str | Path) -> PromptSpec | None:
    """The prompt spec saved in ``model_dir``, or None when the folder has none (a model that was
    not trained here). A malformed file raises ``ValueError`` naming it."""
    path = Path(model_dir) / PROMPT_SPEC_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        limit = data.get("max_plan_tokens")
        return PromptSpec(
            style=PromptStyle(data["prompt_style"]),
            version=str(data.get("prompt_version", PROMPT_VERSION)),
            max_plan_tokens=int(limit) if limit is not None else None,
            descriptors=bool(data.get("descriptors", False)),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path}: not a valid prompt spec ({exc}); expected "
            f'{{"prompt_style": "full" | "compact", "prompt_version": "..."}}'
        ) from exc


_MARKER = re.compile(r"\{\{(\w+)\}\}")
_SEPARATOR = "%%"
"""A line of its own that splits a template into parts: the worked examples, and a recursion
template's quote of the previous plan (one-message layout only) from the recursion turn."""


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
    for block in _template("examples").split(f"\n{_SEPARATOR}\n"):
        lines = []
        for line in block.strip("\n").splitlines():
            if line.startswith(drop):
                continue
            lines.append(line.removeprefix(keep))
        examples.append("\n".join(lines))
    return examples


def _described(workers: OfferedWorkers, descriptors: Sequence[str] | None) -> list[tuple[int, str]]:
    """The offered ids, each with its description (collapsed to one line; "" without)."""
    ids = offered_ids(workers)
    if descriptors is None:
        return [(i, "") for i in ids]
    if len(descriptors) != len(ids):
        raise ValueError(
            f"descriptors: got {len(descriptors)} descriptions for {len(ids)} models; "
            f"give one description per offered model"
        )
    return [(i, " ".join(str(t).split())) for i, t in zip(ids, descriptors, strict=True)]


def _models_block(workers: OfferedWorkers, descriptors: Sequence[str] | None) -> str:
    lines = _described(workers, descriptors)
    return "\n".join(f"Model {i}: {text}" if text else f"Model {i}" for i, text in lines)


def conductor_prompt(
    question: str,
    workers: OfferedWorkers,
    *,
    max_steps: int = 5,
    access_mode: AccessMode | str = AccessMode.BINARY,
    descriptors: Sequence[str] | None = None,
) -> str:
    """The Conductor's prompt for ``question`` with the offered ``workers``.

    Args:
        question: the user's question.
        workers: the pool size ``n`` (models 0..n-1), the offered pool ids (listed in that
            order, under those ids), or objects with an ``id`` attribute (such as ``WorkerInfo``).
        max_steps: the most steps a plan may have (stated in the prompt).
        access_mode: ``binary`` or ``index``; selects the output specification and examples.
        descriptors: one description per offered model, in the order of ``workers``
            (descriptor mode), or ``None`` for anonymous models.
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


def _compact_models(workers: OfferedWorkers, descriptors: Sequence[str] | None) -> str:
    # The description comes before its id: a causal model then reads it at the id's own
    # position, from where a plan's worker slot can copy the id.
    return ", ".join(
        f"{text}: {i}" if text else str(i) for i, text in _described(workers, descriptors)
    )


def compact_prompt(
    question: str,
    workers: OfferedWorkers,
    *,
    max_steps: int = 5,
    descriptors: Sequence[str] | None = None,
) -> str:
    """The ``compact`` Conductor prompt. The question comes last, next to where the plan starts,
    so that a tiny model can attend to it. With ``descriptors`` (descriptor mode) each model's id
    is preceded by its description ("Models: strong at math: 0, fair at everything: 2.")."""
    return _fill(
        _template("compact"),
        {
            "models": _compact_models(workers, descriptors),
            "max_steps": str(max_steps),
            "question": question.strip(),
        },
    )


def _recursion_parts(
    style: PromptStyle, previous_plan: str, previous_answer: str
) -> tuple[str, str]:
    """The style's recursion template, filled, as (quote of the previous plan, recursion turn):
    the one-message layout joins the two, the conversation sends the turn alone (the plan is the
    assistant turn), so the wording of the two layouts cannot drift apart. The template is split
    before it is filled, so a plan or answer holding the separator cannot move the cut."""
    name = "compact_recursion" if style is PromptStyle.COMPACT else "recursion"
    quote, turn = _template(name).split(f"{_SEPARATOR}\n")
    values = {"previous_plan": previous_plan.strip(), "previous_answer": previous_answer.strip()}
    return _fill(quote, values), _fill(turn, values)


def conductor_messages(
    question: str,
    workers: OfferedWorkers,
    *,
    style: PromptStyle | str = PromptStyle.FULL,
    max_steps: int = 5,
    access_mode: AccessMode | str = AccessMode.BINARY,
    descriptors: Sequence[str] | None = None,
    previous_plan: str | None = None,
    previous_answer: str | None = None,
    version: str = PROMPT_VERSION,
) -> list[dict[str, str]]:
    """The chat messages asking the Conductor for a plan, in prompt ``style``.

    Without a previous round: one user message, the round-1 prompt (:func:`conductor_prompt` or
    :func:`compact_prompt`). With ``previous_plan`` and ``previous_answer`` (a recursion round):
    that same user message, ``previous_plan`` as the assistant's turn, and a user turn with
    ``previous_answer`` and the instruction to write a new plan or three empty lists (keep). For
    a model trained with an older prompt ``version`` (1 or 2) the recursion round is the one user
    message it learned: the round-1 prompt, then the previous plan, answer and instruction.
    """
    if (previous_plan is None) != (previous_answer is None):
        raise ValueError("previous_plan and previous_answer: give both (a recursion round) or none")
    chosen = PromptStyle(style)
    if chosen is PromptStyle.COMPACT:
        first = compact_prompt(question, workers, max_steps=max_steps, descriptors=descriptors)
    else:
        first = conductor_prompt(
            question,
            workers,
            max_steps=max_steps,
            access_mode=access_mode,
            descriptors=descriptors,
        )
    if previous_plan is None or previous_answer is None:
        return [{"role": "user", "content": first}]
    quote, turn = _recursion_parts(chosen, previous_plan, previous_answer)
    if version in _ONE_MESSAGE_RECURSION:
        return [{"role": "user", "content": f"{first}\n\n{quote}{turn}"}]
    return [
        {"role": "user", "content": first},
        {"role": "assistant", "content": previous_plan.strip()},
        {"role": "user", "content": turn},
    ]


def plan_messages(request: Any) -> list[dict[str, str]]:
    """The chat messages asking a Conductor for a plan for a ``PlanRequest``
    (``conductor_core.policy.base``): its offered workers under their pool ids, their
    descriptions in descriptor mode, its prompt style and version, and the recursion round's
    conversation when ``request.previous`` is set (:func:`conductor_messages`). Training data,
    evaluation and every plan source use this."""
    workers = list(request.workers)
    previous = request.previous
    return conductor_messages(
        request.question,
        workers,
        style=request.prompt_style,
        max_steps=request.max_steps,
        access_mode=request.access_mode,
        descriptors=[w.description for w in workers] if request.descriptors else None,
        previous_plan=previous.plan if previous is not None else None,
        previous_answer=(previous.answer or "") if previous is not None else None,
        version=request.prompt_version,
    )


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
