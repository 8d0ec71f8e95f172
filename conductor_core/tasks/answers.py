"""Answer extraction helpers shared by the graders and the loaders.

All functions are pure string functions (no heavy imports) and never raise on odd input: they
return ``None`` when nothing can be extracted.
"""

from __future__ import annotations

import re

_BOX_COMMANDS = ("\\boxed", "\\fbox")

_ANSWER_IS = re.compile(
    r"(?:final\s+answer|the\s+answer|answer)\s*(?:is|:|=)\s*:?\s*(?P<ans>[^\n]+)", re.IGNORECASE
)
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?|-?\.\d+")


def find_boxed_all(text: str) -> list[str]:
    """Return the contents of every ``\\boxed{...}`` / ``\\fbox{...}`` in order (nested braces ok).

    ``\\boxed 5`` (a single token without braces) is accepted too. Unbalanced boxes are skipped.
    """
    out: list[str] = []
    i = 0
    while True:
        hits = [(text.find(cmd, i), cmd) for cmd in _BOX_COMMANDS]
        hits = [(pos, cmd) for pos, cmd in hits if pos >= 0]
        if not hits:
            return out
        pos, cmd = min(hits)
        j = pos + len(cmd)
        while j < len(text) and text[j] == " ":
            j += 1
        if j < len(text) and text[j] == "{":
            depth = 0
            for k in range(j, len(text)):
                if text[k] == "{":
                    depth += 1
                elif text[k] == "}":
                    depth -= 1
                    if depth == 0:
                        out.append(text[j + 1 : k].strip())
                        i = k + 1
                        break
            else:
                return out
        elif j > pos + len(cmd):
            m = re.match(r"[^\s$}]+", text[j:])
            if m:
                out.append(m.group(0))
            i = j + (m.end() if m else 0)
        else:
            i = j
        if i <= pos:
            i = pos + 1


def last_boxed(text: str) -> str | None:
    """Contents of the last ``\\boxed{...}`` in ``text`` (nested braces handled), or ``None``."""
    boxes = find_boxed_all(text)
    return boxes[-1] if boxes else None


def strip_markup(s: str) -> str:
    """Remove surrounding Markdown emphasis, dollar signs, trailing periods and spaces."""
    s = s.strip()
    prev = None
    while prev != s:
        prev = s
        s = s.strip().strip("*_`").strip()
        if s.startswith("$$") and s.endswith("$$") and len(s) > 4:
            s = s[2:-2]
        elif s.startswith("$") and s.endswith("$") and len(s) > 2:
            s = s[1:-1]
        elif s[:2] in ("\\(", "\\[") and s[-2:] == {"\\(": "\\)", "\\[": "\\]"}[s[:2]]:
            s = s[2:-2]
        s = s.rstrip(".").rstrip()
    return s


def answer_is(text: str) -> str | None:
    """The text after the last "the answer is" / "final answer:" / "answer:" phrase, or ``None``."""
    matches = list(_ANSWER_IS.finditer(text))
    if not matches:
        return None
    raw = matches[-1].group("ans").strip().lstrip("*_").strip()
    boxed = last_boxed(raw)
    if boxed is not None:
        return boxed
    math = re.match(r"\$\$?(.+?)\$\$?|\\\((.+?)\\\)", raw)
    if math:  # "the answer is $x$, because ..." -> x
        return strip_markup(math.group(1) or math.group(2)) or None
    raw = re.split(r"\.\s|,\s(?:since|because|which|as)\b|;\s", raw, maxsplit=1)[0]
    return strip_markup(raw) or None


def last_number(text: str) -> str | None:
    """The last number in ``text`` (commas as thousands separators removed), or ``None``."""
    nums = _NUMBER.findall(text)
    if not nums:
        return None
    return nums[-1].replace(",", "")


def extract_final_answer(text: str) -> str | None:
    """Best-effort final answer: last boxed, else "the answer is ...", else the last number."""
    if not text or not text.strip():
        return None
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    stated = answer_is(text)
    if stated is not None:
        return stated
    return last_number(text)


def gsm8k_answer(solution: str) -> str:
    """The final answer of a GSM8K solution: the text after ``####``, commas removed."""
    if "####" not in solution:
        return strip_markup(solution.strip().splitlines()[-1]) if solution.strip() else ""
    return solution.split("####")[-1].strip().replace(",", "")


_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+\-.]*)[^\n]*\n(.*?)```", re.DOTALL)
_CODE_HINTS = re.compile(
    r"^\s*(def |class |import |from \S+ import |print\(|for |while |if __name__)", re.MULTILINE
)


def extract_code(text: str) -> str | None:
    """The program in an answer: the last fenced ``python`` block, else the last fenced block of
    any language, else the whole text when it looks like Python code; ``None`` otherwise.
    """
    if not text:
        return None
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    py = [body for lang, body in blocks if lang in ("python", "py", "python3")]
    if py:
        return py[-1]
    if blocks:
        return blocks[-1][1]
    # An unterminated fence (the model ran out of tokens): take what follows it.
    m = re.search(r"```[ \t]*(?:python3?|py)?[^\n]*\n(.*)\Z", text, re.DOTALL)
    if m and m.group(1).strip():
        return m.group(1)
    if _CODE_HINTS.search(text):
        return text
    return None
