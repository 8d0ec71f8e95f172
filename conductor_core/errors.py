"""Errors a user can cause, each carrying one clear message naming the field and the fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable

    from pydantic import ValidationError


class ConductorError(Exception):
    """Base class for errors that the CLI reports as one clear line (no traceback)."""


class ConfigError(ConductorError):
    """A configuration file or value is invalid. The message names the field and the fix."""


class MissingDependencyError(ConductorError):
    """An optional dependency is not installed. The message names the extra to install."""

    def __init__(self, package: str, extra: str, purpose: str = "") -> None:
        what = f" (needed for {purpose})" if purpose else ""
        super().__init__(
            f"the optional package '{package}' is not installed{what}; "
            f"install it with: pip install 'conductor-core[{extra}]'"
        )
        self.package = package
        self.extra = extra


def require(module: str, extra: str, purpose: str = "", package: str | None = None):
    """Import ``module`` lazily or raise :class:`MissingDependencyError` naming the extra."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise MissingDependencyError(package or module.split(".")[0], extra, purpose) from exc


def format_validation_error(
    exc: ValidationError, unknown: Callable[[str], str | None] | None = None
) -> str:
    """A pydantic validation error as one line: ``field.path: message`` per problem, ``; ``-joined.

    An unknown field (``extra="forbid"``) reads "unknown field; remove it or check its spelling",
    unless ``unknown`` (given the field's dotted path) returns the whole message for it, e.g. where
    a moved key went; pydantic's "Value error, " prefix of a validator's message is dropped.
    """
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            known = unknown(loc) if unknown is not None else None
            if known is not None:
                parts.append(known)
                continue
            msg = "unknown field; remove it or check its spelling"
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)
