"""JSON log lines for the gateway: one object per line, secrets scrubbed.

Each record becomes ``{"ts", "level", "logger", "message", ...}`` plus the fields passed as
``extra`` (the gateway's access log adds ``request_id``, ``method``, ``route``, ``status``,
``duration_ms``, ``key_id``, ``client``). Messages and string fields are scrubbed of the given
secrets (the API keys) and of anything shaped like a credential.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Iterable
from typing import Any

from conductor_core.track.scrub import scrub_text, secret_values

_STANDARD = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message",
    "asctime",
    "taskName",
    "color_message",
}


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object, with ``secrets`` replaced by ``***``."""

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def format(self, record: logging.LogRecord) -> str:
        """The record as a JSON line."""
        out: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": scrub_text(record.getMessage(), self.secrets),
        }
        for key, value in record.__dict__.items():
            if key in _STANDARD or key.startswith("_"):
                continue
            out[key] = scrub_text(value, self.secrets) if isinstance(value, str) else value
        if record.exc_info:
            out["exception"] = scrub_text(self.formatException(record.exc_info), self.secrets)
        return json.dumps(out, default=str, ensure_ascii=False)


def configure_json_logging(level: str | int = "INFO", secrets: Iterable[str] = ()) -> None:
    """Send every log record (the gateway's, uvicorn's, the library's) to stderr as JSON lines.

    ``secrets`` (the API keys) plus the values of secret-named environment variables are
    scrubbed from every line.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter([*secrets, *secret_values()]))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
