"""Text helpers for curation: display normalisation, comparison keys, word n-grams, MinHash.

Two kinds of normalisation:

* :func:`clean_text` keeps meaning and layout (it is what the curated data stores): Unicode NFKC,
  zero-width spaces removed, newlines unified, trailing spaces dropped, runs of blank lines
  collapsed, surrounding whitespace stripped; in prose (not code) runs of spaces/tabs become one
  space. Superscript digits are rewritten as ``^n`` before NFKC so that ``x²`` does not silently
  become ``x2``.
* :func:`comparison_words` is only for matching (dedup, decontamination): case-folded words with
  punctuation removed.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence

_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁽⁾ⁿ", "0123456789+-()n")
_SUPERSCRIPT_RUN = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁽⁾ⁿ]+")
_BLANK_RUNS = re.compile(r"\n{3,}")
_INLINE_SPACE = re.compile(r"[ \t\f\v\u00a0]+")
_WORD = re.compile(r"\w+", re.UNICODE)
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u2060\ufeff"))  # zero-width space, joiner, BOM


def _superscript(match: re.Match[str]) -> str:
    text = match.group(0).translate(_SUPERSCRIPTS)
    return f"^{text}" if len(text) == 1 else f"^({text})"


def clean_text(text: str, *, keep_indentation: bool = False) -> str:
    """Normalise text for storage (see the module docstring).

    ``keep_indentation`` (for code) keeps leading spaces and tabs of each line untouched.
    """
    text = _SUPERSCRIPT_RUN.sub(_superscript, text)
    text = unicodedata.normalize("NFKC", text).translate(_INVISIBLE)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = []
    for line in text.split("\n"):
        line = line.rstrip()
        if not keep_indentation:
            line = _INLINE_SPACE.sub(" ", line).strip()
        lines.append(line)
    text = "\n".join(lines)
    text = _BLANK_RUNS.sub("\n\n", text)
    return text.strip()


def comparison_words(text: str) -> list[str]:
    """Case-folded words of NFKC text, punctuation removed (for matching only)."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def comparison_key(text: str) -> str:
    """A key equal for texts that differ only in case, punctuation or whitespace."""
    return " ".join(comparison_words(text))


def word_ngrams(words: Sequence[str], n: int) -> set[str]:
    """The set of word n-grams (joined by spaces); empty when there are fewer than ``n`` words."""
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def shingles(words: Sequence[str], size: int) -> set[str]:
    """Word shingles for near-duplicate detection; a short text is one shingle of all its words."""
    if len(words) <= size:
        return {" ".join(words)} if words else set()
    return word_ngrams(words, size)


def jaccard(a: set[str], b: set[str]) -> float:
    """Jaccard similarity of two sets (1.0 for two empty sets)."""
    if not a and not b:
        return 1.0
    return len(a & b) / len(a | b)


_PRIME = (1 << 31) - 1


class MinHasher:
    """MinHash signatures with ``num_perm`` universal hash functions (seeded, reproducible).

    Uses numpy (a pandas dependency, imported lazily) to hash all shingles of a text at once.
    """

    def __init__(self, num_perm: int = 128, seed: int = 1) -> None:
        import numpy as np

        rng = np.random.default_rng(seed)
        self.num_perm = num_perm
        self._a = rng.integers(1, _PRIME, size=(num_perm, 1), dtype=np.uint64)
        self._b = rng.integers(0, _PRIME, size=(num_perm, 1), dtype=np.uint64)

    def signature(self, items: set[str]) -> tuple[int, ...]:
        """The signature of a set of shingles (all ``_PRIME`` for the empty set)."""
        import numpy as np

        if not items:
            return (_PRIME,) * self.num_perm
        base = np.fromiter(
            (_hash32(s) for s in sorted(items)), dtype=np.uint64, count=len(items)
        ).reshape(1, -1)
        values = (self._a * base + self._b) % np.uint64(_PRIME)
        return tuple(int(v) for v in values.min(axis=1))


def _hash32(text: str) -> int:
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % _PRIME


def lsh_bands(num_perm: int, threshold: float) -> tuple[int, int]:
    """Bands and rows per band so that pairs well below ``threshold`` still become candidates.

    Candidates are verified with the exact Jaccard similarity, so the banding errs on recall:
    the LSH threshold ``(1/bands) ** (1/rows)`` is kept at most ``0.75 * threshold``.
    """
    best = (num_perm, 1)
    for rows in range(1, num_perm + 1):
        bands = num_perm // rows
        if bands < 1:
            break
        if (1.0 / bands) ** (1.0 / rows) <= 0.75 * threshold:
            best = (bands, rows)
    return best
