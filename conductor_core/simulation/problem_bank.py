"""The problems simulated workers know, looked up by their question text.

:class:`ProblemBank` holds problems; :func:`bank_for` is the bank of the files a simulated
worker's config names (``simulation.problems``: each file read once per (path, modification time,
size) and the bank of a list of files built once, so the simulated workers of a pool share one);
:func:`known_problems` and :func:`known_problem` say what a pool's simulated workers know.
"""

from __future__ import annotations

import hashlib
import string
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path

from conductor_core.errors import ConfigError
from conductor_core.tasks.problem import Problem, read_problems
from conductor_core.workers.bundled import bundled_problems_path, bundled_train_problems_path
from conductor_core.workers.config import PoolConfig, SimulationProfile

__all__ = [
    "ProblemBank",
    "bank_for",
    "clear_bank_cache",
    "known_problem",
    "known_problems",
    "normalize_text",
]


def normalize_text(text: str) -> str:
    """Collapse runs of whitespace to one space and strip the ends."""
    return " ".join(text.split())


def _loose_key(text: str) -> str:
    """Hash of a looser normalisation (case and punctuation ignored), used as a fallback key."""
    table = str.maketrans("", "", string.punctuation)
    loose = " ".join(text.casefold().translate(table).split())
    return hashlib.sha256(loose.encode("utf-8")).hexdigest()


class ProblemBank:
    """Known problems, looked up by their question text.

    Lookup is an exact match after whitespace normalisation, falling back to a hash of a looser
    normalisation (case and punctuation ignored) so that light reformatting still matches.
    """

    def __init__(self, problems: list[Problem]) -> None:
        self._exact: dict[str, Problem] = {}
        self._loose: dict[str, Problem] = {}
        self._by_domain: dict[str, list[Problem]] = {}
        for p in problems:
            self._exact.setdefault(normalize_text(p.question), p)
            self._loose.setdefault(_loose_key(p.question), p)
            self._by_domain.setdefault(str(p.domain), []).append(p)
        self._problems = list(problems)

    @classmethod
    def from_file(cls, path: str | Path) -> ProblemBank:
        """Build a bank from a JSONL or Parquet problem file."""
        return cls(read_problems(path))

    @classmethod
    def bundled(cls) -> ProblemBank:
        """The bank of bundled demo problems."""
        return cls.from_file(bundled_problems_path())

    def __len__(self) -> int:
        return len(self._problems)

    def __iter__(self) -> Iterator[Problem]:
        return iter(self._problems)

    def get(self, question: str) -> Problem | None:
        """The problem whose question matches ``question``, or None."""
        found = self._exact.get(normalize_text(question))
        if found is not None:
            return found
        return self._loose.get(_loose_key(question))

    def references(self, domain: str) -> list[str]:
        """Distinct reference answers of the bank's problems of ``domain`` (for distractors)."""
        seen: dict[str, None] = {}
        for p in self._by_domain.get(domain, []):
            if p.reference:
                seen.setdefault(p.reference, None)
        return list(seen)


# -- the banks of simulated workers ---------------------------------------------------------------

_SPECIAL_PROBLEMS = {
    "bundled": bundled_problems_path,
    "bundled-train": bundled_train_problems_path,
}
_MAX_CACHED = 64
_cache_lock = threading.Lock()
_file_cache: OrderedDict[tuple[str, int, int], list[Problem]] = OrderedDict()
_bank_cache: OrderedDict[tuple[tuple[str, int, int], ...], ProblemBank] = OrderedDict()


def _problems_file(entry: str | Path) -> Path:
    """The file an entry of ``simulation.problems`` names (a special name or a path)."""
    special = _SPECIAL_PROBLEMS.get(str(entry))
    path = special() if special is not None else Path(entry).expanduser()
    path = path.resolve()
    if not path.is_file():
        raise ConfigError(
            f"simulation.problems: problems file not found: {path} "
            "(give a .jsonl or .parquet file, or 'bundled' / 'bundled-train')"
        )
    return path


def _file_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path), st.st_mtime_ns, st.st_size)


def _cached(cache: OrderedDict, key, make):
    with _cache_lock:
        if key in cache:
            cache.move_to_end(key)
            return cache[key]
    value = make()
    with _cache_lock:
        value = cache.setdefault(key, value)
        cache.move_to_end(key)
        while len(cache) > _MAX_CACHED:
            cache.popitem(last=False)
    return value


def bank_for(paths: Sequence[str | Path]) -> ProblemBank:
    """The bank of the problems in the files ``paths`` (in order; the first of two problems with
    the same question wins).

    Entries are those of :attr:`SimulationProfile.problems`: ``bundled``, ``bundled-train`` or a
    path (a relative one against the working directory). Each file is read once per (resolved
    path, modification time, size) and the bank of a list of files is built once, so the
    simulated workers of a pool share one bank. Raises :class:`ConfigError` for a missing file.
    """
    keys = tuple(_file_key(_problems_file(p)) for p in paths)

    def build() -> ProblemBank:
        problems: list[Problem] = []
        for key in keys:
            problems.extend(_cached(_file_cache, key, lambda k=key: read_problems(k[0])))
        return ProblemBank(problems)

    return _cached(_bank_cache, keys, build)


def clear_bank_cache() -> None:
    """Forget the files and banks :func:`bank_for` has read."""
    with _cache_lock:
        _file_cache.clear()
        _bank_cache.clear()


def _simulated_problems(config: PoolConfig) -> list[list[str]]:
    return [
        (w.simulation or SimulationProfile()).problems
        for w in config.workers
        if w.provider == "simulated"
    ]


def known_problems(config: PoolConfig) -> ProblemBank | None:
    """The bank of every problem the pool's simulated workers know (None: no simulated worker)."""
    lists = _simulated_problems(config)
    if not lists:
        return None
    return bank_for(list(dict.fromkeys(p for problems in lists for p in problems)))


def known_problem(config: PoolConfig, question: str) -> Problem | None:
    """The problem ``question`` is, when a simulated worker of the pool knows it, else None."""
    for problems in _simulated_problems(config):
        found = bank_for(problems).get(question)
        if found is not None:
            return found
    return None
