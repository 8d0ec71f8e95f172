"""Reading benchmark rows from the Hugging Face hub or from local files in the same schema.

Rows are plain ``dict`` objects keyed by the dataset's published column names. Local sources may be
one file or a directory of files (``.jsonl``, ``.json``, ``.parquet``, optionally ``.gz``
compressed for JSON); in a directory, when ``split`` is given and some file names contain it, only
those files are read.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from conductor_core.errors import ConductorError

_LOCAL_SUFFIXES = (".jsonl", ".json", ".parquet", ".jsonl.gz", ".json.gz")


class BenchmarkSourceError(ConductorError):
    """A benchmark could not be read: missing source, unreadable file or wrong columns."""


@dataclass(frozen=True)
class HubRef:
    """Where a benchmark lives on the Hugging Face hub.

    ``split=None`` loads every split (a ``DatasetDict``) and lets ``pick_split`` choose one;
    ``data_files`` loads raw files of the repository through the ``json`` builder instead of the
    repository's own configuration (used for LiveCodeBench, whose hub loader is a script).
    ``revision`` (a commit hash pins it; a branch or tag moves) is what is read of the
    repository; ``None`` reads its default branch as it is now.
    """

    repo: str
    config: str | None = None
    split: str | None = "test"
    data_files: tuple[str, ...] = ()
    gated: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    revision: str | None = None


def hub_override(default: HubRef, options: dict[str, Any]) -> HubRef:
    """``default`` with the ``hf_id`` / ``hf_config`` / ``hf_revision`` options (popped from
    ``options``) applied."""
    repo = options.pop("hf_id", None)
    config = options.pop("hf_config", default.config)
    revision = options.pop("hf_revision", None) or default.revision
    if repo is None and config == default.config and revision == default.revision:
        return default
    return replace(
        default,
        repo=repo or default.repo,
        config=config,
        revision=str(revision) if revision is not None else None,
    )


def stable_id(*parts: str, n: int = 12) -> str:
    """A short stable hash of ``parts`` (used as id for datasets that have none)."""
    h = hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()
    return h[:n]


def column(row: dict[str, Any], *names: str, default: Any = None) -> Any:
    """The first present, non-null column of ``names`` in ``row`` (else ``default``)."""
    for name in names:
        if name in row and row[name] is not None:
            return row[name]
    return default


def check_columns(
    rows: Sequence[dict[str, Any]],
    bench: str,
    where: str,
    required: Sequence[str | tuple[str, ...]],
) -> None:
    """Raise one clear error when the first row lacks a required column.

    Each entry of ``required`` is a column name or a tuple of accepted alternatives.
    """
    if not rows:
        raise BenchmarkSourceError(f"benchmark '{bench}': {where} has no rows")
    first = rows[0]
    expected = ", ".join(r if isinstance(r, str) else "/".join(r) for r in required)
    for req in required:
        names = (req,) if isinstance(req, str) else req
        if not any(n in first for n in names):
            raise BenchmarkSourceError(
                f"benchmark '{bench}': {where} lacks column '{'/'.join(names)}' "
                f"(expected columns: {expected}; found: {', '.join(sorted(first)) or 'none'})"
            )


def read_local(path: str | Path, bench: str, split: str | None = None) -> list[dict[str, Any]]:
    """Read all rows of a local file or directory in a benchmark's published schema."""
    p = Path(path).expanduser()
    if not p.exists():
        raise BenchmarkSourceError(
            f"benchmark '{bench}': --path {p} does not exist; pass a JSONL, JSON or Parquet file "
            "(or a directory of them) in the dataset's published schema"
        )
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and _is_data_file(f))
        if not files:
            raise BenchmarkSourceError(
                f"benchmark '{bench}': directory {p} holds no .jsonl/.json/.parquet files"
            )
        if split:
            chosen = [f for f in files if split.lower() in f.name.lower()]
            files = chosen or files
    else:
        files = [p]
    rows: list[dict[str, Any]] = []
    for f in files:
        rows.extend(_read_file(f, bench, split))
    return rows


def _is_data_file(f: Path) -> bool:
    return f.name.lower().endswith(_LOCAL_SUFFIXES)


def _read_file(f: Path, bench: str, split: str | None) -> list[dict[str, Any]]:
    name = f.name.lower()
    try:
        if name.endswith(".parquet"):
            import pyarrow.parquet as pq

            return pq.read_table(f).to_pylist()
        opener = gzip.open if name.endswith(".gz") else open
        with opener(f, "rt", encoding="utf-8") as fh:
            if name.endswith((".jsonl", ".jsonl.gz")):
                return [json.loads(line) for line in fh if line.strip()]
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise BenchmarkSourceError(f"benchmark '{bench}': cannot read {f}: {exc}") from exc
    except ImportError as exc:
        raise BenchmarkSourceError(
            f"benchmark '{bench}': reading {f} needs pyarrow: pip install 'conductor-core[data]'"
        ) from exc
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        if split and isinstance(data.get(split), list):
            return data[split]
        for key in ("rows", "data", "test", "train"):
            if isinstance(data.get(key), list):
                return data[key]
    raise BenchmarkSourceError(
        f"benchmark '{bench}': {f} is JSON but neither a list of rows nor {{split: [rows]}}"
    )


def hub_reachable(timeout_s: float = 3.0) -> bool:
    """Whether the Hugging Face hub can be contacted (or offline mode serves from the cache)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes") or os.environ.get(
        "HF_DATASETS_OFFLINE", ""
    ).lower() in ("1", "true", "yes"):
        return True  # datasets serves from its cache, or fails fast
    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname
    try:
        with socket.create_connection((host or "huggingface.co", 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def read_hub(ref: HubRef, bench: str, split: str | None, hint: str) -> list[dict[str, Any]]:
    """Read rows from the hub with ``datasets``; any failure becomes one clear message.

    ``hint`` names the expected columns for the ``--path`` fallback.
    """
    how = f"download it elsewhere and pass --path FILE_OR_DIR (JSONL/JSON/Parquet with {hint})"
    where = (
        ref.repo
        + (f"@{ref.revision}" if ref.revision else "")
        + (f" [{ref.config}]" if ref.config else "")
    )
    if not hub_reachable():
        raise BenchmarkSourceError(
            f"benchmark '{bench}': no local path given and the Hugging Face hub is unreachable "
            f"(needed {where}); {how}"
        )
    try:
        import datasets
    except ImportError as exc:
        raise BenchmarkSourceError(
            f"benchmark '{bench}': reading {where} from the hub needs the 'datasets' package "
            f"(pip install 'conductor-core[train]'); or {how}"
        ) from exc
    want = split or ref.split
    try:
        if ref.data_files:
            # Raw files name their revision in the path (hf://datasets/REPO@REVISION/FILE).
            at = f"@{ref.revision}" if ref.revision else ""
            files = [f"hf://datasets/{ref.repo}{at}/{name}" for name in ref.data_files]
            ds = datasets.load_dataset("json", data_files=files, split="train")
        elif want is None:
            dd = datasets.load_dataset(ref.repo, ref.config, revision=ref.revision)
            ds = dd[pick_latest_split(list(dd.keys()))]
        else:
            ds = datasets.load_dataset(ref.repo, ref.config, split=want, revision=ref.revision)
        return ds.to_list()
    except Exception as exc:  # datasets raises many types; report one line
        gated = " (a gated dataset: accept its terms and set HF_TOKEN)" if ref.gated else ""
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise BenchmarkSourceError(
            f"benchmark '{bench}': could not load {where} split '{want}' from the hub{gated}: "
            f"{first}; {how}"
        ) from exc


def pick_latest_split(names: list[str]) -> str:
    """The highest version-like split name (``v0.1.4`` > ``v0.1.2``), else the last name."""

    def key(n: str) -> tuple[int, ...]:
        digits = [int(x) for x in "".join(c if c.isdigit() else " " for c in n).split()]
        return tuple(digits)

    return max(names, key=key) if names else "train"


def load_rows(
    bench: str,
    *,
    path: str | None,
    hub: HubRef,
    split: str | None,
    required: Sequence[str | tuple[str, ...]],
) -> list[dict[str, Any]]:
    """Rows of a benchmark from ``path`` or else the hub, with the required columns checked."""
    hint = "columns " + ", ".join(r if isinstance(r, str) else "/".join(r) for r in required)
    if path:
        rows = read_local(path, bench, split)
        where = str(path)
    else:
        rows = read_hub(hub, bench, split, hint)
        where = hub.repo
    check_columns(rows, bench, where, required)
    return rows
