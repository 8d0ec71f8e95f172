"""Before/after evaluation of a Conductor on held-out problems (used by the learning test, the
learning demo and the CLI summary).

Plans are sampled with transformers (temperature 1.0 by default, like training), scored with the
training reward on the pool, and summarised: mean reward, format-error rate, best-worker share,
worker shares; for adaptive pools the share of plans naming a worker outside the offered subset;
for recursion, how often a second round keeps a right answer and revises a wrong one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from random import Random
from typing import Any

from conductor_core.tasks.problem import Problem
from conductor_core.train.config import StageConfig
from conductor_core.train.data import offered_subset, stage_prompt
from conductor_core.train.reward import ConductorReward, PlanOutcome, PreviousRound, summarize
from conductor_core.workers.config import PoolConfig


@contextmanager
def eval_mode(model: Any) -> Iterator[Any]:
    """Put ``model`` in eval mode for the block (yields its device); restore training mode after."""
    was_training = model.training
    model.eval()
    try:
        yield next(model.parameters()).device
    finally:
        if was_training:
            model.train()


def generate_texts(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[list[dict[str, str]]],
    *,
    n: int = 1,
    max_new_tokens: int = 64,
    temperature: float = 1.0,
    seed: int = 0,
    batch_size: int = 64,
) -> list[list[str]]:
    """``n`` sampled completions per prompt (greedy when ``temperature`` is 0)."""
    import torch

    texts = [
        tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
        for p in prompts
    ]
    flat = [t for t in texts for _ in range(n)]
    tokenizer.padding_side = "left"
    torch.manual_seed(seed)
    outputs: list[str] = []
    with eval_mode(model) as device:
        for i in range(0, len(flat), batch_size):
            chunk = flat[i : i + batch_size]
            enc = tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(device) for k, v in enc.items()}
            kwargs: dict[str, Any] = {
                "max_new_tokens": max_new_tokens,
                "pad_token_id": tokenizer.pad_token_id,
                "eos_token_id": tokenizer.eos_token_id,
            }
            if temperature > 0:
                kwargs.update(do_sample=True, temperature=temperature, top_p=1.0, top_k=0)
            else:
                kwargs.update(do_sample=False)
            with torch.inference_mode():
                out = model.generate(**enc, **kwargs)
            width = enc["input_ids"].shape[1]
            outputs.extend(tokenizer.batch_decode(out[:, width:], skip_special_tokens=True))
    return [outputs[j * n : (j + 1) * n] for j in range(len(prompts))]


def evaluate_policy(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    pool: PoolConfig,
    bank: Any,
    config: StageConfig,
    *,
    plans_per_question: int = 4,
    adaptive: bool = False,
    seed: int = 0,
    temperature: float = 1.0,
) -> dict[str, float]:
    """Sample plans for ``problems`` and score them; returns :func:`summarize` metrics plus
    ``out_of_subset_rate`` (plans naming a worker the prompt did not offer)."""
    rng = Random(seed)
    size = len(pool.workers)
    offered = [
        offered_subset(rng, size, config.adaptive.k_min, config.adaptive.k_max)
        if adaptive
        else list(range(size))
        for _ in problems
    ]
    prompts = [
        stage_prompt(config, p.question, len(ids)) for p, ids in zip(problems, offered, strict=True)
    ]
    texts = generate_texts(
        model,
        tokenizer,
        prompts,
        n=plans_per_question,
        max_new_tokens=config.generation.max_completion_length,
        temperature=temperature,
        seed=seed,
    )
    flat_texts = [t for group in texts for t in group]
    ids = [p.id for p in problems for _ in range(plans_per_question)]
    offers = [o for o in offered for _ in range(plans_per_question)]
    reward = _reward(problems, pool, bank, config)
    outcomes = asyncio.run(_score(reward, flat_texts, ids, offers, base_index=seed * 7919))
    metrics = summarize(outcomes, pool_size=size, best=reward.best)
    metrics["out_of_subset_rate"] = sum(
        1 for o in outcomes if o.format_code == "unknown_worker"
    ) / max(1, len(outcomes))
    metrics["plans"] = float(len(outcomes))
    return metrics


def completion_probabilities(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[list[dict[str, str]]],
    completion: str,
    *,
    batch_size: int = 32,
) -> list[float]:
    """The probability that the model writes exactly ``completion`` (then its end token) for
    each prompt: teacher-forced, so free of sampling noise."""
    import torch

    from conductor_core.train.warmup import completion_token_ids

    target = completion_token_ids(tokenizer, completion)
    out: list[float] = []
    with eval_mode(model) as device:
        for i in range(0, len(prompts), batch_size):
            chunk = prompts[i : i + batch_size]
            heads = [
                tokenizer(
                    tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True),
                    add_special_tokens=False,
                )["input_ids"]
                for p in chunk
            ]
            width = max(len(h) for h in heads) + len(target)
            pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
            ids = torch.full((len(chunk), width), pad, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for r, h in enumerate(heads):  # left padding: every completion ends at the last column
                row = h + target
                ids[r, width - len(row) :] = torch.tensor(row)
                mask[r, width - len(row) :] = 1
            with torch.inference_mode():
                logits = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
            logps = logits[:, -len(target) - 1 : -1].float().log_softmax(-1)
            picked = logps.gather(
                -1, torch.tensor(target, device=device).expand(len(chunk), -1)[..., None]
            )
            out.extend(float(v) for v in picked.squeeze(-1).sum(-1).exp())
    return out


def evaluate_recursion(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    pool: PoolConfig,
    bank: Any,
    config: StageConfig,
    *,
    seed: int = 0,
    temperature: float = 1.0,
    plans_per_question: int = 2,
) -> dict[str, float]:
    """Round 1 then a forced round 2 for each problem; returns keep/revise rates by correctness.

    ``keep_when_right``: share of round-2 plans that keep a right round-1 answer;
    ``revise_when_wrong``: share that write a new plan after a wrong one; ``final_reward`` and
    ``first_reward``: mean rewards after round 2 and after round 1; ``keep_prob_when_right`` /
    ``keep_prob_when_wrong``: mean probability of writing the keep plan (no sampling noise) and
    ``keep_prob_discrimination`` their difference.
    """
    size = len(pool.workers)
    reward = _reward(problems, pool, bank, config)
    prompts = [stage_prompt(config, p.question, size) for p in problems]
    max_new = config.generation.max_completion_length
    first = generate_texts(
        model,
        tokenizer,
        prompts,
        n=plans_per_question,
        max_new_tokens=max_new,
        temperature=temperature,
        seed=seed,
    )
    flat = [t for g in first for t in g]
    rows = [p for p in problems for _ in range(plans_per_question)]
    full = [list(range(size))] * len(flat)
    firsts = asyncio.run(_score(reward, flat, [p.id for p in rows], full, base_index=seed))
    from conductor_core.train.recursive import previous_plan_text

    previous = [
        PreviousRound(
            plan=previous_plan_text(t, size, config.data.max_steps, config.data.access_mode),
            answer=o.answer,
        )
        for t, o in zip(flat, firsts, strict=True)
    ]
    second_prompts = [
        stage_prompt(
            config, p.question, size, previous_plan=prev.plan, previous_answer=prev.answer or ""
        )
        for p, prev in zip(rows, previous, strict=True)
    ]
    second = generate_texts(
        model,
        tokenizer,
        second_prompts,
        n=1,
        max_new_tokens=max_new,
        temperature=temperature,
        seed=seed + 1,
    )
    texts2 = [g[0] for g in second]
    seconds = asyncio.run(
        _score(reward, texts2, [p.id for p in rows], full, base_index=seed + 1, previous=previous)
    )
    metrics = recursion_metrics(firsts, seconds)
    from conductor_core.train.warmup import KEEP_PLAN

    keep = completion_probabilities(model, tokenizer, second_prompts, KEEP_PLAN)
    right = [k for k, o in zip(keep, firsts, strict=True) if o.correct]
    wrong = [k for k, o in zip(keep, firsts, strict=True) if o.plan_ok and not o.correct]
    metrics["keep_prob_when_right"] = sum(right) / len(right) if right else 0.0
    metrics["keep_prob_when_wrong"] = sum(wrong) / len(wrong) if wrong else 0.0
    metrics["keep_prob_discrimination"] = (
        metrics["keep_prob_when_right"] - metrics["keep_prob_when_wrong"]
    )
    return metrics


def recursion_metrics(firsts: Sequence[PlanOutcome], seconds: Sequence[PlanOutcome]):
    """Keep/revise rates of round-2 outcomes given the round-1 outcomes (same order).

    ``keep_discrimination`` is P(keep | round 1 right) - P(keep | round 1 wrong): 0 for a policy
    that keeps at random (whatever its keep rate), 1 for one that keeps exactly the right answers.
    """
    right = [(a, b) for a, b in zip(firsts, seconds, strict=True) if a.correct]
    wrong = [(a, b) for a, b in zip(firsts, seconds, strict=True) if a.plan_ok and not a.correct]
    scored1 = [a.reward for a in firsts if a.reward is not None]
    scored2 = [b.reward for b in seconds if b.reward is not None]

    def share(pairs, keep: bool) -> float:
        hits = sum(1 for _, b in pairs if b.plan_ok and b.keep == keep)
        return hits / len(pairs) if pairs else 0.0

    keep_right, keep_wrong = share(right, True), share(wrong, True)
    return {
        "keep_when_right": keep_right,
        "keep_when_wrong": keep_wrong,
        "revise_when_wrong": share(wrong, False),
        "keep_discrimination": keep_right - keep_wrong,
        "first_reward": sum(scored1) / len(scored1) if scored1 else 0.0,
        "final_reward": sum(scored2) / len(scored2) if scored2 else 0.0,
        "round2_format_error_rate": sum(1 for b in seconds if not b.plan_ok) / max(1, len(seconds)),
        "right_first": float(len(right)),
        "wrong_first": float(len(wrong)),
    }


def _reward(problems, pool, bank, config: StageConfig) -> ConductorReward:
    return ConductorReward(
        {p.id: p for p in problems},
        pool,
        bank=bank,
        max_steps=config.data.max_steps,
        access_mode=config.data.access_mode,
    )


async def _score(reward: ConductorReward, texts, ids, offered, *, base_index=0, previous=None):
    try:
        return await reward.score(texts, ids, offered, base_index=base_index, previous=previous)
    finally:
        await reward.aclose()
