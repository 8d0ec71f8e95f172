"""Simulated workers: deterministic skill profiles over a bank of known problems.

A :class:`SimulatedProvider` answers worker messages without any model. Its
:class:`ProblemBank` holds the problems of the files named in its config
(``simulation.problems``, read once per file and shared through :func:`bank_for`). When the
question is in its bank it is right with probability ``skills[domain]`` (raised to
``verify_skill`` when a right answer is already visible in an earlier step or the previous
answer) and answers in the domain's format (``\\boxed{...}`` for math, ``Answer: X`` for multiple
choice, a fenced Python block for code, the bare string for free-form). Unknown questions get a
generic, plausible free-text reply.

Determinism: the answer, latency and token counts depend only on (profile seed, model, question,
assigned subtask, visible responses, previous answer, sample index). Injected failures are drawn
from a second stream that also includes the attempt number of that exact request on this provider
instance, so a retry of a failed request can succeed; failures are therefore deterministic per
(request, attempt number).

Streaming (:meth:`SimulatedProvider.complete_stream`, and the HTTP simulator's ``stream: true``):
the same answer, in at most :data:`STREAM_CHUNKS` pieces of whole words (:func:`stream_pieces`),
the simulated latency spread evenly before them, so the whole answer takes as long as unstreamed.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import re
import string
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from importlib import resources
from pathlib import Path
from random import Random

from conductor_core.errors import ConfigError
from conductor_core.tasks.problem import Domain, Problem, read_problems
from conductor_core.workers.config import PoolConfig, SimulationProfile, WorkerConfig
from conductor_core.workers.types import Completion, ErrorKind, Messages, ProviderError, Usage

__all__ = [
    "FAILURE_KINDS",
    "HEDGES",
    "STREAM_CHUNKS",
    "ParsedMessage",
    "ProblemBank",
    "SimulatedProvider",
    "VisibleStep",
    "bank_for",
    "broken_code",
    "bundled_pool_path",
    "bundled_problems_path",
    "bundled_train_problems_path",
    "clear_bank_cache",
    "hedge_answer",
    "is_right_text",
    "known_problem",
    "known_problems",
    "normalize_text",
    "parse_worker_message",
    "render_answer",
    "stream_pieces",
    "wrong_math",
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


def bundled_pool_path() -> Path:
    """Path of the bundled simulated pool (four workers with distinct strengths)."""
    return Path(str(resources.files("conductor_core.resources") / "pools" / "simulated.yaml"))


def bundled_problems_path() -> Path:
    """Path of the bundled demo problems (math, mcq, code, freeform; JSONL)."""
    return Path(str(resources.files("conductor_core.resources") / "problems" / "demo.jsonl"))


def bundled_train_problems_path() -> Path:
    """Path of the bundled training problems (math, mcq, freeform; JSONL)."""
    return Path(str(resources.files("conductor_core.resources") / "train" / "problems.jsonl"))


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

    async def complete(self, messages: Messages, *, sample_index: int = 0) -> Completion:
        """Answer ``messages``; raises :class:`ProviderError` for an injected failure."""
        parsed, key = self._prepare(messages, sample_index)
        failure = self._draw_failure(key)
        if failure is not None:
            raise self.failure_error(failure)
        return await self._answer(messages, parsed, key)

    async def complete_stream(
        self, messages: Messages, *, sample_index: int = 0, on_delta: Callable[[str], None]
    ) -> Completion:
        """Like :meth:`complete`, passing the answer to ``on_delta`` in pieces with the
        simulated latency spread before them (:meth:`stream_plan`)."""
        parsed, key = self._prepare(messages, sample_index)
        failure = self._draw_failure(key)
        if failure is not None:
            raise self.failure_error(failure)
        completion, plan = self._stream_plan(messages, parsed, key)
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

    async def answer(self, messages: Messages, *, sample_index: int = 0) -> Completion:
        """The deterministic answer (after the simulated latency), without failure injection."""
        parsed, key = self._prepare(messages, sample_index)
        return await self._answer(messages, parsed, key)

    def answer_now(self, messages: Messages, *, sample_index: int = 0) -> Completion:
        """The deterministic answer without latency or failure injection."""
        parsed, key = self._prepare(messages, sample_index)
        return self._compose(messages, parsed, key)

    def stream_plan(
        self, messages: Messages, *, sample_index: int = 0
    ) -> tuple[Completion, list[tuple[float, str]]]:
        """The deterministic answer (no failure injection) and how it streams: its pieces
        (:func:`stream_pieces`), each with the seconds to wait before it; the waits add up to
        the simulated latency of the unstreamed answer."""
        parsed, key = self._prepare(messages, sample_index)
        return self._stream_plan(messages, parsed, key)

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

    async def _answer(self, messages: Messages, parsed: ParsedMessage, key: int) -> Completion:
        delay_ms = self._latency_ms(Random(_stable_int("latency", key)))
        if delay_ms > 0:
            await self._sleep(delay_ms / 1000.0)
        return self._compose(messages, parsed, key)

    def _stream_plan(
        self, messages: Messages, parsed: ParsedMessage, key: int
    ) -> tuple[Completion, list[tuple[float, str]]]:
        completion = self._compose(messages, parsed, key)
        pieces = stream_pieces(completion.text) or [""]  # an empty answer still takes its time
        delay_s = self._latency_ms(Random(_stable_int("latency", key))) / 1000.0
        return completion, [(delay_s / len(pieces), piece) for piece in pieces]

    def _compose(self, messages: Messages, parsed: ParsedMessage, key: int) -> Completion:
        problem = self.bank.get(parsed.question)
        rng = Random(_stable_int("answer", key))
        if problem is None:
            text = _generic_answer(parsed, rng)
        else:
            right = rng.random() < self.success_probability(problem, parsed)
            text = render_answer(problem, right, rng, self.bank)
            chance = self.profile.hedge_when_right if right else self.profile.hedge_when_wrong
            # Hedging draws from its own stream, so it never changes which answers are right.
            if chance > 0.0 and Random(_stable_int("hedge", key)).random() < chance:
                text = hedge_answer(problem, text, Random(_stable_int("hedge-text", key)))
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


# -- answers ---------------------------------------------------------------------------------------


def hedge_answer(problem: Problem, text: str, rng: Random) -> str:
    """``text`` closed by a sentence of doubt (graded the same)."""
    if problem.domain == Domain.FREEFORM:
        # A bare free-form answer needs a stated-answer marker once a sentence follows it.
        text = f"The final answer is {text}."
    return f"{text}\n{rng.choice(HEDGES)}"


def is_right_text(problem: Problem, text: str) -> bool:
    """True when ``text`` contains the problem's reference in the simulator's answer format."""
    flat = normalize_text(text)
    ref = normalize_text(problem.reference)
    if not ref:
        return False
    if problem.domain == Domain.MATH:
        return f"\\boxed{{{ref}}}" in flat
    if problem.domain == Domain.MCQ:
        found = re.findall(r"Answer:\s*\(?([A-Za-z])\)?", flat)
        return bool(found) and found[-1].upper() == ref.upper()
    if problem.domain == Domain.CODE:
        return ref in flat
    pattern = r"(?<!\w)" + re.escape(ref.casefold()) + r"(?!\w)"
    return re.search(pattern, flat.casefold()) is not None


def render_answer(problem: Problem, right: bool, rng: Random, bank: ProblemBank) -> str:
    """A right or wrong answer to ``problem`` in the simulator's format for its domain."""
    if problem.domain == Domain.MATH:
        value = problem.reference if right else wrong_math(problem.reference, rng)
        return _math_text(value, rng)
    if problem.domain == Domain.MCQ:
        letter = problem.reference.strip().upper() if right else _wrong_letter(problem, rng)
        return _mcq_text(letter, rng)
    if problem.domain == Domain.CODE:
        entry = str(problem.tests.get("entry_point") or "") or None
        if right and problem.reference.strip():
            code = problem.reference.strip("\n")
        else:
            code = broken_code(problem.reference, entry, rng)
        return _code_text(code, rng)
    return problem.reference if right else _wrong_freeform(problem, rng, bank)


HEDGES: tuple[str, ...] = (
    "I am not confident about this one.",
    "This might be wrong; please double-check it.",
    "I am unsure here, so treat this with caution.",
)
"""Sentences of doubt a hedging simulated worker ends its answer with."""

_MATH_OPENERS = (
    "Let me work through this carefully.",
    "Setting up the quantities from the problem statement.",
    "I will translate the words into an equation and solve it.",
    "Breaking the problem into smaller steps.",
)
_MATH_MIDDLES = (
    "Collecting the known values and applying the relevant operations gives the result.",
    "Simplifying step by step and checking the arithmetic along the way.",
    "Substituting back confirms the value is consistent with the conditions.",
)


def _math_text(value: str, rng: Random) -> str:
    return (
        f"{rng.choice(_MATH_OPENERS)}\n{rng.choice(_MATH_MIDDLES)}\n\n"
        f"The final answer is \\boxed{{{value}}}."
    )


def wrong_math(reference: str, rng: Random) -> str:
    """A plausible value different from ``reference`` (ref±k for numbers, perturbed otherwise)."""
    ref = reference.strip()
    number = _as_number(ref)
    if number is not None:
        for _ in range(8):
            delta = rng.choice((1, -1, 2, -2, 10, -10))
            doubled = rng.random() < 0.3 and number != 0
            candidate = number * 2 if doubled else number + delta
            text = _format_number(candidate, like=ref)
            if text != ref:
                return text
        return _format_number(number + 1, like=ref)
    digits = [i for i, ch in enumerate(ref) if ch.isdigit()]
    if digits:
        i = rng.choice(digits)
        new_digit = str((int(ref[i]) + rng.randint(1, 8)) % 10)
        return ref[:i] + new_digit + ref[i + 1 :]
    return f"{ref} + 1" if ref else "0"


def _as_number(text: str) -> Fraction | None:
    cleaned = text.replace(",", "").replace("$", "").strip()
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


def _format_number(value: Fraction, like: str) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    if "/" in like:
        return f"{value.numerator}/{value.denominator}"
    decimals = len(like.split(".", 1)[1]) if "." in like else 2
    return f"{float(value):.{decimals}f}"


_MCQ_REASONS = (
    "Comparing the options one by one, most can be ruled out by the definitions involved.",
    "Eliminating the choices that contradict the question leaves one candidate.",
    "Recalling the relevant facts and checking each option against them.",
)


def _mcq_text(letter: str, rng: Random) -> str:
    return f"{rng.choice(_MCQ_REASONS)}\n\nAnswer: {letter}"


def _wrong_letter(problem: Problem, rng: Random) -> str:
    n = len(problem.choices) or 4
    letters = [string.ascii_uppercase[i] for i in range(min(n, 26))]
    ref = problem.reference.strip().upper()
    others = [x for x in letters if x != ref] or ["A" if ref != "A" else "B"]
    return rng.choice(others)


_CODE_INTROS = (
    "Here is an implementation of the function.",
    "The following solution handles the cases described in the task.",
    "A straightforward implementation:",
)


def _code_text(code: str, rng: Random) -> str:
    return f"{rng.choice(_CODE_INTROS)}\n\n```python\n{code}\n```"


def broken_code(reference: str, entry_point: str | None, rng: Random) -> str:
    """A variant of ``reference`` that still parses but is wrong (off-by-one, None or raise)."""
    try:
        tree = ast.parse(reference)
    except SyntaxError:
        tree = None
    func = _find_function(tree, entry_point) if tree is not None else None
    if tree is None or func is None:
        name = entry_point or "solution"
        return f"def {name}(*args, **kwargs):\n    return None"
    variant = rng.choice(("off_by_one", "return_none", "raise"))
    if variant == "off_by_one" and _bump_first_int(func):
        return ast.unparse(tree)
    body_start = _docstring_len(func)
    if variant == "raise":
        stmt = ast.parse('raise ValueError("unsupported input")').body[0]
    else:
        stmt = ast.parse("return None").body[0]
    func.body = [*func.body[:body_start], stmt]
    return ast.unparse(ast.fix_missing_locations(tree))


def _find_function(tree: ast.Module, entry_point: str | None) -> ast.FunctionDef | None:
    funcs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    if entry_point:
        for f in funcs:
            if f.name == entry_point:
                return f
    return funcs[-1] if funcs else None


def _docstring_len(func: ast.FunctionDef) -> int:
    first = func.body[0] if func.body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        return 1
    return 0


def _bump_first_int(func: ast.FunctionDef) -> bool:
    """Add one to the first integer literal in a return value or comparison (in place)."""
    for node in ast.walk(func):
        if isinstance(node, ast.Return | ast.Compare):
            for sub in ast.walk(node):
                if (
                    isinstance(sub, ast.Constant)
                    and isinstance(sub.value, int)
                    and not isinstance(sub.value, bool)
                ):
                    sub.value += 1
                    return True
    return False


def _wrong_freeform(problem: Problem, rng: Random, bank: ProblemBank) -> str:
    ref = normalize_text(problem.reference).casefold()
    others = [
        r for r in bank.references(str(problem.domain)) if normalize_text(r).casefold() != ref
    ]
    if others:
        return rng.choice(others)
    return "I am not certain; my best guess is that it cannot be determined."


_GENERIC_OPENERS = (
    "Here is my response to the subtask.",
    "I considered the request carefully.",
    "Working on the assigned subtask:",
)
_GENERIC_BODIES = (
    "The key points are the definitions involved, the constraints given, and how they interact; "
    "taking them in turn leads to a consistent conclusion.",
    "After outlining the relevant considerations and checking them against the question, the "
    "most reasonable answer follows directly from the stated facts.",
    "A careful reading suggests addressing the main requirement first and then verifying the "
    "details, which gives a coherent and complete answer.",
)


def _generic_answer(parsed: ParsedMessage, rng: Random) -> str:
    topic = normalize_text(parsed.subtask or parsed.question)
    if len(topic) > 120:
        topic = topic[:117] + "..."
    return f"{rng.choice(_GENERIC_OPENERS)} Regarding: {topic}\n\n{rng.choice(_GENERIC_BODIES)}"
