"""Format errors of Conductor output, each with a stable reason code and a human message."""

from __future__ import annotations

from enum import StrEnum


class FormatErrorCode(StrEnum):
    """Stable reason codes for rejected plans (used in metrics, traces and the CLI's exit)."""

    MISSING_LIST = "missing_list"
    UNPARSABLE_LITERAL = "unparsable_literal"
    UNEQUAL_LENGTHS = "unequal_lengths"
    EMPTY_PLAN = "empty_plan"
    TOO_MANY_STEPS = "too_many_steps"
    UNKNOWN_WORKER = "unknown_worker"
    BAD_WORKER_ID = "bad_worker_id"
    BAD_SUBTASK = "bad_subtask"
    BAD_ACCESS_ENTRY = "bad_access_entry"
    FORWARD_REFERENCE = "forward_reference"
    SELF_REFERENCE = "self_reference"
    TRUNCATED = "truncated"
    """Cut off at the completion limit before its end token (training's
    ``experimental.truncated_is_format_error``), whether or not its lists parse."""


class PlanFormatError(ValueError):
    """Raised by the parser when Conductor output is not a valid plan."""

    def __init__(self, code: FormatErrorCode, message: str) -> None:
        super().__init__(f"{code.value}: {message}")
        self.code = code
        self.message = message

    def to_dict(self) -> dict[str, str]:
        """JSON form used in traces and by ``conductor parse``."""
        return {"code": self.code.value, "message": self.message}
