"""Difficulty filter: solve rates through the executor, kept strictly between min and max."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor_core.data.config import DifficultyConfig
from conductor_core.data.difficulty import Rating, apply_ratings, difficulty_filter
from conductor_core.errors import ConfigError
from conductor_core.sample_streams import Stream, curation_index, position_of
from conductor_core.tasks.problem import Problem
from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.types import CallResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "curation"


def prob(pid: str, question: str, reference: str = "1") -> Problem:
    return Problem(id=pid, source="s", domain="math", question=question, reference=reference)


class ScriptedPool:
    """Answers right for the first ``right[q]`` samples of each question (the curation stream's
    positions); ``down`` fails all. ``calls`` records (worker, sample) of each call."""

    def __init__(self, right: dict[str, int], down: set[str] = frozenset()) -> None:
        self.right = right
        self.down = down
        self.calls: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return 2

    def worker(self, worker_id: int) -> WorkerConfig:
        return WorkerConfig(provider="simulated", model=f"w{worker_id}")

    async def call(self, worker_id, messages, *, sample_index=0, **kwargs) -> CallResult:
        stream, sample = position_of(sample_index)
        assert stream is Stream.CURATION  # never an index training or evaluation draws
        self.calls.append((worker_id, sample))
        text = messages[-1]["content"]
        q = next(k for k in self.right if k in text)
        if q in self.down:
            return CallResult(worker=worker_id, model="w", error="boom", error_kind="server_error")
        answer = "RIGHT" if sample < self.right[q] else "WRONG"
        return CallResult(worker=worker_id, model="w", text=answer)


async def exact_grader(problem: Problem, answer: str) -> bool:
    return answer.strip() == "RIGHT"


def test_keeps_only_problems_strictly_between_min_and_max() -> None:
    problems = [prob("never", "Q-never"), prob("some", "Q-some"), prob("always", "Q-always")]
    pool = ScriptedPool({"Q-never": 0, "Q-some": 2, "Q-always": 4})
    cfg = DifficultyConfig(pool="unused.yaml", workers=[0], samples=4)
    kept, removed = difficulty_filter(problems, cfg, pool=pool, grader=exact_grader, progress=False)
    assert [p.id for p in kept] == ["some"]
    assert kept[0].metadata["solve_rate"] == 0.5 and kept[0].metadata["solve_samples"] == 4
    reasons = {r.id: r.reason for r in removed}
    assert reasons["never"].startswith("too hard: solve rate 0.00 (0/4)")
    assert reasons["always"].startswith("too easy: solve rate 1.00 (4/4)")
    assert sorted(set(pool.calls)) == [(0, s) for s in range(4)]


def test_rates_pool_over_several_workers_and_custom_bounds() -> None:
    problems = [prob("a", "Q-a"), prob("b", "Q-b")]
    pool = ScriptedPool({"Q-a": 1, "Q-b": 3})  # per worker: 1/3 and 3/3 right
    cfg = DifficultyConfig(pool="p.yaml", workers=[0, 1], samples=3, min_rate=0.2, max_rate=0.9)
    kept, removed = difficulty_filter(problems, cfg, pool=pool, grader=exact_grader, progress=False)
    assert [p.id for p in kept] == ["a"]
    assert kept[0].metadata["solve_samples"] == 6
    assert {w for w, _ in pool.calls} == {0, 1}
    assert [r.id for r in removed] == ["b"]


def test_infrastructure_failures_are_excluded_not_scored() -> None:
    problems = [prob("down", "Q-down"), prob("up", "Q-up")]
    pool = ScriptedPool({"Q-down": 2, "Q-up": 1}, down={"Q-down"})
    cfg = DifficultyConfig(pool="p.yaml", samples=2)
    kept, removed = difficulty_filter(problems, cfg, pool=pool, grader=exact_grader, progress=False)
    assert [p.id for p in kept] == ["up"]
    assert removed[0].id == "down" and "infra errors" in removed[0].reason


def test_apply_ratings_rate_property() -> None:
    assert Rating(1, 4, 0).rate == 0.25 and Rating(0, 0, 3).rate is None
    cfg = DifficultyConfig(pool="p.yaml")
    kept, removed = apply_ratings([prob("x", "Q")], [Rating(0, 0, 3)], cfg)
    assert not kept and removed[0].id == "x"


def test_real_simulated_pool_with_cache_is_deterministic(tmp_path: Path) -> None:
    problems = [
        prob(f"m{i}", f"What is {i} plus {i + 1}? Give the number.", str(2 * i + 1))
        for i in range(8)
    ]
    cfg = DifficultyConfig(
        pool=str(FIXTURES / "pool.yaml"),
        workers=[0],
        samples=6,
        cache_path=str(tmp_path / "cache.sqlite"),
    )
    first = difficulty_filter(problems, cfg, progress=False)
    assert (tmp_path / "cache.sqlite").exists()
    rates = [p.metadata["solve_rate"] for p in first.kept]
    assert first.kept and all(0.0 < r < 1.0 for r in rates)
    assert len(first.kept) + len(first.removed) == len(problems)
    second = difficulty_filter(problems, cfg, progress=False)
    assert [p.id for p in second.kept] == [p.id for p in first.kept]
    assert [p.metadata["solve_rate"] for p in second.kept] == rates


def test_unknown_worker_id_is_a_config_error() -> None:
    cfg = DifficultyConfig(pool=str(FIXTURES / "pool.yaml"), workers=[3])
    with pytest.raises(ConfigError, match=r"difficulty\.workers: ids \[3\]"):
        difficulty_filter([prob("a", "Q")], cfg, progress=False)


def test_progress_bar_does_not_change_results() -> None:
    problems = [prob("some", "Q-some")]
    cfg = DifficultyConfig(pool="p.yaml", samples=2)
    kept, _ = difficulty_filter(
        problems, cfg, pool=ScriptedPool({"Q-some": 1}), grader=exact_grader, progress=True
    )
    assert [p.id for p in kept] == ["some"]


def test_each_sample_is_a_fixed_one_step_plan_through_solve(monkeypatch) -> None:
    import conductor_core.data.difficulty as difficulty_module
    from conductor_core.policy.fixed import FixedPlanSource

    real_solve = difficulty_module.solve
    seen = []

    async def watched(question, plan_source, pool, **kwargs):
        trace = await real_solve(question, plan_source, pool, **kwargs)
        seen.append((plan_source, kwargs["sample_index"], trace))
        return trace

    monkeypatch.setattr(difficulty_module, "solve", watched)
    cfg = DifficultyConfig(pool="p.yaml", workers=[1], samples=3, subtask="Answer it.")
    pool = ScriptedPool({"Q-some": 2})
    kept, _ = difficulty_filter(
        [prob("some", "Q-some")], cfg, pool=pool, grader=exact_grader, progress=False
    )
    assert kept[0].metadata["solve_rate"] == round(2 / 3, 4)
    assert [k for _, k, _ in seen] == [curation_index(k) for k in range(3)]
    for source, _, trace in seen:
        assert isinstance(source, FixedPlanSource)
        (round_,) = trace.rounds
        assert round_.raw_plan.startswith("# difficulty: worker 1")
        (step,) = round_.workflow.steps
        assert step.worker == 1 and step.subtask == "Answer it."
