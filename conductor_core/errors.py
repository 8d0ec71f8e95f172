"""Errors a user can cause, each carrying one clear message naming the field and the fix."""

from __future__ import annotations


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
