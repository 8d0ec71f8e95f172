"""Simulated workers: deterministic skill profiles over a bank of known problems.

A :class:`SimulatedProvider` answers worker messages without any model. Its
:class:`~conductor_core.simulation.problem_bank.ProblemBank` holds the problems of the files
named in its config (``simulation.problems``, read once per file and shared through
:func:`~conductor_core.simulation.problem_bank.bank_for`). When the question is in its bank it is
right with probability ``skills[domain]`` (raised to ``verify_skill`` when a right answer is
already visible in an earlier step or the previous answer) and answers in the domain's format
(``\\boxed{...}`` for math, ``Answer: X`` for multiple choice, a fenced Python block for code, the
bare string for free-form; written by :mod:`~conductor_core.simulation.answers`). Unknown
questions get a generic, plausible free-text reply. A question of the workflow world, asked of a
worker with ``simulation.workflow`` rules, is answered by those rules instead
(:mod:`conductor_core.simulation.workflow_world`: difficulty, parts, checking, subtasks read).

Determinism: the answer, latency and token counts depend only on (profile seed, model, question,
assigned subtask, visible responses, previous answer, sample index). Injected failures are drawn
from a second stream that also includes the attempt number of that exact request on this provider
instance, so a retry of a failed request can succeed; failures are therefore deterministic per
(request, attempt number).

Streaming (:meth:`SimulatedProvider.complete_stream`, and the HTTP simulator's ``stream: true``):
the same answer, in at most :data:`STREAM_CHUNKS` pieces of whole words (:func:`stream_pieces`),
the simulated latency spread evenly before them, so the whole answer takes as long as unstreamed.

Output format (``output_format``, the gateway's ``response_format``): the same answer put into
JSON that the format accepts (:mod:`~conductor_core.simulation.json_answers`),
deterministically.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from random import Random

from conductor_core.sample_streams import run_index
from conductor_core.simulation.answers import (
    generic_answer,
    hedge_answer,
    is_right_text,
    render_answer,
)
from conductor_core.simulation.json_answers import json_answer
from conductor_core.simulation.problem_bank import ProblemBank, bank_for, normalize_text
from conductor_core.simulation.workflow_world import respond, world_question
from conductor_core.tasks.problem import Problem
from conductor_core.workers.config import SimulationProfile, WorkerConfig
from conductor_core.workers.types import (
    Completion,
    ErrorKind,
    Messages,
    OutputFormat,
    ProviderError,
    Usage,
)

__all__ = [
    "FAILURE_KINDS",
    "STREAM_CHUNKS",
    "ParsedMessage",
    "SimulatedProvider",
    "VisibleStep",
    "parse_worker_message",
    "stream_pieces",
]

FAILURE_KINDS = ("rate_limit", "server_error", "timeout", "malformed")
"""Failure outcomes a simulated call can draw, in the order their rates are applied."""

_MAX_TRACKED_REQUESTS = 100_000

STREAM_CHUNKS = 16
"""At most this many pieces of a streamed simulated answer."""

_WORD_WITH_SPACE = re.compile(r"\s*\S+")


def stream_pieces(text: str, chunks: int = STREAM_CHUNKS) -> list[str]:
    """``text`` cut into at most ``chunks`` pieces of whole words of near-equal word counts
    (each word with the whitespace before it, the last piece with the trailing whitespace);
    the pieces join to ``text``."""
    words = _WORD_WITH_SPACE.findall(text)
    if not words:
        return [text] if text else []
    words[-1] += text[sum(map(len, words)) :]
    k = max(1, min(chunks, len(words)))
    return ["".join(words[g * len(words) // k : (g + 1) * len(words) // k]) for g in range(k)]


@dataclass(frozen=True)
class VisibleStep:
    """One earlier step shown to the worker."""

    agent: str
    subtask: str
    response: str


@dataclass(frozen=True)
class ParsedMessage:
    """The parts of a worker message (see :mod:`conductor_core.workflow.prompts`)."""

    question: str
    subtask: str = ""
    previous_answer: str | None = None
    steps: tuple[VisibleStep, ...] = field(default_factory=tuple)
    structured: bool = False

    def visible_texts(self) -> list[str]:
        """Every response text the worker can see (earlier steps, then the previous answer)."""
        texts = [s.response for s in self.steps]
        if self.previous_answer is not None:
            texts.append(self.previous_answer)
        return texts


_QUESTION_RE = re.compile(r"<question>\n(.*?)\n</question>", re.DOTALL)
_PREVIOUS_RE = re.compile(r"<previous_answer>\n(.*?)\n</previous_answer>", re.DOTALL)
_STEP_RE = re.compile(
    r'<step agent="([^"]*)">\n<subtask>\n(.*?)\n</subtask>\n'
    r"<response>\n(.*?)\n</response>\n</step>",
    re.DOTALL,
)
_SUBTASK_MARK = "Your assigned subtask:\n"


def parse_worker_message(text: str) -> ParsedMessage:
    """Split a worker message into question, previous answer, visible steps and subtask.

    A text not in the worker-message format is taken whole as the question.
    """
    q = _QUESTION_RE.search(text)
    mark = text.rfind(_SUBTASK_MARK)
    if q is None or mark < q.end():
        return ParsedMessage(question=text.strip())
    middle = text[q.end() : mark]
    prev = _PREVIOUS_RE.search(middle)
    steps = tuple(VisibleStep(a, s, r) for a, s, r in _STEP_RE.findall(middle))
    return ParsedMessage(
        question=q.group(1),
        subtask=text[mark + len(_SUBTASK_MARK) :].strip(),
        previous_answer=prev.group(1) if prev else None,
        steps=steps,
        structured=True,
    )


def _last_user_text(messages: Messages) -> str:
    for msg in reversed(messages):
        if msg.get("role") == "user":
            return str(msg.get("content") or "")
    return str(messages[-1].get("content") or "") if messages else ""


def _stable_int(*parts: object) -> int:
    blob = json.dumps(parts, ensure_ascii=False, sort_keys=True, default=str)
    return int.from_bytes(hashlib.sha256(blob.encode("utf-8")).digest()[:8], "big")


class SimulatedProvider:
    """A worker that answers from a :class:`ProblemBank` with a seeded skill profile.

    The bank is :func:`bank_for` the config's ``simulation.problems`` (read when the provider is
    built, so a missing file fails then); ``bank`` replaces it (tests). ``sleep`` waits out the
    simulated latency (``asyncio.sleep``; tests pass their own).
    """

    def __init__(
        self,
        config: WorkerConfig,
        bank: ProblemBank | None = None,
        *,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.config = config
        self.profile: SimulationProfile = config.simulation or SimulationProfile()
        self.bank = bank if bank is not None else bank_for(self.profile.problems)
        self._sleep = sleep
        self._attempts: OrderedDict[int, int] = OrderedDict()

    # -- the Provider protocol -------------------------------------------------------------------

    accepts_output_format = True
    """Asked for JSON, it answers JSON (see the module doc)."""

    async def complete(
        self,
        messages: Messages,
        *,
        sample_index: int = 0,
        output_format: OutputFormat | None = None,
    ) -> Completion:
        """Answer ``messages``; raises :class:`ProviderError` for an injected failure."""
        parsed, key = self._prepare(messages, sample_index)
        failure = self._draw_failure(key)
        if failure is not None:
            raise self.failure_error(failure)
        return await self._answer(messages, parsed, key, output_format, sample_index)

    async def complete_stream(
        self,
        messages: Messages,
        *,
        sample_index: int = 0,
        on_delta: Callable[[str], None],
        output_format: OutputFormat | None = None,
    ) -> Completion:
        """Like :meth:`complete`, passing the answer to ``on_delta`` in pieces with the
        simulated latency spread before them (:meth:`stream_plan`)."""
        parsed, key = self._prepare(messages, sample_index)
        failure = self._draw_failure(key)
        if failure is not None:
            raise self.failure_error(failure)
        completion, plan = self._stream_plan(messages, parsed, key, output_format, sample_index)
        loop = asyncio.get_running_loop()
        due = loop.time()
        for delay_s, piece in plan:
            due += delay_s  # against the start: the timer's slack does not add up
            if (wait := due - loop.time()) > 0:
                await self._sleep(wait)
            on_delta(piece)
        return completion

    async def aclose(self) -> None:
        """Nothing to release."""

    # -- building blocks (also used by the HTTP simulator) ---------------------------------------

    def request_key(self, messages: Messages, sample_index: int = 0) -> int:
        """Stable hash of everything that determines the answer to this request."""
        return self._prepare(messages, sample_index)[1]

    def draw_failure(self, messages: Messages, *, sample_index: int = 0) -> str | None:
        """Draw this attempt's injected failure kind (one of :data:`FAILURE_KINDS`) or None.

        Each call counts as one attempt of its request; the draw depends on the attempt number.
        """
        return self._draw_failure(self._prepare(messages, sample_index)[1])

    def failure_error(self, kind: str) -> ProviderError:
        """The :class:`ProviderError` an in-process call raises for an injected failure."""
        name = self.config.display_name
        if kind == "rate_limit":
            return ProviderError(
                f"{name}: simulated rate limit (HTTP 429)",
                kind=ErrorKind.RATE_LIMIT,
                retryable=True,
                status=429,
                retry_after=0.01,
            )
        if kind == "server_error":
            return ProviderError(
                f"{name}: simulated server error (HTTP 500)",
                kind=ErrorKind.SERVER,
                retryable=True,
                status=500,
            )
        if kind == "timeout":
            return ProviderError(
                f"{name}: simulated timeout", kind=ErrorKind.TIMEOUT, retryable=True
            )
        return ProviderError(
            f"{name}: simulated malformed response", kind=ErrorKind.MALFORMED, retryable=True
        )

    async def answer(
        self,
        messages: Messages,
        *,
        sample_index: int = 0,
        output_format: OutputFormat | None = None,
    ) -> Completion:
        """The deterministic answer (after the simulated latency), without failure injection."""
        parsed, key = self._prepare(messages, sample_index)
        return await self._answer(messages, parsed, key, output_format, sample_index)

    def answer_now(
        self,
        messages: Messages,
        *,
        sample_index: int = 0,
        output_format: OutputFormat | None = None,
    ) -> Completion:
        """The deterministic answer without latency or failure injection."""
        parsed, key = self._prepare(messages, sample_index)
        return self._compose(messages, parsed, key, output_format, sample_index)

    def stream_plan(
        self,
        messages: Messages,
        *,
        sample_index: int = 0,
        output_format: OutputFormat | None = None,
    ) -> tuple[Completion, list[tuple[float, str]]]:
        """The deterministic answer (no failure injection) and how it streams: its pieces
        (:func:`stream_pieces`), each with the seconds to wait before it; the waits add up to
        the simulated latency of the unstreamed answer."""
        parsed, key = self._prepare(messages, sample_index)
        return self._stream_plan(messages, parsed, key, output_format, sample_index)

    # -- internals --------------------------------------------------------------------------------

    def _prepare(self, messages: Messages, sample_index: int) -> tuple[ParsedMessage, int]:
        parsed = parse_worker_message(_last_user_text(messages))
        key = _stable_int(
            self.profile.seed,
            self.config.model,
            normalize_text(parsed.question),
            normalize_text(parsed.subtask),
            [normalize_text(t) for t in parsed.visible_texts()],
            sample_index,
        )
        return parsed, key

    def _draw_failure(self, key: int) -> str | None:
        rates = self.profile.failures
        if not (rates.rate_limit or rates.server_error or rates.timeout or rates.malformed):
            return None
        attempt = self._attempts.pop(key, 0)
        self._attempts[key] = attempt + 1
        while len(self._attempts) > _MAX_TRACKED_REQUESTS:
            self._attempts.popitem(last=False)
        u = Random(_stable_int("failure", key, attempt)).random()
        edge = 0.0
        for kind in FAILURE_KINDS:
            edge += getattr(rates, kind)
            if u < edge:
                return kind
        return None

    async def _answer(
        self,
        messages: Messages,
        parsed: ParsedMessage,
        key: int,
        output_format: OutputFormat | None = None,
        sample_index: int = 0,
    ) -> Completion:
        delay_ms = self._latency_ms(Random(_stable_int("latency", key)))
        if delay_ms > 0:
            await self._sleep(delay_ms / 1000.0)
        return self._compose(messages, parsed, key, output_format, sample_index)

    def _stream_plan(
        self,
        messages: Messages,
        parsed: ParsedMessage,
        key: int,
        output_format: OutputFormat | None = None,
        sample_index: int = 0,
    ) -> tuple[Completion, list[tuple[float, str]]]:
        completion = self._compose(messages, parsed, key, output_format, sample_index)
        pieces = stream_pieces(completion.text) or [""]  # an empty answer still takes its time
        delay_s = self._latency_ms(Random(_stable_int("latency", key))) / 1000.0
        return completion, [(delay_s / len(pieces), piece) for piece in pieces]

    def _compose(
        self,
        messages: Messages,
        parsed: ParsedMessage,
        key: int,
        output_format: OutputFormat | None = None,
        sample_index: int = 0,
    ) -> Completion:
        problem = self.bank.get(parsed.question)
        rng = Random(_stable_int("answer", key))
        rules = self.profile.workflow
        world = world_question(problem.metadata) if problem is not None and rules else None
        if problem is None:
            text = generic_answer(parsed.subtask or parsed.question, rng)
        elif world is not None and rules is not None:
            # A worker's own answers are one per run: repeats of a request within it share them.
            own_key = _stable_int(
                "own",
                self.profile.seed,
                self.config.model,
                normalize_text(parsed.question),
                run_index(sample_index),
            )
            text = respond(
                world, self.profile, rules, parsed.subtask, parsed.visible_texts(), rng, own_key
            )
        else:
            right = rng.random() < self.success_probability(problem, parsed)
            text = render_answer(problem, right, rng, self.bank)
            chance = self.profile.hedge_when_right if right else self.profile.hedge_when_wrong
            # Hedging draws from its own stream, so it never changes which answers are right.
            if chance > 0.0 and Random(_stable_int("hedge", key)).random() < chance:
                text = hedge_answer(problem, text, Random(_stable_int("hedge-text", key)))
        if output_format is not None:
            text = json_answer(output_format, text, Random(_stable_int("json", key)))
        total_chars = sum(len(str(m.get("content") or "")) for m in messages)
        usage = Usage(
            input_tokens=max(1, total_chars // 4),
            output_tokens=self._output_tokens(Random(_stable_int("tokens", key))),
        )
        return Completion(text=text, usage=usage)

    def success_probability(self, problem: Problem, parsed: ParsedMessage) -> float:
        """Chance of a right answer: the domain skill, or ``verify_skill`` if a right one shows."""
        p = self.profile.skills.get(str(problem.domain), self.profile.default_skill)
        if any(is_right_text(problem, t) for t in parsed.visible_texts()):
            p = max(p, self.profile.verify_skill)
        return p

    def _latency_ms(self, rng: Random) -> float:
        prof = self.profile
        if prof.latency_ms <= 0 and prof.latency_jitter_ms <= 0:
            return 0.0
        return max(0.0, rng.gauss(prof.latency_ms, prof.latency_jitter_ms))

    def _output_tokens(self, rng: Random) -> int:
        prof = self.profile
        drawn = round(rng.gauss(prof.output_tokens, prof.output_tokens_jitter))
        return max(1, min(int(drawn), self.config.params.max_tokens))
