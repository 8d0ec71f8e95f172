"""The GRPO reward: parse each plan, run it on the worker pool, grade the last step's output.

Reward per completion: 0 when the plan does not parse, 0.5 when it parses but the answer is wrong,
1 when right, and ``None`` when the execution was spoiled by an infrastructure failure (TRL then
leaves that sample out of the update). With ``executions_per_plan > 1`` the reward is the mean
over the executions that were not spoiled.

TRL runs async reward functions on a background event-loop thread: :class:`ConductorReward`
creates its :class:`~conductor_core.workers.pool.WorkerPool` lazily inside the loop that calls
it (and a fresh one if a later call comes from another loop), so semaphores and HTTP clients are
bound to the right loop.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from conductor_core.tasks.problem import Problem
from conductor_core.workers.config import PoolConfig
from conductor_core.workflow.executor import Budget, execute
from conductor_core.workflow.model import ALL, AccessMode
from conductor_core.workflow.parser import try_parse_plan


@dataclass(frozen=True)
class PreviousRound:
    """What a recursion round builds on: the previous plan (as the Conductor wrote it, in the
    offered numbering) and its final answer (``None`` when it produced none)."""

    plan: str
    answer: str | None


@dataclass
class PlanOutcome:
    """The scored result of one completion (one plan)."""

    reward: float | None
    domain: str
    plan_ok: bool = False
    format_code: str | None = None
    keep: bool = False
    infra_error: bool = False
    correct: bool | None = None
    answer: str | None = None
    steps: int = 0
    workers: list[int] = field(default_factory=list)
    all_access_steps: int = 0
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0

    @property
    def final_worker(self) -> int | None:
        """Pool id of the worker whose output is the answer (the last step's)."""
        return self.workers[-1] if self.workers else None

    def to_dict(self) -> dict[str, Any]:
        """JSON form (for sample-plan tables)."""
        return asdict(self)


def completion_text(completion: Any) -> str:
    """The text of a TRL completion (a string, or chat messages whose last one is the reply)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        last = completion[-1]
        if isinstance(last, Mapping):
            return str(last.get("content") or "")
    return str(completion or "")


async def _grade(problem: Problem, answer: str | None):
    """Grade ``answer`` (the async grader when available; graders are safe off the main thread)."""
    from conductor_core.tasks import grading

    agrade = getattr(grading, "agrade", None)
    if agrade is not None:
        return await agrade(problem, answer or "")
    return await asyncio.to_thread(grading.grade, problem, answer or "")


def _reward_value(plan_ok: bool, verdict: Any, infra_error: bool) -> float | None:
    from conductor_core.tasks import grading

    return grading.reward(plan_ok=plan_ok, verdict=verdict, infra_error=infra_error)


async def score_plan(
    text: str,
    problem: Problem,
    pool: Any,
    offered: Sequence[int],
    *,
    max_steps: int = 5,
    access_mode: AccessMode | str = AccessMode.BINARY,
    executions: int = 1,
    budget: Budget | None = None,
    sample_index: int = 0,
    previous: PreviousRound | None = None,
) -> PlanOutcome:
    """Parse ``text`` for the ``offered`` workers, run it on ``pool`` and grade it.

    In a recursion round (``previous`` given) three empty lists keep the previous answer, which
    is then graded; steps with ``"all"`` access see the previous answer.
    """
    domain = str(problem.domain)
    workflow, error = try_parse_plan(
        text,
        num_workers=len(offered),
        max_steps=max_steps,
        access_mode=AccessMode(access_mode),
        allow_empty=previous is not None,
    )
    if workflow is None:
        code = error.code.value if error is not None else "unparsable"
        reward = _reward_value(False, None, False)
        return PlanOutcome(reward=reward, domain=domain, format_code=code)
    if workflow.is_keep and previous is not None:
        verdict = await _grade(problem, previous.answer)
        return PlanOutcome(
            reward=_reward_value(True, verdict, False),
            domain=domain,
            plan_ok=True,
            keep=True,
            correct=bool(verdict.correct),
            answer=previous.answer,
        )
    mapped = workflow.remap_workers(list(offered))
    outcome = PlanOutcome(
        reward=None,
        domain=domain,
        plan_ok=True,
        steps=len(mapped),
        workers=mapped.worker_ids(),
        all_access_steps=sum(1 for s in mapped.steps if s.access == ALL),
    )
    rewards: list[float] = []
    corrects: list[bool] = []
    for e in range(executions):
        trace = await execute(
            mapped,
            problem.question,
            pool,
            budget=budget or Budget(),
            previous_answer=previous.answer if previous is not None else None,
            sample_index=sample_index * executions + e,
        )
        outcome.calls += trace.calls
        outcome.input_tokens += trace.input_tokens
        outcome.output_tokens += trace.output_tokens
        outcome.cost += trace.cost
        if trace.infra_error:
            continue
        verdict = await _grade(problem, trace.answer)
        value = _reward_value(True, verdict, False)
        if value is None:
            continue
        rewards.append(value)
        corrects.append(bool(verdict.correct))
        if outcome.answer is None:
            outcome.answer = trace.answer
    if not rewards:
        outcome.infra_error = True
        return outcome
    outcome.reward = sum(rewards) / len(rewards)
    outcome.correct = sum(corrects) * 2 > len(corrects)
    return outcome


def best_workers(pool: PoolConfig) -> dict[str, int]:
    """For a simulated pool: each domain's best worker (highest skill; first on ties)."""
    best: dict[str, tuple[float, int]] = {}
    for i, w in enumerate(pool.workers):
        if w.simulation is None:
            continue
        for domain, skill in w.simulation.skills.items():
            if domain not in best or skill > best[domain][0]:
                best[domain] = (skill, i)
    return {d: i for d, (_, i) in best.items()}


def summarize(
    outcomes: Sequence[PlanOutcome],
    *,
    pool_size: int,
    best: Mapping[str, int] | None = None,
) -> dict[str, float]:
    """Batch metrics: reward, format-error and infra rates, steps, access, worker shares, cost.

    Worker shares count the workers of every step of the parsed plans (overall and per domain).
    ``best_worker_share`` is the share of parsed, non-keep plans whose answering (last) step is
    the domain's best worker (``best`` maps domain -> pool id).
    """
    n = len(outcomes)
    if n == 0:
        return {}
    scored = [o.reward for o in outcomes if o.reward is not None]
    parsed = [o for o in outcomes if o.plan_ok]
    ran = [o for o in parsed if not o.keep]
    steps_total = sum(o.steps for o in ran)
    out: dict[str, float] = {
        "reward_mean": sum(scored) / len(scored) if scored else 0.0,
        "reward_std": _std(scored),
        "format_error_rate": 1 - len(parsed) / n,
        "infra_error_rate": sum(1 for o in outcomes if o.infra_error) / n,
        "mean_steps": steps_total / len(ran) if ran else 0.0,
        "all_access_share": sum(o.all_access_steps for o in ran) / steps_total
        if steps_total
        else 0.0,
        "keep_rate": sum(1 for o in parsed if o.keep) / len(parsed) if parsed else 0.0,
        "calls_per_plan": sum(o.calls for o in outcomes) / n,
        "tokens_per_plan": sum(o.input_tokens + o.output_tokens for o in outcomes) / n,
        "cost_per_plan": sum(o.cost for o in outcomes) / n,
    }
    counts: Counter[int] = Counter()
    per_domain: dict[str, Counter[int]] = defaultdict(Counter)
    for o in ran:
        counts.update(o.workers)
        per_domain[o.domain].update(o.workers)
    for wid in range(pool_size):
        out[f"worker_share/{wid}"] = counts[wid] / steps_total if steps_total else 0.0
    for domain, c in sorted(per_domain.items()):
        total = sum(c.values())
        for wid in range(pool_size):
            out[f"worker_share/{domain}/{wid}"] = c[wid] / total if total else 0.0
    if best:
        judged = [o for o in ran if o.domain in best]
        hits = sum(1 for o in judged if o.final_worker == best[o.domain])
        out["best_worker_share"] = hits / len(judged) if judged else 0.0
    return out


def _std(values: Sequence[float]) -> float:
    if len(values) < 2:
        return 0.0
    mean = sum(values) / len(values)
    return (sum((v - mean) ** 2 for v in values) / (len(values) - 1)) ** 0.5


PoolFactory = Callable[[], Any]


@dataclass
class RoundState:
    """Per-batch recursion context shared by the recursive trainer and the reward.

    ``previous`` maps a row (completion index in the batch) to the round it builds on;
    ``cached`` holds outcomes already computed during generation (forced round-1 plans);
    ``excluded`` rows get ``None`` (their previous round was spoiled by infrastructure).
    """

    previous: dict[int, PreviousRound] = field(default_factory=dict)
    cached: dict[int, PlanOutcome] = field(default_factory=dict)
    excluded: set[int] = field(default_factory=set)

    def clear(self) -> None:
        """Forget the previous batch."""
        self.previous.clear()
        self.cached.clear()
        self.excluded.clear()


class ConductorReward:
    """TRL reward function: ``await reward(prompts=..., completions=..., problem_id=..., ...)``.

    Args:
        problems: every problem a dataset row may name, by id.
        pool_config: the pool plans run on (its simulated workers use ``bank``).
        bank: problem bank for simulated workers.
        max_steps, access_mode: the plan format (as stated in the prompt).
        executions: executions averaged per plan.
        budget: per-plan budget.
        max_concurrent: plans executed at the same time (calls are also bounded per worker).
        rounds: the recursion context of the current batch (recursive stage only).
        pool_factory: builds the pool (default: ``WorkerPool(pool_config, bank=bank)``).
    """

    __name__ = "conductor"

    def __init__(
        self,
        problems: Mapping[str, Problem],
        pool_config: PoolConfig,
        *,
        bank: Any = None,
        max_steps: int = 5,
        access_mode: AccessMode | str = AccessMode.BINARY,
        executions: int = 1,
        budget: Budget | None = None,
        max_concurrent: int = 256,
        rounds: RoundState | None = None,
        pool_factory: PoolFactory | None = None,
    ) -> None:
        self.problems = dict(problems)
        self.pool_config = pool_config
        self.bank = bank
        self.max_steps = max_steps
        self.access_mode = AccessMode(access_mode)
        self.executions = executions
        self.budget = budget
        self.max_concurrent = max_concurrent
        self.rounds = rounds
        self._pool_factory = pool_factory
        self._pool: Any = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self.best = best_workers(pool_config)
        self.last_outcomes: list[PlanOutcome] = []
        self.last_texts: list[str] = []
        self.last_ids: list[str] = []
        self.last_metrics: dict[str, float] = {}
        self.calls = 0

    def pool(self) -> Any:
        """The pool bound to the running event loop (created on first use in that loop)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            if self._pool_factory is not None:
                self._pool = self._pool_factory()
            else:
                from conductor_core.workers.pool import WorkerPool

                self._pool = WorkerPool(self.pool_config, bank=self.bank)
            self._pool_loop = loop
        return self._pool

    async def aclose(self) -> None:
        """Close the pool (call from the loop that used it)."""
        if self._pool is not None and hasattr(self._pool, "aclose"):
            await self._pool.aclose()
        self._pool = None
        self._pool_loop = None

    async def score(
        self,
        texts: Sequence[str],
        problem_ids: Sequence[str],
        offered: Sequence[Sequence[int] | None],
        *,
        base_index: int = 0,
        previous: Sequence[PreviousRound | None] | None = None,
        rounds: RoundState | None = None,
    ) -> list[PlanOutcome]:
        """Score plans concurrently (at most ``max_concurrent`` at once), in input order.

        With ``rounds``, cached outcomes are reused, excluded rows score ``None`` and rows with a
        previous round are scored as recursion rounds.
        """
        pool = self.pool()
        sem = asyncio.Semaphore(self.max_concurrent)
        pool_size = len(self.pool_config.workers)

        async def one(i: int) -> PlanOutcome:
            pid = problem_ids[i]
            problem = self.problems.get(pid)
            if problem is None:
                raise KeyError(f"problem_id '{pid}' is not among the training problems")
            ids = list(offered[i]) if offered[i] is not None else list(range(pool_size))
            prev = previous[i] if previous is not None else None
            if rounds is not None:
                if i in rounds.cached:
                    return rounds.cached[i]
                if i in rounds.excluded:
                    return PlanOutcome(reward=None, domain=str(problem.domain), infra_error=True)
                prev = rounds.previous.get(i, prev)
            async with sem:
                return await score_plan(
                    texts[i],
                    problem,
                    pool,
                    ids,
                    max_steps=self.max_steps,
                    access_mode=self.access_mode,
                    executions=self.executions,
                    budget=self.budget,
                    sample_index=base_index + i,
                    previous=prev,
                )

        return list(await asyncio.gather(*(one(i) for i in range(len(texts)))))

    async def __call__(
        self,
        prompts: Sequence[Any] | None = None,
        completions: Sequence[Any] = (),
        problem_id: Sequence[str] = (),
        offered: Sequence[Sequence[int] | None] | None = None,
        trainer_state: Any = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **_: Any,
    ) -> list[float | None]:
        """Score a batch of completions; returns one reward (or None) per completion."""
        texts = [completion_text(c) for c in completions]
        n = len(texts)
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        offered_list = list(offered) if offered is not None else [None] * n
        outcomes = await self.score(
            texts, list(problem_id), offered_list, base_index=step * n * 4, rounds=self.rounds
        )
        self.calls += 1
        self.last_outcomes = outcomes
        self.last_texts = texts
        self.last_ids = list(problem_id)
        self.last_metrics = summarize(
            outcomes, pool_size=len(self.pool_config.workers), best=self.best
        )
        if log_metric is not None:
            for name, value in self.last_metrics.items():
                if name not in ("reward_mean", "reward_std"):
                    log_metric(f"conductor/{name}", value)
        if log_extra is not None:
            log_extra("format_error", [o.format_code or "" for o in outcomes])
            log_extra("final_worker", [o.final_worker for o in outcomes])
        return [o.reward for o in outcomes]
