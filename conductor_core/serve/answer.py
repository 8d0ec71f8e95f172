"""The answer a client gets: the workflow's answer cut before its first stop sequence and after
the request's ``max_tokens``-th word (:func:`final_answer`), and, while it streams, which part of
the text received so far may go out (:class:`AnswerStream`)."""

from __future__ import annotations

import re

__all__ = ["AnswerStream", "before_stop", "cut_to_tokens", "final_answer"]

_TOKEN = re.compile(r"\S+")


def before_stop(text: str, stops: tuple[str, ...]) -> str:
    """``text`` up to the first of the ``stops`` it holds (the stop sequence itself left out, as
    OpenAI's API leaves it out); all of it when it holds none."""
    ends = [i for stop in stops if (i := text.find(stop)) >= 0]
    return text[: min(ends)] if ends else text


def final_answer(text: str, limit: int | None, stops: tuple[str, ...] = ()) -> tuple[str, bool]:
    """The answer the client gets: cut before its first stop sequence, then after its
    ``limit``-th word (:func:`cut_to_tokens`); and whether the word limit cut it (a stop
    sequence ends it as a finished answer: ``finish_reason`` ``stop``)."""
    return cut_to_tokens(before_stop(text, stops), limit)


def cut_to_tokens(text: str, limit: int | None) -> tuple[str, bool]:
    """``text`` cut after its ``limit``-th token, and whether it was cut.

    A token here is a run of non-whitespace characters (a word with its punctuation), an
    approximation: the answer comes from workers with different tokenizers, so the gateway
    counts words (a word is often several model tokens). The text kept is the prefix up to the
    end of that word, its spacing intact.
    """
    if limit is None:
        return text, False
    for count, match in enumerate(_TOKEN.finditer(text), start=1):
        if count == limit:
            end = match.end()
            if text[end:].strip():
                return text[:end], True
            break
    return text, False


def _stop_start(text: str, stops: tuple[str, ...]) -> int:
    """How many characters at the end of ``text`` could begin one of the ``stops``."""
    return max(
        (k for stop in stops for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0
    )


class AnswerStream:
    """The answer as it is streamed: which part of the text received so far may go to the
    client now, so that what has been sent is always a prefix of the final answer
    (:func:`final_answer`: before its first stop sequence, cut to ``limit`` words).

    Without a limit or stop sequences every piece goes at once. With a limit, text past the end
    of the ``limit``-th word is held back, and so is whitespace at the end of what has arrived
    (it belongs to the answer only if another word follows, or if the answer ends there). With
    stop sequences, the end of what has arrived that could begin one is held back until the
    next piece says whether it does.
    """

    def __init__(self, limit: int | None, stops: tuple[str, ...] = ()) -> None:
        self.limit = limit
        self.stops = stops
        self.received = ""
        self.sent = ""

    def push(self, text: str) -> str:
        """Take the next piece of the answer; returns the text to send now (maybe empty)."""
        self.received += text
        visible = before_stop(self.received, self.stops)
        if visible == self.received:  # no stop yet: hold back what may be the start of one
            visible = visible[: len(visible) - _stop_start(visible, self.stops)]
        ready = visible if self.limit is None else cut_to_tokens(visible, self.limit)[0].rstrip()
        out = ready[len(self.sent) :]
        self.sent = ready
        return out

    def finish(self, answer: str) -> tuple[str, bool, bool]:
        """The workflow's final ``answer``: (the rest of it to send, whether it was cut to the
        limit, whether it continues what was sent). False means that the text sent is not the
        start of this answer (the streamed step failed after part of its reply was sent and
        another round's answer stands): the stream must end with an error."""
        final, cut = final_answer(answer, self.limit, self.stops)
        if not final.startswith(self.sent):
            return "", cut, False
        return final[len(self.sent) :], cut, True
