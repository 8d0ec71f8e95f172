"""Aggregation of evaluation records: accuracy mean and standard error over repeats, cost, plan
shapes, worker usage and failure rates, per (method, benchmark) and overall per method."""

from __future__ import annotations

import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable

from pydantic import BaseModel, Field

from conductor_core.evaluate.records import EvalRecord, dedupe

OVERALL = "average"


class Stats(BaseModel):
    """Figures of one method on one benchmark (or ``average`` over benchmarks)."""

    method: str
    benchmark: str
    problems: int = 0
    repeats: int = 0
    records: int = 0
    accuracy: float = 0.0
    stderr: float = 0.0
    repeat_accuracies: list[float] = Field(default_factory=list)
    mean_reward: float | None = None
    calls_per_question: float = 0.0
    tokens_per_question: float = 0.0
    cost_per_question: float = 0.0
    format_error_rate: float = 0.0
    infra_failure_rate: float = 0.0
    plan_lengths: dict[int, int] = Field(default_factory=dict)
    worker_share: dict[int, float] = Field(default_factory=dict)
    all_access_share: float = 0.0
    wall_s_per_question: float = 0.0


def accuracy_with_stderr(per_repeat: list[list[bool]]) -> tuple[float, float, list[float]]:
    """Mean accuracy over repeats and its standard error.

    With two or more repeats the error is the standard deviation of the per-repeat accuracies
    divided by sqrt(repeats), as in the paper; with one repeat it is the binomial error
    sqrt(p (1 - p) / n).
    """
    accs = [sum(r) / len(r) for r in per_repeat if r]
    if not accs:
        return 0.0, 0.0, []
    mean = statistics.fmean(accs)
    if len(accs) > 1:
        return mean, statistics.stdev(accs) / math.sqrt(len(accs)), accs
    n = len(per_repeat[0])
    return mean, math.sqrt(mean * (1 - mean) / n) if n else 0.0, accs


def _stats(method: str, benchmark: str, recs: list[EvalRecord]) -> Stats:
    graded = [r for r in recs if not r.infra_error]
    by_repeat: dict[int, list[bool]] = defaultdict(list)
    for r in graded:
        by_repeat[r.repeat].append(r.correct)
    acc, se, accs = accuracy_with_stderr([by_repeat[k] for k in sorted(by_repeat)])
    calls = Counter(w for r in graded for w in r.workers)
    total_calls = sum(calls.values())
    rewards = [r.reward for r in graded if r.reward is not None]
    n = len(recs)
    return Stats(
        method=method,
        benchmark=benchmark,
        problems=len({r.problem_id for r in recs}),
        repeats=len({r.repeat for r in recs}),
        records=n,
        accuracy=acc,
        stderr=se,
        repeat_accuracies=accs,
        mean_reward=statistics.fmean(rewards) if rewards else None,
        calls_per_question=sum(r.calls for r in recs) / n if n else 0.0,
        tokens_per_question=sum(r.tokens for r in recs) / n if n else 0.0,
        cost_per_question=sum(r.cost for r in recs) / n if n else 0.0,
        format_error_rate=sum(r.format_error for r in recs) / n if n else 0.0,
        infra_failure_rate=sum(r.infra_error for r in recs) / n if n else 0.0,
        plan_lengths=dict(sorted(Counter(r.plan_len for r in graded if r.plan_len).items())),
        worker_share={w: c / total_calls for w, c in sorted(calls.items())},
        all_access_share=(sum(r.all_access_steps for r in graded) / total_calls)
        if total_calls
        else 0.0,
        wall_s_per_question=sum(r.wall_s for r in recs) / n if n else 0.0,
    )


class Summary(BaseModel):
    """All figures of an evaluation."""

    methods: list[str]
    benchmarks: list[str]
    rows: list[Stats]

    def get(self, method: str, benchmark: str = OVERALL) -> Stats:
        """The row of ``method`` on ``benchmark`` (default: the average over benchmarks)."""
        for row in self.rows:
            if row.method == method and row.benchmark == benchmark:
                return row
        raise KeyError((method, benchmark))


def aggregate(records: Iterable[EvalRecord]) -> Summary:
    """Per (method, benchmark) statistics, plus an ``average`` row per method.

    The average row's accuracy is the unweighted mean of the benchmark accuracies (as the paper's
    tables average benchmarks) with the standard errors combined in quadrature; its cost and usage
    figures are per question over all records.
    """
    recs = dedupe(records)
    methods = list(dict.fromkeys(r.method for r in recs))
    benchmarks = sorted({r.benchmark for r in recs})
    groups: dict[tuple[str, str], list[EvalRecord]] = defaultdict(list)
    for r in recs:
        groups[(r.method, r.benchmark)].append(r)
    rows: list[Stats] = []
    for m in methods:
        per_bench = [_stats(m, b, groups[(m, b)]) for b in benchmarks if groups[(m, b)]]
        rows += per_bench
        overall = _stats(m, OVERALL, [r for r in recs if r.method == m])
        overall.accuracy = statistics.fmean(s.accuracy for s in per_bench)
        overall.stderr = math.sqrt(sum(s.stderr**2 for s in per_bench)) / len(per_bench)
        overall.repeat_accuracies = []
        rows.append(overall)
    return Summary(methods=methods, benchmarks=benchmarks, rows=rows)
