"""Multiple-choice grading: a robust choice-letter extractor.

The answer is first normalised (NFKC: full-width ``（Ｂ）`` and ``：`` become ``(B)`` and ``:``).
Evidence is then read in tiers, strongest first; the first tier that finds anything decides:

1. boxed letters (``\\boxed{C}``, ``\\boxed{\\text{(C)}}``, ``\\boxed{\\text{(B) } 42}``) or a boxed
   option text;
2. explicit assertions ("Answer: C", "the correct option is (C)", "I'd go with option C",
   "**Answer:** **Option C**", a "## Answer" heading over the letter, "答案是（C）",
   "la bonne réponse est la C"); when a "final answer" assertion exists, only those count. A
   later hedge ("..., but D could also be correct") makes the answer ambiguous;
3. a letter said to be correct ("(C) is correct", "B is the right answer");
4. the last line as a letter ("C", "(C)", "**C**", "C.", "Option C"), a letter leading the option
   text ("C) Rome", "Option D: Mitochondria ...") or a reason ("B, because ...");
5. a conclusion in the last line ("Therefore C.", "Neither A nor B; it's D.", "That leaves C)"):
   letters that are negated, eliminated or only compared ("between B and C") do not count;
   An answer that walks through the options line by line ("A) Berlin - no") does not conclude
   with its last listed option: 4 and 5 skip such a line unless its letter leads a line twice;
6. the first line as in 4, then the one listed option marked right ("C) Rome: yes");
7. the option text itself (the whole answer, the stated answer or the last line equals a choice,
   or exactly one choice is named in the stated answer or the last sentence: "The largest is 79").

Lower-case letters count only where they cannot be a word ("answer: c", "(c)"); "A" and "I" used
as an article or a pronoun ("A ripe banana", "I think") and letters inside words never count.
Two different letters asserted within the deciding tier is ``ambiguous`` and graded wrong.
"""

from __future__ import annotations

import re
import unicodedata

from conductor_core.tasks.answers import answer_is, find_boxed_all, strip_markup

LETTERS = "ABCDEFGHIJ"

# A letter token: an upper-case letter that is not part of a word, or a lower-case one that is
# bracketed or ends the clause ("answer: c", "(c)") so that "the answer is a city" does not count.
_LT = (
    r"(?:(?P<L>[A-J])(?![A-Za-z0-9'’])"
    r"|(?P<l>[a-j])(?=[\)\]\*]|[.!;,:]?[ \t]*(?:\n|$)|[.!;,:]\s))"
)
_LETTER_TOKEN = r"[\s\*\(\[_]*" + _LT + r"[\)\]\*_]*"
_ARTICLE = r"(?:\s+(?:the|la|le|el|die|der)\s+|\s*l')?"
_PHRASE = (
    r"(?i:final\s+answer"
    r"|(?:correct|best|right|most\s+likely|most\s+appropriate)\s+(?:answer|option|choice|response)(?:\s+here)?"
    r"|answer"
    r"|(?:la\s+)?(?:bonne\s+)?réponse(?:\s+correcte)?|respuesta(?:\s+correcta)?"
    r"|(?:richtige\s+)?antwort|正确答案|正確答案|答案|正解|答え|정답)"
    r"(?i:[\s\*_]*(?:is|would\s+be|will\s+be|should\s+be|must\s+be|has\s+to\s+be|seems\s+to\s+be"
    r"|appears\s+to\s+be|=|:|—|–|-|\||est|es|ist|是|为|為|は|는|은)"
    r"\s*(?:option|choice|letter)?\s*[:\-]?" + _ARTICLE + r"(?:[\s\*_]*(?:option|choice)\b)?)"
)
_CHOOSE = (
    r"(?i:(?:\bi\s+(?:choose|pick|select|would\s+(?:choose|pick|select|go\s+with)|will\s+go\s+with)"
    r"|\bi['’](?:d|ll)\s+(?:choose|pick|select|go\s+with|say)|\bi\s+would\s+say|\bgoing\s+with"
    r"|\bmy\s+(?:choice|pick)\s+is)"
    r"\s*:?(?:[\s\*_]*(?:option|choice|letter)\b)?)"
)
_HEADING = r"(?im:^[ \t>#\*_]*(?:final\s+)?answer[ \t\*_]*:?[ \t\*_]*\n)"
_ASSERT = re.compile(f"(?:{_PHRASE}|{_CHOOSE}|{_HEADING})" + _LETTER_TOKEN)
_MORE = re.compile(r"[\s\*\)\]_]*(?i:or|and|/|,|&)\s*[\*\(\[_]*" + _LT)
_HEDGE = re.compile(
    r"(?<![A-Za-z0-9])(?:(?i:option|choice)\s+)?[\(\[]?\**(?P<L>[A-J])\**[\)\]]?\s+"
    r"(?i:(?:could|might|may)\s+(?:also\s+)?be\s+(?:correct|right|valid|true|the\s+answer)"
    r"|is\s+also\s+(?:correct|right|plausible|possible|valid))"
    r"|(?i:\bor\s+(?:possibly|maybe|perhaps)\s+(?:option\s+)?)[\(\[]?(?P<M>[A-J])(?![A-Za-z0-9])"
)
_IS_CORRECT = re.compile(
    r"(?<![A-Za-z0-9'’])(?:(?i:option|choice)\s+)?[\(\[]?\**(?P<L>[A-J])\**[\)\]]?\**\s+"
    r"(?i:(?:(?:is|seems(?:\s+to\s+be)?|would\s+be|as)\s+)?(?:the\s+)?(?:correct|right|best)"
    r"(?:\s+(?:answer|option|choice))?|is\s+(?:the|my)\s+(?:final\s+)?answer)\b"
    r"(?!\s+(?i:only|if|when|for\s+\w+\s+but))"
)
_LINE_ONLY = re.compile(
    r"^[\s\*_#>\-]*(?i:option\s+|choice\s+)?[\(\[]?\**(?P<L>[A-J])\**[\)\]]?[\.\:\*_\s]*$"
)
_LINE_LEAD = re.compile(
    r"^[\s\*_]*(?:(?i:option|choice)\s+)?[\(\[]?(?P<L>[A-J])[\)\]\.:][\*_]*\s+(?P<text>.+)$"
)
_LINE_REASON = re.compile(
    r"^[\s\*_]*(?:(?i:option|choice)\s+)?[\(\[]?\**(?P<L>[A-J])\**[\)\]]?\s*[,:\-—–]?\s*"
    r"(?i:because|since|as)\b"
)
_LEAD_ANY = re.compile(r"^[\s\*_\-]*(?:(?i:option|choice)\s+)?[\(\[]?\**(?P<L>[A-J])\**[\)\]\.:]")
_POSITIVE = re.compile(r"(?i:\b(?:yes|correct|right|true)\b)|[✓✔✅]")
_NEGATIVE = re.compile(r"(?i:\b(?:no|not|incorrect|wrong|false)\b)|[✗✘❌]")
_MENTION = re.compile(
    r"(?<![A-Za-z0-9'’])(?:(?i:option|choice|letter)\s+)?[\(\[]?\**(?P<L>[A-J])\**[\)\]]?"
    r"(?![A-Za-z0-9'’])"
)
_NEG_BEFORE = re.compile(
    r"(?i:\b(?:not|neither|nor|than|instead\s+of|except|excluding|eliminat\w*|exclud\w*"
    r"|rul\w*\s+out|between|over|against)\s+(?:option\s+|choice\s+)?[\(\[]?\**"
    r"|\bbetween\s+\S+\s+(?:and|or)\s+(?:option\s+|choice\s+)?[\(\[]?\**)$"
)
_NEG_AFTER = re.compile(
    r"^(?:\s*(?:,|and|or|&|/)\s*(?:option\s+|choice\s+)?[\(\[]?\**[A-J]\**[\)\]]?)*\s*"
    r"(?i:is|are|was|were|seems|looks)\s+(?i:also\s+|both\s+|all\s+|clearly\s+|definitely\s+)?"
    r"(?i:wrong|incorrect|false|not\b|out\b|eliminated|invalid|ruled|impossible|unlikely"
    r"|a\s+distractor)"
)
_CUE = re.compile(
    r"(?i:\b(?:so|therefore|thus|hence|it['’]s|it\s+is|it\s+must\s+be|must\s+be|leaves|leaving"
    r"|left\s+with|go\s+with|going\s+with|pick|choose|select|conclude|conclusion)\b)"
)
# Words after a capital "A" / "I" that show the letter is used as a letter, not a word.
_LETTER_VERBS = {
    "is", "was", "and", "or", "nor", "because", "since", "as", "but", "would", "could", "should",
    "must", "seems", "looks", "fits", "matches", "remains", "also", "only", "alone", "here",
    "then", "too", "are", "were", "be", "for", "with", "though", "although", "instead",
}  # fmt: skip
_PRONOUN_VERBS = {
    "am", "think", "believe", "guess", "would", "will", "choose", "pick", "select", "go", "feel",
    "need", "can", "could", "should", "have", "had", "was", "must", "do", "did", "lean", "agree",
    "suspect", "know", "say", "mean", "hope", "want", "see", "get", "found", "chose", "picked",
    "selected", "went", "cannot", "can't", "don't", "also", "really", "still", "just",
}  # fmt: skip
_TEXT_WRAP = re.compile(r"\\(?:text|mathrm|textbf|mbox)\{([^{}]*)\}")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?。！？])\s+|;\s*|。")
_TEXT_NEG = re.compile(r"(?:\bnot|\bneither|\bnor|\bthan|\binstead of|\bexcept)\s+$")


def _norm_text(s: str) -> str:
    s = strip_markup(s).lower()
    s = re.sub(r"[^\w\s\.\+\-]", " ", s)
    return re.sub(r"\s+", " ", s).strip(" .")


def _normalize(text: str) -> str:
    text = unicodedata.normalize("NFKC", text or "")
    text = re.sub(r"[\u200b-\u200d\ufeff]", "", text)
    return text.replace("\u2019", "'")


def _letter(m: re.Match[str]) -> str:
    return m.group("L") or m.group("l").upper()


def _word_use(text: str, end: int, letter: str) -> bool:
    """Whether a capital ``A``/``I`` ending at ``end`` is the article or the pronoun."""
    if letter not in "AI":
        return False
    m = re.match(r"[ \t]+([a-z][a-z'’]*)", text[end:])
    if not m:
        return False
    word = m.group(1)
    if letter == "I":
        return word in _PRONOUN_VERBS
    return word not in _LETTER_VERBS


def _letters_in_assertion(text: str, start: int, first: str) -> list[str]:
    found = [first]
    pos = start
    while True:
        m = _MORE.match(text, pos)
        if not m:
            return found
        end = m.end("L") if m.group("L") else m.end("l")
        if _word_use(text, end, _letter(m)) or re.match(r"\s+(?i:is|are|was)\b", text[end:]):
            return found  # "... is C and I am sure", "... is C, and A is a distractor"
        found.append(_letter(m))
        pos = m.end()


def _unique(letters: list[str]) -> list[str]:
    return list(dict.fromkeys(letters))


def _boxed_letters(answer: str, valid: str, choices: list[str]) -> list[str]:
    out: list[str] = []
    for box in find_boxed_all(answer):
        inner = _TEXT_WRAP.sub(r"\1", box)
        inner = strip_markup(inner).strip(" []")
        bare = inner.strip("()")
        letters = re.findall(r"(?<![A-Za-z])([A-J])(?![A-Za-z])", bare)
        if letters and re.fullmatch(r"[\sA-J\(\),/&]*(?:(?:and|or)[\sA-J\(\),]*)*", bare):
            out += [x for x in letters if x in valid]
            continue
        lead = re.fullmatch(r"\(?(?P<L>[A-J])[\).:]\s*(?P<text>.*)", inner)
        if lead and lead.group("L") in valid:
            rest = lead.group("text")
            idx = valid.index(lead.group("L"))
            if not rest.strip() or idx >= len(choices) or _same_text(rest, choices[idx]):
                out.append(lead.group("L"))
                continue
        by_text = _match_choice_text(inner, choices, valid)
        if by_text:
            out.append(by_text)
    return out


def _same_text(text: str, choice: str) -> bool:
    t, c = _norm_text(text), _norm_text(choice)
    return bool(c) and t.startswith(c[:20])


def _match_choice_text(text: str, choices: list[str], valid: str) -> str | None:
    t = _norm_text(text)
    if not t:
        return None
    hits = [valid[i] for i, c in enumerate(choices[: len(valid)]) if _norm_text(c) == t]
    return hits[0] if len(hits) == 1 else None


def _choice_named_in(text: str, choices: list[str], valid: str) -> str | None:
    """The one choice whose text is named (not negated) in ``text``, else ``None``."""
    t = _norm_text(text)
    if not t:
        return None
    hits = []
    for i, c in enumerate(choices[: len(valid)]):
        c_norm = _norm_text(c)
        if not c_norm:
            continue
        for m in re.finditer(rf"(?<![\w.]){re.escape(c_norm)}(?!\w|\.\d)", t):
            if not _TEXT_NEG.search(t[: m.start()]):
                hits.append(valid[i])
                break
    return hits[0] if len(hits) == 1 else None


def _line_letter(line: str, valid: str, choices: list[str]) -> str | None:
    m = _LINE_ONLY.match(line)
    if m and m.group("L") in valid:
        return m.group("L")
    m = _LINE_LEAD.match(line)
    if m and m.group("L") in valid:
        idx = valid.index(m.group("L"))
        if idx >= len(choices) or _same_text(m.group("text"), choices[idx]):
            return m.group("L")
    m = _LINE_REASON.match(line)
    if m and m.group("L") in valid and not _word_use(line, m.end("L"), m.group("L")):
        return m.group("L")
    return None


def _live_mentions(sentence: str, valid: str, start: int = 0) -> tuple[bool, list[str]]:
    """Letter mentions in ``sentence`` from ``start``: (any at all, those not negated)."""
    seen, live = False, []
    for m in _MENTION.finditer(sentence, start):
        letter = m.group("L")
        if letter not in valid or _word_use(sentence, m.end("L"), letter):
            continue
        seen = True
        if _NEG_BEFORE.search(sentence[max(0, m.start() - 40) : m.start()]):
            continue
        if _NEG_AFTER.match(sentence[m.end() :]):
            continue
        live.append(letter)
    return seen, live


def _conclusion(line: str, valid: str) -> list[str]:
    """Letters concluded in the last sentence (or the one before) of ``line``."""
    sentences = [s for s in _SENTENCE_SPLIT.split(line) if s and s.strip()]
    for sentence in sentences[::-1][:2]:
        cues = list(_CUE.finditer(sentence))
        short = len(re.findall(r"[\w'’]+", sentence)) <= 3
        if not cues and not short:
            if _MENTION.search(sentence):
                return []
            continue
        seen, live = _live_mentions(sentence, valid, cues[-1].end() if cues else 0)
        if not seen and cues:
            seen, live = _live_mentions(sentence, valid)
            live = []  # mentions before the cue are discussion, not the conclusion
        if seen:
            return live
    return []


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
    text = _normalize(answer)

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
    # 2. explicit assertions (a later hedge on another letter makes them ambiguous)
    asserted: list[tuple[bool, int, list[str]]] = []
    for m in _ASSERT.finditer(text):
        is_final = "final" in m.group(0).lower()
        end = m.end("L") if m.group("L") else m.end("l")
        if _NEG_AFTER.match(text[end:].lstrip(")]*_")):
            continue
        letters = _letters_in_assertion(text, m.end(), _letter(m))
        asserted.append((is_final, m.end(), letters))
    if any(final for final, _, _ in asserted):
        asserted = [a for a in asserted if a[0]]
    asserted = [a for a in asserted if any(x in valid for x in a[2])]
    got = decide([x for _, _, ls in asserted for x in ls], "stated answer")
    if got and got[0] is not None:
        tail = text[max(end for _, end, _ in asserted) :]
        hedged = [m.group("L") or m.group("M") for m in _HEDGE.finditer(tail)]
        hedged = [x for x in hedged if x in valid and x != got[0]]
        if hedged:
            return None, f"ambiguous: {got[0]} asserted, {', '.join(_unique(hedged))} hedged"
    if got:
        return got
    # 3. a letter said to be correct
    got = decide([m.group("L") for m in _IS_CORRECT.finditer(text)], "said to be correct")
    if got:
        return got
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    # An answer that walks through the options line by line ("A) Berlin - no"): such a line is
    # not a conclusion unless its letter leads a line twice (the list, then the answer).
    leads = [m.group("L") for ln in lines if (m := _LEAD_ANY.match(ln))]
    listed = len(set(leads)) >= 2

    def usable(line: str) -> bool:
        m = _LEAD_ANY.match(line)
        return not listed or not m or leads.count(m.group("L")) >= 2

    if lines and usable(lines[-1]):
        # 4. the last line as a letter
        letter = _line_letter(lines[-1], valid, choices)
        if letter:
            return letter, "letter line"
        # 5. a conclusion in the last line
        got = decide(_conclusion(lines[-1], valid), "conclusion")
        if got:
            return got
    if lines and usable(lines[0]):
        # 6. the first line as a letter
        letter = _line_letter(lines[0], valid, choices)
        if letter:
            return letter, "letter line"
    if listed:
        # 6b. the one listed option marked right ("C) Rome: yes", "| C ... ✓")
        marked = [
            m.group("L")
            for ln in lines
            if (m := _LEAD_ANY.match(ln)) and _POSITIVE.search(ln) and not _NEGATIVE.search(ln)
        ]
        got = decide(marked, "marked in the option list") if len(marked) == 1 else None
        if got:
            return got
    # 7. option text
    if choices:
        stated = answer_is(text) or ""
        last = lines[-1] if lines and usable(lines[-1]) else ""
        for candidate in (text, stated, last):
            letter = _match_choice_text(candidate, choices, valid)
            if letter:
                return letter, "option text"
        last_sentence = ""
        if last:
            parts = [s for s in _SENTENCE_SPLIT.split(last) if s.strip()]
            last_sentence = parts[-1] if parts else ""
        for candidate in (stated, last_sentence):
            letter = _choice_named_in(candidate, choices, valid)
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
