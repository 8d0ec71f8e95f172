"""The grading result shared by every grader."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Verdict:
    """Whether an answer is right, and why.

    ``reason`` is one human-readable line (for code: the first failing case, a timeout, ...).
    ``extracted`` is what the grader read as the final answer (a letter, an expression, the
    program). ``infra_error`` marks failures that are not the answer's fault (the sandbox or the
    judge failed): training excludes such samples (see :func:`reward`).
    """

    correct: bool
    reason: str
    extracted: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    infra_error: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)
