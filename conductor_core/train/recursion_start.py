"""The recursive stage's expert start: imitate the better of keeping and a new plan, weighted by
how much better it is.

In the recursive stage ``expert_start`` builds its examples from executed round-2 contexts:

1. Each training question's round-1 plan is the one the starting model writes greedily
   (:func:`~conductor_core.train.warmup.own_plans`; a synthetic plan where it does not parse).
2. That plan runs ``expert_start.executions`` times. Each execution is a round-2 context: the
   plan and its answer, as the round-2 prompt shows them. Keeping is worth the answer's grade
   ``g`` exactly (the value the stage measures its round-2 advantages against).
3. The new plan (the same plan written again, so new plans are routed as round 1 routes) runs in
   round 2 after that context ``reward.executions_per_plan`` times; the mean reward
   ``v`` is an unbiased estimate of its value there.
4. The context's target is the keep plan when ``g > v`` and the new plan when ``v > g``; contexts
   are drawn as examples with probability proportional to ``|v - g|`` (ties are never drawn).

The objective is the weighted log-likelihood ``sum_c |A_c| log pi(target_c | context_c)``, with
``A_c = v_c - g_c`` the new plan's advantage against keeping, the stage's own round-2 advantage.
Contexts the model cannot tell apart (one observation ``o``: the same question, plan and answer
text) pool their weights, so the learned chance of keeping after ``o`` is
``E[max(-A, 0) | o] / E[|A| | o]``, above one half exactly when keeping is worth more than a new
plan in expectation over what ``o`` hides (whether the answer is right): the Bayes decision of
weighted classification, made from what the model sees. Plain labels ("keep when right") would
learn the chance that the answer is right instead, and keep a hedged answer that is right 70% of
the time although a new plan is right 90% of the time. It is one step of policy improvement on
executed outcomes; GRPO then optimises the expected final reward from there.

Half of the examples are round-1 prompts with the model's own plan as the target, so round 1
stays as it was. It costs ``questions x executions x (1 + reward.executions_per_plan)`` plan
runs, made once (not saved: rerun, they are made again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from random import Random
from typing import Any

from conductor_core.errors import ConfigError
from conductor_core.policy.base import PreviousRound
from conductor_core.sample_streams import recursion_start_index
from conductor_core.solve import plan_request
from conductor_core.tasks.problem import Problem
from conductor_core.train.config import StageConfig
from conductor_core.train.data import stage_options
from conductor_core.train.reward import stage_reward
from conductor_core.train.warmup import KEEP_PLAN, own_plans, synthetic_plan
from conductor_core.workers.config import PoolConfig
from conductor_core.workflow.prompts import plan_messages

CHUNK = 64
"""Questions whose executions run at once (progress is logged after each chunk)."""


@dataclass(frozen=True)
class Context:
    """One executed round-2 context: the round-1 plan, its answer and what each decision is
    worth there."""

    problem_id: str
    plan: str
    answer: str
    keep_value: float
    """The answer's grade: the reward of keeping it."""
    new_plan_value: float
    """The mean reward of the new plan run in round 2 after this context."""

    @property
    def advantage(self) -> float:
        """The new plan's advantage against keeping."""
        return self.new_plan_value - self.keep_value


async def executed_contexts(
    problems: Sequence[Problem],
    plans: dict[str, str],
    pool: PoolConfig,
    config: StageConfig,
    *,
    descriptions: Sequence[str] = (),
    log: Callable[[str], None] | None = None,
    pool_factory: Callable[[], Any] | None = None,
) -> list[Context]:
    """Run each problem's round-1 plan (``plans``, by problem id) ``expert_start.executions``
    times, then the same plan in round 2 after each answer (``reward.executions_per_plan``
    times), with the stage's solve options and reward; the contexts whose round 1 answered and
    whose round 2 an infrastructure failure did not spoil."""
    runs = config.expert_start.executions
    by_id = {p.id: p for p in problems}
    shown = {"descriptions": descriptions, "pool_factory": pool_factory}
    first = stage_reward(config, by_id, pool, executions=1, **shown)  # one answer per context
    second = stage_reward(config, by_id, pool, **shown)  # a new plan, as the stage scores it
    todo = [p for p in problems if p.id in plans]
    out: list[Context] = []

    async def one(index: int, problem: Problem) -> list[Context]:
        plan = plans[problem.id]
        ids = [problem.id] * runs
        # sample indexes fixed by the question's place; a context's round 2 runs at its own
        # index, in the solve loop's second round (so never at a round-1 draw)
        indices = [recursion_start_index(index, runs, k) for k in range(runs)]
        answers = await first.score([plan] * runs, ids, [None] * runs, sample_indices=indices)
        shown = [
            (k, o) for k, o in enumerate(answers) if o.reward is not None and o.answer is not None
        ]
        previous = [PreviousRound(plan=plan, answer=o.answer) for _, o in shown]
        revised = await second.score(
            [plan] * len(shown),
            ids[: len(shown)],
            [None] * len(shown),
            sample_indices=[indices[k] for k, _ in shown],
            previous=previous,
        )
        contexts = []
        for (_, o), r in zip(shown, revised, strict=True):
            value, kept = second.adjusted(r), o.kept_reward
            if value is None or kept is None:
                continue
            contexts.append(Context(problem.id, plan, o.answer or "", kept, value))
        return contexts

    try:
        for at in range(0, len(todo), CHUNK):
            part = todo[at : at + CHUNK]
            done = await asyncio.gather(*(one(at + i, p) for i, p in enumerate(part)))
            out.extend(c for contexts in done for c in contexts)
            if log is not None:
                log(f"expert start: round-2 contexts of {at + len(part)}/{len(todo)} questions")
    finally:
        await first.aclose()
        await second.aclose()
    return out


def recursion_examples(
    rng: Random,
    problems: Sequence[Problem],
    plans: dict[str, str],
    contexts: Sequence[Context],
    pool_size: int,
    config: StageConfig,
    count: int,
    *,
    descriptions: Sequence[str] = (),
) -> list[tuple[list[dict[str, str]], str]]:
    """``count`` (prompt messages, target plan) pairs: every other one a round-1 prompt of a
    random planned problem with its own plan as the target, the others round-2 contexts drawn
    with probability proportional to ``|advantage|``, whose target is the keep plan when keeping
    is worth more, the plan again otherwise (see the module docstring).

    Raises:
        ConfigError: no context has a decision worth making (every new plan worth exactly what
            keeping is).
    """
    weights = [abs(c.advantage) for c in contexts]
    if not any(weights):
        raise ConfigError(
            f"expert_start: in {len(contexts)} executed round-2 contexts a new plan is always "
            f"worth exactly what keeping is; nothing to learn (raise expert_start.executions)"
        )
    by_id = {p.id: p for p in problems}
    planned = [p for p in problems if p.id in plans]
    options = stage_options(config, descriptions=descriptions)
    drawn = iter(rng.choices(contexts, weights=weights, k=count - count // 2))
    out: list[tuple[list[dict[str, str]], str]] = []
    for i in range(count):
        if i % 2 == 0:
            c = next(drawn)
            previous = PreviousRound(plan=c.plan, answer=c.answer)
            request = plan_request(
                by_id[c.problem_id].question, pool_size, options, previous=previous
            )
            out.append((plan_messages(request), KEEP_PLAN if c.advantage < 0 else c.plan))
        else:
            p = rng.choice(planned)
            request = plan_request(p.question, pool_size, options)
            out.append((plan_messages(request), plans[p.id]))
    return out


def recursion_expert_examples(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    pool: PoolConfig,
    config: StageConfig,
    count: int,
    *,
    descriptions: Sequence[str] = (),
    log: Callable[[str], None] | None = None,
    pool_factory: Callable[[], Any] | None = None,
) -> list[tuple[list[dict[str, str]], str]]:
    """The recursive stage's expert-start examples: ``model``'s own greedy round-1 plans,
    executed (:func:`executed_contexts`), then :func:`recursion_examples`."""
    say = log or (lambda _: None)
    size = len(pool.workers)
    options = stage_options(config, descriptions=descriptions)
    requests = [plan_request(p.question, size, options) for p in problems]
    written = own_plans(model, tokenizer, config, requests)
    # a question whose greedy plan does not parse gets a synthetic one (a valid context still)
    rng = Random(config.seed + 3)
    steps = min(config.warmup.max_plan_steps, config.data.max_steps)
    plans = {
        p.id: w or synthetic_plan(rng, size, max_plan_steps=steps, access_mode=options.access_mode)
        for p, w in zip(problems, written, strict=True)
    }
    parsed = sum(w is not None for w in written)
    say(f"expert start: the model's round-1 plan parses for {parsed}/{len(problems)} questions")
    contexts = asyncio.run(
        executed_contexts(
            problems,
            plans,
            pool,
            config,
            descriptions=descriptions,
            log=log,
            pool_factory=pool_factory,
        )
    )
    keep = sum(c.advantage < 0 for c in contexts)
    new = sum(c.advantage > 0 for c in contexts)
    say(
        f"expert start: {len(contexts)} round-2 contexts: keeping worth more in {keep}, "
        f"a new plan in {new}"
    )
    return recursion_examples(
        Random(config.seed + 2),
        problems,
        plans,
        contexts,
        size,
        config,
        count,
        descriptions=descriptions,
    )
