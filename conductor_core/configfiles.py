"""Config files: reading a YAML file with one clear error, ``--set KEY=VALUE`` overrides as a
nested dict, and merging layered settings (profile, file, command line), shared by the pool,
training, curation and evaluation configs and the pipelines' parameters."""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError


def read_yaml_file(path: str | Path, missing: str) -> Any:
    """The parsed YAML of the file at ``path``.

    Raises :class:`ConfigError` with the message ``missing`` when there is no such file, and one
    naming the file when it is not valid YAML.
    """
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(missing)
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base`` (dicts merge, the rest replaces)."""
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_sets(items: Iterable[str]) -> dict[str, Any]:
    """``("a.b=3", "c=x")`` -> ``{"a": {"b": 3}, "c": "x"}``: ``--set`` options as overrides
    (values parsed as YAML scalars; an empty value is None). Raises :class:`ConfigError` for an
    item without ``=`` or a key that conflicts with another."""
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set: expected KEY=VALUE (e.g. steps=20), got '{item}'")
        value = yaml.safe_load(raw) if raw.strip() else None
        node = out
        parts = key.strip().split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"--set: '{key}' conflicts with another --set")
        node[parts[-1]] = value
    return out
