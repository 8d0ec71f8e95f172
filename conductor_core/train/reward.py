"""The GRPO reward: each completion is run through :func:`~conductor_core.solve.solve` (the one
place a plan is executed, in training, evaluation and serving) and graded.

Reward per completion (:func:`conductor_core.tasks.grading.reward`, through
:func:`conductor_core.outcome.grade`):

- 0 when the plan does not parse, in any round (a recursion round's plan that does not parse
  scores 0, though deployment keeps the previous answer then);
- 0 when it parses but fails by its own fault (``plan_failure``: it ran out of its budget, its
  deadline included, or a worker rejected a request it made, e.g. a prompt longer than the
  worker's context; :func:`conductor_core.workers.types.is_plan_fault` decides for errors);
- 0.5 when it parses and runs but the answer is wrong, 1 when right;
- ``None`` only when infrastructure spoiled the execution (429, 5xx, connection errors, a
  worker's own timeout, a failed sandbox or judge): TRL then leaves that sample out of the
  update.

With ``executions_per_plan > 1`` the reward is the mean over the executions that were not spoiled
(:func:`conductor_core.outcome.combine`).

Cost-aware training (``reward.cost_weight`` = w, 0 by default): a right answer's bonus over a
wrong one shrinks with its cost relative to the pool's reference cost ``c_ref``:
``reward = graded - (graded - 0.5) × min(1, w × cost / c_ref)`` (:func:`cost_adjusted`; cost in
dollars for one execution, worker prices from the pool). Wrong answers, format errors, plan
failures and infrastructure failures are not charged, so cost never ranks a right answer below a
wrong one and never rewards a cheap failure. ``Outcome.reward`` keeps the graded reward; the
adjusted one is what the trainer gets.

Data flows one way: the trainer hands :meth:`ConductorReward.score_batch` each row's sample index
(:mod:`conductor_core.sample_streams`) and, in the recursive stage, the batch's recursion context
(:class:`RoundState`); it returns a :class:`ScoredBatch` (outcomes, the rewards the trainer gets,
metrics), which the trainer passes on (:mod:`conductor_core.train.trainers`). The reward keeps
nothing of a batch.

TRL runs async reward functions on a background event-loop thread: :class:`ConductorReward`
creates its :class:`~conductor_core.workers.pool.WorkerPool` lazily inside the loop that calls
it (and a fresh one if a later call comes from another loop), so semaphores and HTTP clients are
bound to the right loop.
"""

from __future__ import annotations

import asyncio
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any

from conductor_core.errors import ConfigError
from conductor_core.outcome import Outcome, combine, grade
from conductor_core.policy.base import PreviousRound
from conductor_core.policy.text import TextPlanSource
from conductor_core.sample_streams import draw_index
from conductor_core.simulation.workflow_world import is_check, names_part
from conductor_core.solve import SolveOptions, solve
from conductor_core.tasks.grading import WRONG_REWARD
from conductor_core.tasks.problem import Problem
from conductor_core.train.config import StageConfig
from conductor_core.train.data import stage_options
from conductor_core.workers.config import PoolConfig
from conductor_core.workers.pool import WorkerPool
from conductor_core.workflow.errors import FormatErrorCode
from conductor_core.workflow.trace import TraceSummary


def completion_text(completion: Any) -> str:
    """The text of a TRL completion (a string, or chat messages whose last one is the reply)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion:
        last = completion[-1]
        if isinstance(last, Mapping):
            return str(last.get("content") or "")
    return str(completion or "")


class RenumberedPool:
    """A pool seen under other ids (descriptor mode's ``adaptive.renumber``): id ``i`` calls pool
    worker ``placement[i]``. Satisfies the executor's ``WorkerCaller``."""

    def __init__(self, pool: Any, placement: Mapping[int, int]) -> None:
        self.pool = pool
        self.placement = dict(placement)

    def __len__(self) -> int:
        return max(self.placement, default=-1) + 1

    def worker(self, worker_id: int) -> Any:
        """The configuration of the pool worker that ``worker_id`` stands for."""
        return self.pool.worker(self.placement[worker_id])

    async def call(self, worker_id: int, messages: Any, **kwargs: Any) -> Any:
        """Call the pool worker that ``worker_id`` stands for."""
        return await self.pool.call(self.placement[worker_id], messages, **kwargs)


async def score_plan(
    text: str,
    problem: Problem,
    pool: Any,
    offered: Sequence[int],
    *,
    options: SolveOptions | None = None,
    executions: int = 1,
    sample_index: int = 0,
    previous: PreviousRound | None = None,
    placement: Mapping[int, int] | None = None,
) -> Outcome:
    """Run the plan ``text`` (written for the ``offered`` workers) with :func:`solve` on ``pool``
    and grade it. ``options`` gives the plan format (step limit, access mode) and the budget.
    Execution ``e`` of ``executions`` draws at
    :func:`~conductor_core.sample_streams.draw_index` of ``sample_index``.

    In a recursion round (``previous`` given) the plan continues that round: three empty lists
    keep the previous answer, which is then graded; steps with ``"all"`` access see it. A plan
    that does not parse there, or fails by its own fault, scores 0 (the paper's rule), although
    deployment keeps the previous answer then: the outcome's ``answer`` is that kept answer, its
    reward 0.

    ``placement`` maps the ids the plan names to pool ids where they differ (descriptor mode's
    ``adaptive.renumber``); the outcome's ``workers`` are pool ids either way.
    """
    options = replace(
        options or SolveOptions(),
        max_rounds=2 if previous is not None else 1,
        worker_ids=tuple(offered),
    )
    renumbered = placement is not None and any(k != v for k, v in placement.items())
    if renumbered:
        pool = RenumberedPool(pool, placement)
    source = TextPlanSource(text)
    outcomes: list[Outcome] = []
    for e in range(executions):
        trace = await solve(
            problem.question,
            source,
            pool,
            options=options,
            sample_index=draw_index(sample_index, executions, e),
            previous=previous,
        )
        outcomes.append(await grade(problem, trace))
        if outcomes[-1].format_error or outcomes[-1].kept:
            break  # nothing runs, so another execution would give the same
    outcome = combine(outcomes)
    if renumbered:
        workers = [placement.get(w, w) for w in outcome.workers]
        outcome = outcome.model_copy(update={"workers": workers})
    return outcome


def cost_adjusted(
    outcome: Outcome,
    cost_weight: float,
    cost_reference: float | None = None,
    executions: int = 1,
) -> float | None:
    """The reward the trainer gets: the graded reward less the share
    ``min(1, cost_weight * cost / cost_reference)`` of its bonus over a wrong answer.

    ``cost`` is the plan's cost in dollars for one execution (``outcome.cost`` summed over
    ``executions`` executions, so divided by it). Only the right part of a reward pays (with
    several executions, the share of them that were right): a wrong answer keeps its 0.5, a
    format error or plan failure its 0, an infrastructure failure its ``None``; a kept answer
    (recursion round with three empty lists) runs nothing and costs nothing. ``cost_weight`` 0
    returns the graded reward unchanged.

    Raises:
        ValueError: ``cost_weight`` > 0 without a positive ``cost_reference``.
    """
    if outcome.reward is None or not cost_weight or not outcome.plan_ok:
        return outcome.reward
    if not cost_reference or cost_reference <= 0:
        raise ValueError("a cost weight needs a positive cost reference (dollars per question)")
    share = min(1.0, cost_weight * outcome.cost / max(1, executions) / cost_reference)
    return outcome.reward - max(0.0, outcome.reward - WRONG_REWARD) * share


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
    outcomes: Sequence[Outcome],
    *,
    pool_size: int,
    best: Mapping[str, int] | None = None,
    adjust: Callable[[Outcome], float | None] | None = None,
) -> dict[str, float]:
    """Batch metrics: reward, format-error, plan-failure and infra rates, steps, access, worker
    shares, cost.

    ``reward_mean`` / ``reward_std`` are of the graded rewards; with ``adjust`` (the cost-aware
    reward, :meth:`ConductorReward.adjusted`), ``cost_penalty`` is the mean amount it took off
    the scored plans and ``adjusted_reward_mean`` the mean reward the trainer got.

    Worker shares count the workers of every step of the parsed plans (overall and per domain).
    ``best_worker_share`` is the share of parsed, non-keep plans whose answering (last) step is
    the domain's best worker (``best`` maps domain -> pool id).
    """
    n = len(outcomes)
    if n == 0:
        return {}
    scored = [o.reward for o in outcomes if o.reward is not None]
    parsed = [o for o in outcomes if o.plan_ok]
    ran = [o for o in parsed if not o.kept]
    steps_total = sum(o.plan_len or 0 for o in ran)
    subtasks = [t for o in ran for t in o.subtasks]
    out: dict[str, float] = {
        "reward_mean": sum(scored) / len(scored) if scored else 0.0,
        "reward_std": _std(scored),
        "format_error_rate": 1 - len(parsed) / n,
        "plan_failure_rate": sum(1 for o in outcomes if o.plan_failure is not None) / n,
        "infra_error_rate": sum(1 for o in outcomes if o.infra_error) / n,
        "mean_steps": steps_total / len(ran) if ran else 0.0,
        "all_access_share": sum(o.all_access_steps for o in ran) / steps_total
        if steps_total
        else 0.0,
        # What the steps that ran were asked, read by the workflow world's rules
        # (simulation.workflow_world): to check, and to work on one part.
        "check_step_share": sum(map(is_check, subtasks)) / len(subtasks) if subtasks else 0.0,
        "part_step_share": sum(map(names_part, subtasks)) / len(subtasks) if subtasks else 0.0,
        "keep_rate": sum(1 for o in parsed if o.kept) / len(parsed) if parsed else 0.0,
        "calls_per_plan": sum(o.calls for o in outcomes) / n,
        "tokens_per_plan": sum(o.input_tokens + o.output_tokens for o in outcomes) / n,
        "cost_per_plan": sum(o.cost for o in outcomes) / n,
    }
    if adjust is not None:
        adjusted = [adjust(o) for o in outcomes]
        pairs = [(o.reward, a) for o, a in zip(outcomes, adjusted, strict=True) if a is not None]
        out["cost_penalty"] = sum((r or 0.0) - a for r, a in pairs) / len(pairs) if pairs else 0.0
        out["adjusted_reward_mean"] = sum(a for _, a in pairs) / len(pairs) if pairs else 0.0
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


@dataclass(frozen=True)
class Truncation:
    """When a sampled completion counts as cut off: ``max_tokens`` long and not ended by one of
    ``end_ids`` (the tokenizer's end tokens)."""

    max_tokens: int
    end_ids: frozenset[int]

    def cut_off(self, ids: Sequence[int]) -> bool:
        """Whether the completion ``ids`` (as TRL passes them, end token included) was cut off."""
        return len(ids) >= self.max_tokens and (not ids or int(ids[-1]) not in self.end_ids)


@dataclass(frozen=True)
class RoundState:
    """The recursion context of one batch, which the recursive trainer makes while it generates
    and hands to :meth:`ConductorReward.score_batch` with the batch.

    ``previous`` maps a row (completion index in the batch) to the round it builds on;
    ``cached`` holds outcomes already computed during generation (forced round-1 plans);
    ``excluded`` rows get ``None`` (their previous round was spoiled by infrastructure).
    """

    previous: Mapping[int, PreviousRound] = field(default_factory=dict)
    cached: Mapping[int, Outcome] = field(default_factory=dict)
    excluded: Set[int] = frozenset()


@dataclass(frozen=True)
class ScoredBatch:
    """What scoring one batch of completions found, per completion in batch order: what the
    trainer passes on to its advantages, its logs and its callbacks."""

    problem_ids: tuple[str, ...]
    texts: tuple[str, ...]
    """The plans as written (each completion's text)."""
    outcomes: tuple[Outcome, ...]
    """Each plan's graded outcome (``Outcome.reward``: the graded reward)."""
    rewards: tuple[float | None, ...]
    """What the trainer gets: the cost-adjusted rewards (None: left out, infrastructure)."""
    metrics: Mapping[str, float]
    """The batch's :func:`summarize` metrics."""

    def report(
        self,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
    ) -> None:
        """Send the batch to TRL's reward hooks: ``log_metric`` gets every metric but the
        reward's mean and spread (TRL logs its own) as ``conductor/<name>``, ``log_extra`` each
        plan's format error code and final worker (columns of TRL's completions table)."""
        if log_metric is not None:
            for name, value in self.metrics.items():
                if name not in ("reward_mean", "reward_std"):
                    log_metric(f"conductor/{name}", value)
        if log_extra is not None:
            log_extra("format_error", [o.format_error_code or "" for o in self.outcomes])
            log_extra("final_worker", [o.final_worker for o in self.outcomes])


class ConductorReward:
    """The stage's reward: runs and grades plans (:meth:`score`) and whole batches of TRL
    completions (:meth:`score_batch`, what the trainers' reward function calls).

    Args:
        problems: every problem a dataset row may name, by id.
        pool_config: the pool plans run on.
        options: the stage's solve options (:func:`conductor_core.train.data.stage_options`):
            the plan format as the prompt states it, and the per-plan budget.
        executions: executions averaged per plan.
        max_concurrent: plans executed at the same time (calls are also bounded per worker).
        pool_factory: builds the pool (default: ``WorkerPool(pool_config)``).
        cost_weight: w of the cost-aware reward (:func:`cost_adjusted`;
            ``reward.cost_weight``); 0 leaves rewards as graded.
        cost_reference: its unit, dollars per question (``reward.cost_reference``); None: the
            pool's ``cost_reference``.
        truncation: when given, completions it finds cut off (from TRL's ``completion_ids``)
            are format errors ``truncated`` and are not run
            (``experimental.truncated_is_format_error``).

    Raises:
        ConfigError: ``cost_weight`` > 0 with no cost reference, given or in the pool.
    """

    def __init__(
        self,
        problems: Mapping[str, Problem],
        pool_config: PoolConfig,
        *,
        options: SolveOptions | None = None,
        executions: int = 1,
        max_concurrent: int = 256,
        pool_factory: PoolFactory | None = None,
        cost_weight: float = 0.0,
        cost_reference: float | None = None,
        truncation: Truncation | None = None,
    ) -> None:
        self.problems = dict(problems)
        self.pool_config = pool_config
        self.options = options or SolveOptions()
        self.executions = executions
        self.max_concurrent = max_concurrent
        self._pool_factory = pool_factory
        self.cost_weight = float(cost_weight)
        self.cost_reference = cost_reference or pool_config.cost_reference
        if self.cost_weight and not self.cost_reference:
            raise ConfigError(
                "reward.cost_weight > 0 needs a cost reference (dollars per question): set "
                "reward.cost_reference, or cost_reference in the pool (docs/cost.md)"
            )
        self.truncation = truncation
        self._pool: Any = None
        self._pool_loop: asyncio.AbstractEventLoop | None = None
        self.best = best_workers(pool_config)

    def pool(self) -> Any:
        """The pool bound to the running event loop (created on first use in that loop)."""
        loop = asyncio.get_running_loop()
        if self._pool is None or self._pool_loop is not loop:
            if self._pool_factory is not None:
                self._pool = self._pool_factory()
            else:
                self._pool = WorkerPool(self.pool_config)
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
        sample_indices: Sequence[int],
        previous: Sequence[PreviousRound | None] | None = None,
        rounds: RoundState | None = None,
        truncated: Sequence[bool] | None = None,
        workers: Sequence[Sequence[int] | None] | None = None,
    ) -> list[Outcome]:
        """Score plans concurrently (at most ``max_concurrent`` at once), in input order; plan
        ``i`` runs at sample index ``sample_indices[i]`` (:mod:`conductor_core.sample_streams`).

        With ``rounds``, cached outcomes are reused, excluded rows score ``None`` and rows with a
        previous round are scored as recursion rounds. Rows marked in ``truncated`` are format
        errors (code ``truncated``) and are not run. ``workers[i]`` gives the pool id each of
        ``offered[i]`` stands for (descriptor mode's renumbering; None: the same ids).
        """
        if len(sample_indices) != len(texts):
            raise ValueError(f"{len(sample_indices)} sample indices for {len(texts)} plans")
        pool = self.pool()
        sem = asyncio.Semaphore(self.max_concurrent)
        pool_size = len(self.pool_config.workers)

        async def one(i: int) -> Outcome:
            pid = problem_ids[i]
            problem = self.problems.get(pid)
            if problem is None:
                raise KeyError(f"problem_id '{pid}' is not among the training problems")
            if truncated is not None and truncated[i]:
                return await grade(
                    problem,
                    TraceSummary(
                        format_error=True,
                        format_error_code=FormatErrorCode.TRUNCATED,
                        raw_plan=texts[i],
                    ),
                )
            ids = list(offered[i]) if offered[i] is not None else list(range(pool_size))
            placed = workers[i] if workers is not None else None
            placement = dict(zip(ids, placed, strict=True)) if placed is not None else None
            prev = previous[i] if previous is not None else None
            if rounds is not None:
                if i in rounds.cached:
                    return rounds.cached[i]
                if i in rounds.excluded:
                    return Outcome(reward=None, domain=str(problem.domain), infra_error=True)
                prev = rounds.previous.get(i, prev)
            async with sem:
                return await score_plan(
                    texts[i],
                    problem,
                    pool,
                    ids,
                    options=self.options,
                    executions=self.executions,
                    sample_index=sample_indices[i],
                    previous=prev,
                    placement=placement,
                )

        return list(await asyncio.gather(*(one(i) for i in range(len(texts)))))

    async def score_batch(
        self,
        completions: Sequence[Any],
        problem_ids: Sequence[str],
        *,
        sample_indices: Sequence[int],
        offered: Sequence[Sequence[int] | None] | None = None,
        completion_ids: Sequence[Sequence[int]] | None = None,
        workers: Sequence[Sequence[int] | None] | None = None,
        rounds: RoundState | None = None,
    ) -> ScoredBatch:
        """Score a batch of TRL completions (strings, or chat messages whose last one is the
        reply): :meth:`score` with each completion's text, the cut-off ones made format errors
        when this reward has a truncation rule (from ``completion_ids``), then the rewards the
        trainer gets and the batch's metrics."""
        texts = [completion_text(c) for c in completions]
        truncated = None
        if self.truncation is not None and completion_ids is not None:
            truncated = [self.truncation.cut_off(ids) for ids in completion_ids]
        outcomes = await self.score(
            texts,
            list(problem_ids),
            list(offered) if offered is not None else [None] * len(texts),
            sample_indices=sample_indices,
            rounds=rounds,
            truncated=truncated,
            workers=list(workers) if workers is not None else None,
        )
        return ScoredBatch(
            problem_ids=tuple(problem_ids),
            texts=tuple(texts),
            outcomes=tuple(outcomes),
            rewards=tuple(self.adjusted(o) for o in outcomes),
            metrics=summarize(
                outcomes,
                pool_size=len(self.pool_config.workers),
                best=self.best,
                adjust=self.adjusted if self.cost_weight else None,
            ),
        )

    def adjusted(self, outcome: Outcome) -> float | None:
        """The reward the trainer gets for ``outcome`` (:func:`cost_adjusted` with this
        reward's cost weight, reference and executions)."""
        return cost_adjusted(outcome, self.cost_weight, self.cost_reference, self.executions)


def stage_reward(
    config: StageConfig,
    problems: Mapping[str, Problem],
    pool: PoolConfig,
    *,
    descriptions: Sequence[str] = (),
    executions: int | None = None,
    **extra: Any,
) -> ConductorReward:
    """The stage's reward on ``problems`` (by id): its solve options (plan format, budget, and
    the ``descriptions`` round-2 prompts show), concurrency and cost term; ``executions`` None:
    ``reward.executions_per_plan``. ``extra`` goes to :class:`ConductorReward` as it is
    (``truncation``, ``pool_factory``)."""
    return ConductorReward(
        problems,
        pool,
        options=stage_options(config, descriptions=descriptions),
        executions=config.reward.executions_per_plan if executions is None else executions,
        max_concurrent=config.reward.max_concurrent_plans,
        cost_weight=config.reward.cost_weight,
        cost_reference=config.reward.cost_reference,
        **extra,
    )
