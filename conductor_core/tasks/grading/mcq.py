"""Multiple-choice grading: a robust choice-letter extractor.

Evidence is read in tiers, strongest first; the first tier that finds anything decides:

1. boxed letters (``\\boxed{C}``, ``\\boxed{\\text{(C)}}``);
2. explicit assertions ("Answer: C", "the correct option is (C)", "I choose **C**"); when a
   "final answer" assertion exists, only those count;
3. a line that is only a letter ("C", "(C)", "**C**", "C)", "C.") or starts with one followed by
   the option text ("C) Paris"): the last line first, then the first line;
4. the option text itself (the whole answer, the stated answer or the last line equals a choice).

Two different letters asserted within the deciding tier is ``ambiguous`` and graded wrong.
"""

from __future__ import annotations

import re

from conductor_core.tasks.answers import answer_is, find_boxed_all, strip_markup

LETTERS = "ABCDEFGHIJ"

_PHRASE = (
    r"(?i:final\s+answer|(?:correct|best|right)\s+(?:answer|option|choice)|answer)"
    r"(?i:\s*(?:is|would\s+be|will\s+be|should\s+be|=|:)\s*(?:option|choice|letter)?\s*[:\-]?)"
)
_CHOOSE = r"(?i:i\s+(?:choose|pick|select|would\s+choose|will\s+go\s+with)|my\s+choice\s+is)\s*:?"
_LETTER_TOKEN = r"[\s\*\(\[_]*(?P<L>[A-J])(?![A-Za-z0-9])[\)\]\*_]*"
_MORE = re.compile(r"[\s\*\)\]_]*(?i:or|and|/|,|&)\s*[\*\(\[_]*(?P<L>[A-J])(?![A-Za-z0-9])")
_ASSERT = re.compile(f"(?:{_PHRASE}|{_CHOOSE})" + _LETTER_TOKEN)
_LINE_ONLY = re.compile(r"^[\s\*_#>\-]*(?i:option\s+)?[\(\[]?(?P<L>[A-J])[\)\]]?[\.\:\*_\s]*$")
_LINE_LEAD = re.compile(r"^[\s\*_]*[\(\[]?(?P<L>[A-J])[\)\]\.:][\*_]*\s+(?P<text>.+)$")
_TEXT_WRAP = re.compile(r"\\(?:text|mathrm|textbf|mbox)\{([^{}]*)\}")


def _norm_text(s: str) -> str:
    s = strip_markup(s).lower()
    s = re.sub(r"[^\w\s\.\+\-]", " ", s)
    return re.sub(r"\s+", " ", s).strip(" .")


def _letters_in_assertion(text: str, start: int, first: str) -> list[str]:
    found = [first]
    pos = start
    while True:
        m = _MORE.match(text, pos)
        if not m:
            return found
        found.append(m.group("L"))
        pos = m.end()


def _unique(letters: list[str]) -> list[str]:
    return list(dict.fromkeys(letters))


def _boxed_letters(answer: str, valid: str, choices: list[str]) -> list[str]:
    out: list[str] = []
    for box in find_boxed_all(answer):
        inner = _TEXT_WRAP.sub(r"\1", box)
        inner = strip_markup(inner).strip("() []")
        letters = re.findall(r"(?<![A-Za-z])([A-J])(?![A-Za-z])", inner)
        if letters and re.fullmatch(r"[\sA-J\(\),/&]*(?:(?:and|or)[\sA-J\(\),]*)*", inner):
            out += [x for x in letters if x in valid]
            continue
        by_text = _match_choice_text(inner, choices, valid)
        if by_text:
            out.append(by_text)
    return out


def _match_choice_text(text: str, choices: list[str], valid: str) -> str | None:
    t = _norm_text(text)
    if not t:
        return None
    hits = [valid[i] for i, c in enumerate(choices[: len(valid)]) if _norm_text(c) == t]
    return hits[0] if len(hits) == 1 else None


def extract_choice(
    answer: str, *, choices: list[str] | None = None, n_choices: int | None = None
) -> tuple[str | None, str]:
    """Extract the asserted choice letter from ``answer``.

    Returns ``(letter, how)``; ``letter`` is ``None`` with ``how`` starting with ``ambiguous``
    when two different letters are asserted, or ``no choice found`` when nothing is found.
    """
    choices = list(choices or [])
    n = n_choices or len(choices) or 4
    valid = LETTERS[: max(1, min(n, len(LETTERS)))]
    text = answer or ""

    def decide(letters: list[str], how: str) -> tuple[str | None, str] | None:
        uniq = [x for x in _unique(letters) if x in valid]
        if not uniq:
            return None
        if len(uniq) > 1:
            return None, f"ambiguous: {', '.join(uniq)} asserted ({how})"
        return uniq[0], how

    # 1. boxed
    got = decide(_boxed_letters(text, valid, choices), "boxed")
    if got:
        return got
    # 2. explicit assertions
    asserted: list[tuple[bool, list[str]]] = []
    for m in _ASSERT.finditer(text):
        is_final = "final" in m.group(0).lower()
        asserted.append((is_final, _letters_in_assertion(text, m.end(), m.group("L"))))
    if any(final for final, _ in asserted):
        asserted = [a for a in asserted if a[0]]
    got = decide([x for _, ls in asserted for x in ls if x in valid], "stated answer")
    if got:
        return got
    # 3. a line that is the letter (last line, then first line)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    for ln in [lines[-1], lines[0]] if lines else []:
        m = _LINE_ONLY.match(ln)
        if m and m.group("L") in valid:
            return m.group("L"), "letter line"
        m = _LINE_LEAD.match(ln)
        if m and m.group("L") in valid:
            idx = valid.index(m.group("L"))
            if not choices or _norm_text(m.group("text")).startswith(_norm_text(choices[idx])[:20]):
                return m.group("L"), "letter line"
    # 4. option text
    if choices:
        for candidate in (text, answer_is(text) or "", lines[-1] if lines else ""):
            letter = _match_choice_text(candidate, choices, valid)
            if letter:
                return letter, "option text"
    return None, "no choice found"


def grade_mcq(
    reference: str, answer: str, *, choices: list[str] | None = None
) -> tuple[bool, str, str | None]:
    """Grade a multiple-choice answer against a reference letter (or the correct option text)."""
    ref = reference.strip().upper()
    n = len(choices) if choices else None
    if ref not in LETTERS and choices:
        by_text = _match_choice_text(reference, choices, LETTERS[: len(choices)])
        ref = by_text or ref
    if n is None and len(ref) == 1 and ref in LETTERS:
        n = max(4, LETTERS.index(ref) + 1)
    letter, how = extract_choice(answer, choices=choices, n_choices=n)
    if letter is None:
        reason = "ambiguous" if how.startswith("ambiguous") else how
        return False, reason if reason == how else f"{reason} ({how})", None
    if letter == ref:
        return True, f"correct choice {letter} ({how})", letter
    return False, f"chose {letter}, reference {ref} ({how})", letter
