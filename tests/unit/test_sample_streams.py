"""The sample-index scheme (conductor_core/sample_streams.py): over realistic ranges no index of
one stream (training, evaluation, expert starts, recursion starts, curation) is an index of
another, in any round of the solve loop or repeat of the executor; each stream's indices are one
to one; training keeps the indices recorded runs drew; what the layout cannot hold is refused.

The functions are checked from outside: each stream's indices over its ranges lie between those of
its smallest and largest arguments (every formula grows with each argument), and those intervals,
moved by every round and repeat, must not overlap. The scheme before issue 47 fails this at once:
its training, evaluation and expert-start indices all started at 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conductor_core import sample_streams as ss
from conductor_core.errors import ConfigError
from conductor_core.sample_streams import SampleIndexError, Stream

STEPS = 100_000
ROWS = 32 * 1024  # questions per step x plans per question (GRPO groups of up to 1024)
EXECUTIONS = 8  # reward.executions_per_plan's largest
EVAL_SEEDS = 1_000
EVAL_REPEATS = 1_024
EVAL_DRAWS = 64  # self-consistency's samples per attempt
PROBLEMS = 1_000_000
EXPERT_RUNS = 16 * 4_096  # pool workers x expert_start.executions
CONTEXTS = 4_096  # the recursion start's runs per question
CURATION_SAMPLES = 1_024
ROUNDS = 8
REPEATS = 20  # a plan has at most 20 steps


def _drawn(index: int, draws: int, draw: int) -> int:
    return ss.draw_index(index, draws, draw)


# Each stream: (its index of the smallest arguments, of the largest) over the ranges above.
STREAMS: dict[str, Callable[[bool], int]] = {
    "training": lambda top: _drawn(
        ss.training_index(STEPS - 1 if top else 0, ROWS, ROWS - 1 if top else 0),
        EXECUTIONS,
        EXECUTIONS - 1 if top else 0,
    ),
    "evaluation": lambda top: _drawn(
        ss.evaluation_index(EVAL_SEEDS - 1 if top else 0, EVAL_REPEATS - 1 if top else 0),
        EVAL_DRAWS,
        EVAL_DRAWS - 1 if top else 0,
    ),
    "expert start": lambda top: ss.expert_start_index(
        PROBLEMS - 1 if top else 0, EXPERT_RUNS, EXPERT_RUNS - 1 if top else 0
    ),
    "recursion start": lambda top: _drawn(
        ss.recursion_start_index(PROBLEMS - 1 if top else 0, CONTEXTS, CONTEXTS - 1 if top else 0),
        EXECUTIONS,
        EXECUTIONS - 1 if top else 0,
    ),
    "curation": lambda top: ss.curation_index(CURATION_SAMPLES - 1 if top else 0),
}


def _in_run(index: int, round_: int, repeat: int) -> int:
    """Where the solve loop and the executor take an index: round ``round_``, repeat ``repeat``."""
    return ss.repeat_index(ss.round_index(index, round_), repeat)


def test_no_two_streams_rounds_or_repeats_share_an_index_over_realistic_ranges():
    intervals = []
    for (name, bounds), r, n in itertools.product(STREAMS.items(), range(ROUNDS), range(REPEATS)):
        low, high = _in_run(bounds(False), r, n), _in_run(bounds(True), r, n)
        assert low <= high < 2**63, (name, r, n)  # seed + index is still a 64-bit seed
        intervals.append((low, high, f"{name}, round {r}, repeat {n}"))
    intervals.sort()
    for (_, high, one), (low, _, other) in itertools.pairwise(intervals):
        assert high < low, f"{one} overlaps {other}"


def test_each_stream_is_one_to_one_exhaustively_on_small_ranges_and_at_its_ends():
    seen: dict[int, tuple] = {}

    def add(index: int, *what: object) -> None:
        assert seen.setdefault(index, what) == what, f"{what} and {seen[index]} share {index}"

    steps = [*range(6), STEPS - 2, STEPS - 1]
    for rows, executions in ((1, 1), (3, 2), (8, 3), (ROWS, EXECUTIONS)):
        seen.clear()  # one run's rows and executions
        row_ids = sorted({*range(min(rows, 8)), rows - 1})
        for step, row, e in itertools.product(steps, row_ids, range(executions)):
            add(_drawn(ss.training_index(step, rows, row), executions, e), step, row, e)
    seen.clear()
    seeds, repeats = [*range(5), EVAL_SEEDS - 1], [*range(5), EVAL_REPEATS - 1]
    for seed, repeat, k in itertools.product(seeds, repeats, range(3)):
        add(_drawn(ss.evaluation_index(seed, repeat), 3, k), "eval", seed, repeat, k)
    for make in (ss.expert_start_index, ss.recursion_start_index):
        for runs in (1, 4, EXPERT_RUNS):
            seen.clear()  # one start's runs
            places = [*range(5), PROBLEMS - 1]
            for problem, run in itertools.product(places, sorted({*range(min(runs, 5)), runs - 1})):
                add(make(problem, runs, run), make.__name__, runs, problem, run)
    seen.clear()
    for sample in range(CURATION_SAMPLES):
        add(ss.curation_index(sample), "curation", sample)


draws = st.one_of(
    st.tuples(
        st.just("training"),
        st.integers(0, STEPS - 1),
        st.integers(0, ROWS - 1),
        st.integers(0, EXECUTIONS - 1),
    ),
    st.tuples(
        st.just("evaluation"),
        st.integers(0, EVAL_SEEDS - 1),
        st.integers(0, EVAL_REPEATS - 1),
        st.integers(0, EVAL_DRAWS - 1),
    ),
    st.tuples(
        st.just("expert start"), st.integers(0, PROBLEMS - 1), st.integers(0, EXPERT_RUNS - 1)
    ),
    st.tuples(
        st.just("recursion start"),
        st.integers(0, PROBLEMS - 1),
        st.integers(0, CONTEXTS - 1),
        st.integers(0, EXECUTIONS - 1),
    ),
    st.tuples(st.just("curation"), st.integers(0, CURATION_SAMPLES - 1)),
)
runs = st.tuples(draws, st.integers(0, ROUNDS - 1), st.integers(0, REPEATS - 1))


def _index(run: tuple) -> int:
    (kind, *args), round_, repeat = run
    if kind == "training":
        step, row, e = args
        index = _drawn(ss.training_index(step, ROWS, row), EXECUTIONS, e)
    elif kind == "evaluation":
        seed, repeat_, k = args
        index = _drawn(ss.evaluation_index(seed, repeat_), EVAL_DRAWS, k)
    elif kind == "expert start":
        index = ss.expert_start_index(args[0], EXPERT_RUNS, args[1])
    elif kind == "recursion start":
        problem, context, e = args
        index = _drawn(ss.recursion_start_index(problem, CONTEXTS, context), EXECUTIONS, e)
    else:
        index = ss.curation_index(args[0])
    return _in_run(index, round_, repeat)


@given(runs, runs)
def test_two_different_draws_never_share_an_index(one, other):
    assert (_index(one) == _index(other)) is (one == other)


def test_training_keeps_the_indices_recorded_runs_drew():
    """Stream 0 with the reward's old ``step * n * 4 + row`` and ``index * executions + e``, and
    the old round and repeat strides: a recorded single-process run replays its draws."""
    for step, rows, row, executions, e in [
        (0, 8, 0, 1, 0),
        (7, 256, 255, 4, 3),
        (199, 16, 5, 2, 1),
    ]:
        index = ss.training_index(step, rows, row)
        assert index == step * rows * 4 + row
        assert ss.draw_index(index, executions, e) == index * executions + e
    assert (ss.ROUND_STRIDE, ss.REPEAT_STRIDE) == (1 << 40, 1 << 48)
    assert ss.round_index(5, 0) == ss.repeat_index(5, 0) == 5  # round 1, first request: as is
    assert ss.position_of(ss.evaluation_index(3, 2)) == (Stream.EVALUATION, 3 * 1_000_003 + 2)


def test_a_user_chosen_index_gets_rounds_and_repeats_too():
    """``--seed`` or a request's ``seed`` is any index: the loop and the executor add theirs."""
    assert ss.round_index(2**50, 1) == 2**50 + 2**40
    assert ss.repeat_index(2**50, 2) == 2**50 + 2 * 2**48


@pytest.mark.parametrize(
    ("make", "named"),
    [
        (lambda: ss.training_index(-1, 8, 0), "the step must be 0 or more"),
        (lambda: ss.training_index(0, 0, 0), "the rows of a step must be 1 or more"),
        (lambda: ss.training_index(0, 8, 8), "the row of a step of 8 rows must be"),
        (lambda: ss.training_index(2 * 10**6, ROWS, 0), "does not fit the training stream"),
        (lambda: ss.draw_index(ss.training_index(STEPS, ROWS, 0), 64, 0), "training stream"),
        (lambda: ss.draw_index(0, 4, 4), "the draw of 4 must be"),
        (lambda: ss.draw_index(ss.round_index(0, 1), 2, 0), "no round or repeat in it"),
        (lambda: ss.draw_index(7 << 37, 2, 0), "is in no stream"),
        (lambda: ss.evaluation_index(-1, 0), "the evaluation seed must be 0 or more"),
        (lambda: ss.evaluation_index(0, 1_000_003), "the evaluation repeat must be"),
        (lambda: ss.evaluation_index(200_000, 0), "does not fit the evaluation stream"),
        (lambda: ss.expert_start_index(0, 4, 4), "the run of 4 must be"),
        (lambda: ss.recursion_start_index(-2, 4, 0), "the problem's place must be 0 or more"),
        (lambda: ss.curation_index(-1), "the curation sample must be 0 or more"),
        (lambda: ss.round_index(0, ss.MAX_ROUNDS), "the round must be 0 or more and below 256"),
        (lambda: ss.repeat_index(0, ss.MAX_REPEATS), "the repeat must be 0 or more and below"),
    ],
)
def test_what_the_layout_cannot_hold_is_refused_with_the_field_named(make, named):
    with pytest.raises(SampleIndexError, match=named) as caught:
        make()
    assert isinstance(caught.value, ValueError) and isinstance(caught.value, ConfigError)


def test_an_evaluation_seed_the_stream_cannot_hold_is_refused_before_it_runs():
    from conductor_core.evaluate.runner import RunConfig

    assert RunConfig(seed=3).sample_index(2) == ss.evaluation_index(3, 2)
    with pytest.raises(ConfigError, match="the evaluation seed must be 0 or more"):
        RunConfig(seed=-1)


def test_the_old_names_in_solve_still_work_with_a_warning():
    import conductor_core.solve as solve

    with pytest.warns(DeprecationWarning, match="moved to conductor_core.sample_streams") as w:
        assert solve.ROUND_STRIDE == ss.ROUND_STRIDE
    assert w[0].filename == __file__  # the line that asked for the old name
    with pytest.warns(DeprecationWarning, match="sample_streams.round_index"):
        assert solve.round_sample_index(3, 1) == ss.round_index(3, 1)
    with pytest.raises(AttributeError):
        solve.no_such_name  # noqa: B018


@given(
    st.integers(min_value=0, max_value=ss.REPEAT_STRIDE - 1),
    st.integers(min_value=0, max_value=ss.MAX_REPEATS - 1),
)
def test_every_repeat_of_a_request_belongs_to_the_run_it_was_made_in(index, repeat):
    assert ss.run_index(ss.repeat_index(index, repeat)) == index
