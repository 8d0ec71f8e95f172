"""Sample indices: which draw of a worker each call is, one stream of draws per use.

A sample index picks one draw of a reply: a simulated worker's reply is fixed by its prompt and
the index, a local model is seeded with ``seed + index``, and the response cache keys on it
(:mod:`conductor_core.workers`). Two calls of one prompt with one index are the same draw, so
draws meant to be independent (training's plans, evaluation's repeats, the expert starts'
measurements, a recursion round after the first, a request a plan makes twice) must never share
an index. This module owns the layout; every place that makes an index calls it.

An index is a non-negative integer below ``2**63`` (so ``seed + index`` is still a signed 64-bit
seed), made of four fields::

    bits 48-62  repeat     the n-th identical request of one plan run (executor; 0: the first)
    bits 40-47  round      the round of the solve loop (0: the first)
    bits 37-39  stream     who draws (:class:`Stream`)
    bits  0-36  position   the draw within its stream, up to 2**37 (about 1.4e11)

The streams and their positions:

=====================  ====================================================================
``TRAINING`` (0)       ``step * rows * 4 + row`` (:func:`training_index`): row ``row`` of the
                       ``rows`` plans of GRPO step ``step``, counted over all ranks (a forced
                       round-1 plan of the recursive stage runs at its own row's index)
``EVALUATION`` (1)     ``seed * 1_000_003 + repeat`` (:func:`evaluation_index`)
``EXPERT_START`` (2)   ``problem * runs + run`` (:func:`expert_start_index`)
``RECURSION_START``    ``problem * runs + run`` (:func:`recursion_start_index`): a context's
(3)                    first round; the new plan after it runs at the same index in the
                       solve loop's second round (``round_index(index, 1)``)
``CURATION`` (4)       ``sample`` (:func:`curation_index`): the difficulty filter's samples
=====================  ====================================================================

Several draws made for one index (a plan executed ``executions`` times, self-consistency's
samples) are :func:`draw_index`: ``position * draws + draw`` in the same stream. The solve loop
adds the round (:func:`round_index`) and the executor the repeat (:func:`repeat_index`) to any
index, a stream's or one a user chose (``--seed``, a request's ``seed``).

Training is stream 0 with the formula it always had, so recorded training runs replay their
draws; the other streams used to start at 0 as well and drew what training drew.

Realistic ranges fit: 100,000 steps of 32 x 1024 plans executed 8 times take 2**36.6 training
positions; evaluation seeds below 137,000 (divided by the samples a method draws per attempt),
1e6 problems x 16 workers x 4,096 runs, 8 rounds and the executor's at most 20 repeats all fit.
An index a field cannot hold is refused (:class:`SampleIndexError`), never wrapped into another
stream.
"""

from __future__ import annotations

from enum import IntEnum

from conductor_core.errors import ConfigError

__all__ = [
    "EVALUATION_SEED_STRIDE",
    "MAX_REPEATS",
    "MAX_ROUNDS",
    "POSITIONS",
    "REPEAT_STRIDE",
    "ROUND_STRIDE",
    "SampleIndexError",
    "Stream",
    "curation_index",
    "draw_index",
    "evaluation_index",
    "expert_start_index",
    "position_of",
    "recursion_start_index",
    "repeat_index",
    "round_index",
    "run_index",
    "stream_index",
    "training_index",
]

POSITION_BITS = 37
STREAM_BITS = 3
ROUND_BITS = 8
REPEAT_BITS = 15

POSITIONS = 1 << POSITION_BITS
"""Positions per stream."""
ROUND_STRIDE = 1 << (POSITION_BITS + STREAM_BITS)
"""Index distance between rounds of the solve loop (``2**40``)."""
REPEAT_STRIDE = ROUND_STRIDE << ROUND_BITS
"""Index distance between identical requests of one plan run (``2**48``)."""
MAX_ROUNDS = 1 << ROUND_BITS
"""Rounds an index can name (0-based: round ``MAX_ROUNDS - 1`` is the last)."""
MAX_REPEATS = 1 << REPEAT_BITS
"""Identical requests of one plan run an index can name."""
EVALUATION_SEED_STRIDE = 1_000_003
"""Evaluation positions per seed: the repeats one seed can have."""


class SampleIndexError(ConfigError, ValueError):
    """A sample index the layout cannot hold: the message names the field and its range."""


class Stream(IntEnum):
    """Who draws: each stream's indices are its own (the module docstring gives the layout)."""

    TRAINING = 0
    EVALUATION = 1
    EXPERT_START = 2
    RECURSION_START = 3
    CURATION = 4


def _in_range(name: str, value: int, limit: int | None = None, least: int = 0) -> int:
    """``value`` when ``least <= value < limit`` (``limit`` None: no upper bound); else
    refused, naming ``name``."""
    if value < least or (limit is not None and value >= limit):
        upper = "" if limit is None else f" and below {limit}"
        raise SampleIndexError(f"sample index: {name} must be {least} or more{upper}, got {value}")
    return value


def stream_index(stream: Stream, position: int) -> int:
    """The index of ``position`` in ``stream``.

    Raises:
        SampleIndexError: ``position`` outside ``0 <= position < POSITIONS``.
    """
    if not 0 <= position < POSITIONS:
        raise SampleIndexError(
            f"sample index: position {position} does not fit the {stream.name.lower()} stream "
            f"(0 to 2**{POSITION_BITS} - 1); conductor_core/sample_streams.py gives its layout"
        )
    return (int(stream) << POSITION_BITS) | position


def position_of(index: int) -> tuple[Stream, int]:
    """The stream and position of a stream's index (no round or repeat in it).

    Raises:
        SampleIndexError: ``index`` is negative or carries a round or repeat.
    """
    _in_range("a stream's index (no round or repeat in it)", index, ROUND_STRIDE)
    try:
        stream = Stream(index >> POSITION_BITS)
    except ValueError:
        raise SampleIndexError(f"sample index: {index} is in no stream") from None
    return stream, index & (POSITIONS - 1)


def training_index(step: int, rows: int, row: int) -> int:
    """The index of row ``row`` of the ``rows`` plans GRPO step ``step`` scores, ``rows`` and
    ``row`` counted over every rank (rank ``k`` of ``n``, holding ``m`` rows: ``rows = n * m``,
    its row ``i`` is ``k * m + i``)."""
    _in_range("the step", step)
    _in_range("the rows of a step", rows, least=1)
    _in_range(f"the row of a step of {rows} rows", row, rows)
    return stream_index(Stream.TRAINING, step * rows * 4 + row)


def evaluation_index(seed: int, repeat: int) -> int:
    """The index of repeat ``repeat`` of an evaluation with seed ``seed`` (each method, problem
    and repeat: the methods of one evaluation draw alike, so they are compared on equal draws)."""
    _in_range("the evaluation seed", seed)
    _in_range("the evaluation repeat", repeat, EVALUATION_SEED_STRIDE)
    return stream_index(Stream.EVALUATION, seed * EVALUATION_SEED_STRIDE + repeat)


def expert_start_index(problem: int, runs: int, run: int) -> int:
    """The index of run ``run`` of the ``runs`` one-step plan runs the expert start makes on the
    ``problem``-th question (its place in the list, so a resumed start draws what it would
    have)."""
    return stream_index(Stream.EXPERT_START, _runs_position(problem, runs, run))


def recursion_start_index(problem: int, runs: int, run: int) -> int:
    """The index of context ``run`` of the ``runs`` round-2 contexts the recursive stage's
    expert start makes on the ``problem``-th question: its round 1, and (in round 1 of the solve
    loop, :func:`round_index`) the new plan run after it."""
    return stream_index(Stream.RECURSION_START, _runs_position(problem, runs, run))


def _runs_position(problem: int, runs: int, run: int) -> int:
    _in_range("the problem's place", problem)
    _in_range("the runs per problem", runs, least=1)
    _in_range(f"the run of {runs}", run, runs)
    return problem * runs + run


def curation_index(sample: int) -> int:
    """The index of sample ``sample`` the difficulty filter draws of each reference worker."""
    return stream_index(Stream.CURATION, _in_range("the curation sample", sample))


def draw_index(index: int, draws: int, draw: int) -> int:
    """The index of draw ``draw`` of the ``draws`` made for one stream index (a plan executed
    ``draws`` times, self-consistency's samples): ``position * draws + draw`` in the stream of
    ``index``. One draw (``draws`` 1) is ``index`` itself.

    Raises:
        SampleIndexError: ``index`` is not a stream's (a round or repeat in it), ``draw`` is not
            below ``draws``, or the stream has no room for the draws.
    """
    stream, position = position_of(index)
    _in_range("the draws", draws, least=1)
    _in_range(f"the draw of {draws}", draw, draws)
    return stream_index(stream, position * draws + draw)


def round_index(index: int, round_: int) -> int:
    """The index of round ``round_`` (0-based; round 0 is ``index`` itself, so single-round
    traces, seeds and cached replies stay as they are) of the solve loop started at ``index``.

    Raises:
        SampleIndexError: ``round_`` outside ``0 <= round_ < MAX_ROUNDS``.
    """
    return index + _in_range("the round", round_, MAX_ROUNDS) * ROUND_STRIDE


def repeat_index(index: int, repeat: int) -> int:
    """The index of the ``repeat``-th repeat (0: the request made first) of one request within
    a plan run at ``index``.

    Raises:
        SampleIndexError: ``repeat`` outside ``0 <= repeat < MAX_REPEATS``.
    """
    return index + _in_range("the repeat", repeat, MAX_REPEATS) * REPEAT_STRIDE


def run_index(index: int) -> int:
    """The index of the plan run a call at ``index`` belongs to: ``index`` without its repeat
    (the inverse of :func:`repeat_index`). Every repeat of a request in one run shares it."""
    return index % REPEAT_STRIDE
