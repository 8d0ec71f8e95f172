"""Local copies of benchmark data: ``${VAR:-default}`` paths, held-out parts, and one clear error.

Recipes (the bundled ``paper-train`` curation config, the ``paper-main`` evaluation preset) point
every benchmark at a local copy through a path such as
``${CONDUCTOR_DATA_MATH:-${CONDUCTOR_DATA_DIR:-~/.cache/conductor/data}/math}``: set
``CONDUCTOR_DATA_<NAME>`` for one source or ``CONDUCTOR_DATA_DIR`` for the folder that holds them
all. A local copy that is missing falls back to the Hugging Face hub when the hub is reachable;
when it is not, :func:`check_local_copies` fails with ONE line naming every missing source.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from conductor_core.tasks.sources._io import BenchmarkSourceError, hub_reachable, stable_id

ENV_PREFIX = "CONDUCTOR_DATA_"
"""``CONDUCTOR_DATA_<NAME>`` points at the local copy of the source called ``name``."""

DATA_DIR_ENV = "CONDUCTOR_DATA_DIR"
"""The folder holding one local copy per source (``<dir>/<name>``)."""

DEFAULT_DATA_DIR = "~/.cache/conductor/data"

_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^${}]*))?\}")


def env_var_for(name: str) -> str:
    """The environment variable that overrides the local copy of source ``name``."""
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").upper()


def expand_env(text: str) -> str:
    """Expand ``${VAR}`` and ``${VAR:-default}`` (nestable; an unset or empty VAR takes the
    default, or the empty string)."""
    for _ in range(16):
        new = _VAR.sub(lambda m: os.environ.get(m.group(1)) or (m.group(2) or ""), text)
        if new == text:
            break
        text = new
    return text


def default_path(name: str) -> str:
    """The path a recipe uses for source ``name`` (before expansion)."""
    return f"${{{env_var_for(name)}:-${{{DATA_DIR_ENV}:-{DEFAULT_DATA_DIR}}}/{name}}}"


def check_local_copies(
    sources: Sequence[tuple[str, str | None]], *, what: str = "recipe"
) -> set[str]:
    """Check the local copies of ``(name, path)`` benchmark sources (a None path means the hub).

    Returns the names whose local copy is missing but the hub is reachable (the caller loads
    those from the hub). With the hub unreachable, raises :class:`BenchmarkSourceError` with one
    line naming every missing source, its path and the variable that points at it.
    """
    missing = list(
        dict.fromkeys((n, p) for n, p in sources if p and not Path(p).expanduser().exists())
    )
    if not missing or hub_reachable():
        return {n for n, _ in missing}
    listed = "; ".join(f"{n} ({p}; set {env_var_for(n)})" for n, p in missing)
    raise BenchmarkSourceError(
        f"{what}: no local copy of {len(missing)} source(s) and the Hugging Face hub is "
        f"unreachable: {listed}. Download each dataset in its published schema (JSONL/JSON/"
        f"Parquet) and point at it with those variables, or put them all under one folder as "
        f"<folder>/<name> and set {DATA_DIR_ENV}=<folder>"
    )


HELDOUT_FRACTION = 0.1
"""Default share of a benchmark kept as its held-out test part (``part: heldout``)."""


def in_part(problem_id: str, part: str | None, fraction: float | None) -> bool:
    """Whether a problem belongs to ``part`` (``train`` or ``heldout``; None: every problem).

    The partition is a hash of the id, so it is the same on every machine and for every
    subset of the data: a problem is held out when sha256(id) falls in the first ``fraction``.
    """
    if part is None:
        return True
    frac = HELDOUT_FRACTION if fraction is None else float(fraction)
    if not 0.0 < frac < 1.0:
        raise BenchmarkSourceError(f"option 'heldout_fraction' must be in (0, 1), got {frac}")
    held = int(stable_id("heldout", problem_id, n=8), 16) / 16**8 < frac
    key = str(part).lower()
    if key not in ("train", "heldout"):
        raise BenchmarkSourceError(f"option 'part' must be 'train' or 'heldout', got {part!r}")
    return held if key == "heldout" else not held
