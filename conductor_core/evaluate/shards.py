"""Deterministic shard planning by problem id, stable across runs and machines."""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Sequence
from typing import TypeVar

from conductor_core.errors import ConductorError

T = TypeVar("T")

_SPEC = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


def parse_shard_spec(spec: str) -> tuple[int, int]:
    """Parse ``"i/n"`` (0-based shard ``i`` of ``n``)."""
    m = _SPEC.match(spec)
    if not m:
        raise ConductorError(f"--shard must look like i/n (e.g. 0/4), got {spec!r}")
    index, count = int(m.group(1)), int(m.group(2))
    if count < 1 or not 0 <= index < count:
        raise ConductorError(f"--shard {spec}: need 0 <= i < n and n >= 1")
    return index, count


def shard_index(problem_id: str, count: int) -> int:
    """The shard (of ``count``) that ``problem_id`` belongs to: sha256 of the id, modulo count."""
    digest = hashlib.sha256(problem_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def shard_by_count(items: Sequence[T], index: int, count: int, key=lambda p: p.id) -> list[T]:
    """Items of shard ``index`` of ``count``, hash-assigned by id (adding problems moves none)."""
    chosen = [it for it in items if shard_index(key(it), count) == index]
    return sorted(chosen, key=key)


def shard_by_size(items: Sequence[T], index: int, size: int, key=lambda p: p.id) -> list[T]:
    """Shard ``index`` of consecutive chunks of ``size`` items in id order (equal-sized shards)."""
    if size < 1:
        raise ConductorError("shard size must be at least 1")
    ordered = sorted(items, key=key)
    count = max(1, math.ceil(len(ordered) / size))
    if not 0 <= index < count:
        raise ConductorError(f"shard {index} does not exist: {len(ordered)} items make {count}")
    return ordered[index * size : (index + 1) * size]
