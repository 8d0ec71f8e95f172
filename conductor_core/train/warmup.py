"""Optional format warm-up: a short supervised pass on valid plans.

For models that do not yet write the three-list format. ``warmup.targets: own`` imitates the
model's own plans sampled under the plan grammar (:func:`own_plan_texts`): the format alone, for
a pretrained model. ``synthetic`` imitates random valid plans, for a random tiny model: each
example is a training question's Conductor prompt, offering a random subset of the pool as the
adaptive stage does (``adaptive.k_min``..``k_max`` workers under their pool ids), followed by a
valid plan whose worker ids are drawn uniformly from the offered ones: the warm-up teaches the
format, including that a plan names only offered workers, not a routing strategy. (With the
whole pool offered every time, a model never learns to read the list, and the adaptive stage
then starts from a policy that names the same workers whatever is offered.) With
``prompt_loss`` (the default) the language-modelling loss covers the prompt tokens too: a tiny
random model then learns to represent the question, which GRPO needs to learn routing
(measured: with the loss on the completion only, routing stayed at chance).

The recursive stage has no format warm-up: it starts from a trained model, and its expert start
(:mod:`conductor_core.train.recursion_start`) teaches both round-2 decisions from executed answers.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from random import Random
from typing import Any

from conductor_core.errors import ConfigError, require
from conductor_core.policy.base import PlanRequest, PlanResult, PreviousRound
from conductor_core.policy.local import TransformersPlanSource
from conductor_core.simulation.answers import hedge_answer, render_answer
from conductor_core.simulation.problem_bank import ProblemBank
from conductor_core.solve import plan_request
from conductor_core.tasks.problem import Problem
from conductor_core.train.adapters import lora_adapters
from conductor_core.train.config import ExpertStartSpec, StageConfig, WarmupSpec
from conductor_core.train.data import (
    offered_subset,
    shown_workers,
    stage_options,
    stage_prompt,
)
from conductor_core.workflow.model import (
    ALL,
    AccessMode,
    OfferedWorkers,
    Step,
    Workflow,
    offered_ids,
)
from conductor_core.workflow.prompts import PROMPT_VERSION, plan_messages

KEEP_PLAN = "model_id = []\nsubtasks = []\naccess_list = []"
"""Three empty lists: keep the previous answer (recursion rounds)."""


def completion_token_ids(tokenizer: Any, text: str) -> list[int]:
    """``text`` as a completion the model writes: its tokens, then the end-of-turn token."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    return ids + ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else [])


WARMUP_SUBTASKS: tuple[str, ...] = (
    "Solve the problem and give the final answer.",
    "Answer the question.",
    "Work through the question step by step and state the final answer.",
    "Check the earlier answer and give the corrected final answer.",
)


def synthetic_plan(
    rng: Random,
    workers: OfferedWorkers,
    *,
    max_plan_steps: int = 1,
    access_mode: AccessMode | str = AccessMode.BINARY,
    subtasks: Sequence[str] = WARMUP_SUBTASKS,
    last_step: str | None = None,
) -> str:
    """A valid rendered plan of 1..``max_plan_steps`` steps, each step's worker drawn uniformly
    from ``workers`` (a pool size ``n``, meaning ids ``0..n-1``, or the offered pool ids) and
    its subtask uniformly from ``subtasks``; with ``last_step``, a plan of two steps or more
    ends with a step of that subtask reading every earlier one (``warmup.last_step``)."""
    ids = offered_ids(workers)
    steps = []
    count = rng.randint(1, max_plan_steps)
    for i in range(count):
        if last_step is not None and i and i == count - 1:
            steps.append(Step(worker=rng.choice(ids), subtask=last_step, access=ALL))
            break
        access: Any = ALL if i and rng.random() < 0.7 else ()
        steps.append(
            Step(
                worker=rng.choice(ids),
                subtask=rng.choice(subtasks),
                access=access,
            )
        )
    return Workflow(steps=tuple(steps), access_mode=AccessMode(access_mode)).render()


def draw_example(
    rng: Random,
    problems: Sequence[Problem],
    pool_size: int,
    config: StageConfig,
    descriptions: Sequence[str] = (),
) -> tuple[Problem, list[int], tuple[str, ...]]:
    """One warm-up example's question and workers: a training problem, a random offered subset
    of the pool (:func:`~conductor_core.train.data.offered_subset` with the stage's
    ``adaptive.k_min``/``k_max``) as the stage's dataset shows it
    (:func:`~conductor_core.train.data.shown_workers`), and the descriptions by shown id."""
    problem = rng.choice(problems)
    offered = offered_subset(rng, pool_size, config.adaptive.k_min, config.adaptive.k_max)
    shown, _, shown_desc = shown_workers(rng, config, offered, pool_size, descriptions)
    return problem, shown, shown_desc


def warmup_texts(
    problems: Sequence[Problem],
    pool_size: int,
    config: StageConfig,
    count: int,
    *,
    seed: int = 0,
    descriptions: Sequence[str] = (),
) -> list[tuple[list[dict[str, str]], str]]:
    """``count`` (prompt messages, plan text) pairs over the training problems, each offering a
    random subset of the pool (:func:`~conductor_core.train.data.offered_subset` with the stage's
    ``adaptive.k_min``/``k_max``) shown as the stage's dataset shows it
    (:func:`~conductor_core.train.data.shown_workers`: in descriptor mode with ``descriptions``,
    by pool id, and random ids under ``adaptive.renumber``) and naming only offered workers.

    An ``experimental.warmup_recursion_fraction`` share are recursion rounds: a random previous
    plan and answer (half of them closed by a sentence of doubt), answered half the time by three
    empty lists (keep) and half by a new random plan, whatever the answer.
    """
    rng = Random(seed)
    choices = list(problems)
    bank = ProblemBank(choices) if config.experimental.warmup_recursion_fraction > 0 else None
    out = []
    for _ in range(count):
        p, offered, shown_desc = draw_example(rng, choices, pool_size, config, descriptions)
        steps = min(config.warmup.max_plan_steps, config.data.max_steps)
        subtasks = config.warmup.subtasks or WARMUP_SUBTASKS
        plan = synthetic_plan(
            rng,
            offered,
            max_plan_steps=steps,
            access_mode=config.data.access_mode,
            subtasks=subtasks,
            last_step=config.warmup.last_step,
        )
        previous = None
        if rng.random() < config.experimental.warmup_recursion_fraction:
            # A previous answer as a simulated worker writes it, right or wrong, half of them
            # closed by a sentence of doubt, all uncorrelated with the target: the warm-up
            # teaches the format, GRPO the decision.
            shown = render_answer(p, rng.random() < 0.5, rng, bank)
            if rng.random() < 0.5:
                shown = hedge_answer(p, shown, rng)
            previous = PreviousRound(plan=plan, answer=shown)
            if rng.random() < 0.5:
                plan = KEEP_PLAN
            else:
                plan = synthetic_plan(
                    rng,
                    offered,
                    max_plan_steps=steps,
                    access_mode=config.data.access_mode,
                    subtasks=subtasks,
                    last_step=config.warmup.last_step,
                )
        messages = stage_prompt(
            config,
            p.question,
            pool_size,
            previous=previous,
            offered=offered,
            descriptions=shown_desc,
        )
        out.append((messages, plan))
    return out


def greedy_plans(
    model: Any, tokenizer: Any, config: StageConfig, requests: Sequence[PlanRequest]
) -> list[PlanResult]:
    """The plan ``model`` writes greedily for each request (unaided), through the library's local
    plan source (one batched ``generate``), asked as the stage asks."""
    source = TransformersPlanSource.from_loaded(
        model,
        tokenizer,
        max_new_tokens=config.generation.max_completion_length,
        temperature=0.0,
        prompt_style=config.data.prompt_style,
        prompt_version=PROMPT_VERSION,
    )
    return source.generate_many(list(requests))


def own_plans(
    model: Any, tokenizer: Any, config: StageConfig, requests: Sequence[PlanRequest]
) -> list[str | None]:
    """The plan ``model`` writes greedily for each request (:func:`greedy_plans`); None where
    it does not parse."""
    return [r.raw if r.ok else None for r in greedy_plans(model, tokenizer, config, requests)]


def encode_example(
    tokenizer: Any, messages: list[dict[str, str]], plan: str, *, prompt_loss: bool
) -> tuple[list[int], list[int]]:
    """Token ids and labels of one example (labels -100 on the prompt unless ``prompt_loss``)."""
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    completion_ids = tokenizer(plan, add_special_tokens=False)["input_ids"]
    completion_ids = [*completion_ids, tokenizer.eos_token_id]
    ids = prompt_ids + completion_ids
    labels = (list(prompt_ids) if prompt_loss else [-100] * len(prompt_ids)) + completion_ids
    return ids, labels


def supervised_step(
    model: Any, optimizer: Any, batch: Sequence[tuple[list[int], list[int]]], pad: int
) -> float:
    """One cross-entropy step of ``model`` (in train mode) on ``batch``, pairs of token ids and
    labels (:func:`encode_example`) right-padded with ``pad``; returns the batch's loss."""
    import torch

    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    mask = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, labs) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(labs)] = torch.tensor(labs)
        mask[row, : len(ids)] = 1
    device = next(model.parameters()).device
    out = model(
        input_ids=input_ids.to(device), attention_mask=mask.to(device), labels=labels.to(device)
    )
    out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(out.loss.detach())


def own_plan_texts(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    pool_size: int,
    config: StageConfig,
    count: int,
    *,
    seed: int = 0,
    descriptions: Sequence[str] = (),
    log: Callable[[str], None] | None = None,
) -> list[tuple[list[dict[str, str]], str]]:
    """The model's own plans under the plan grammar (``warmup.targets: own``): ``count``
    requests over the training problems, offered and shown as :func:`warmup_texts` offers them,
    each sampled once at the stage's temperature by the library's local plan source with the
    plan grammar on (as a served Conductor decodes); returns the (prompt messages, plan text)
    pairs of the plans that parse (a plan may still be cut off at the completion length).

    Imitating them moves the model towards its own distribution restricted to the grammar:
    the format is taught, and which workers, subtasks and access lists it writes stay its own.
    """
    rng = Random(seed)
    choices = list(problems)
    requests = []
    for i in range(count):
        p, offered, shown_desc = draw_example(rng, choices, pool_size, config, descriptions)
        options = stage_options(config, offered, shown_desc)
        requests.append(plan_request(p.question, pool_size, options, sample_index=i))
    gen = config.generation
    source = TransformersPlanSource.from_loaded(
        model,
        tokenizer,
        max_new_tokens=gen.max_completion_length,
        temperature=gen.temperature,
        top_p=gen.top_p,
        seed=seed,
        prompt_style=config.data.prompt_style,
        prompt_version=PROMPT_VERSION,
        plan_grammar=True,
        max_subtask_chars=config.warmup.max_subtask_chars,
    )
    batch = config.warmup.sample_batch_size or config.warmup.batch_size
    results = []
    for start in range(0, len(requests), batch):
        results += source.generate_many(requests[start : start + batch])
        if log is not None:  # sampling is most of the start's time on a CPU: minutes
            parsed = sum(r.ok for r in results)
            log(f"warm-up: sampled {len(results)}/{len(requests)} own plans, {parsed} parse")
    return [(plan_messages(q), r.raw) for q, r in zip(requests, results, strict=True) if r.ok]


def run_warmup(
    model: Any,
    tokenizer: Any,
    problems: Sequence[Problem],
    pool_size: int,
    config: StageConfig,
    *,
    descriptions: Sequence[str] = (),
    on_step: Callable[[int, float], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> dict[str, float]:
    """Train ``model`` in place on valid plans (``warmup.targets``: synthetic ones, or the
    model's own under the plan grammar, :func:`own_plan_texts`); returns ``{"steps", "loss",
    "seconds"}`` (and for own plans ``"sampled"``, ``"parsed"``). ``descriptions`` (by pool
    id) are shown in descriptor mode, as the stage's dataset shows them; ``log`` gets a line
    after each batch of own plans sampled. With ``warmup.lora``
    it trains LoRA adapters and merges them into ``model``'s weights.

    Stops after ``warmup.steps`` steps or ``warmup.max_seconds``, whichever comes first.
    """
    spec = config.warmup
    count = spec.steps * spec.batch_size
    extra: dict[str, float] = {}
    started = time.perf_counter()
    if spec.targets == "own":
        sampled = spec.samples or count
        examples = own_plan_texts(
            model,
            tokenizer,
            problems,
            pool_size,
            config,
            sampled,
            seed=config.seed + 1,
            descriptions=descriptions,
            log=log,
        )
        if not examples:
            raise ConfigError(
                f"warmup.targets: own: none of the {sampled} plans sampled under the plan "
                f"grammar parsed (each was cut off at generation.max_completion_length "
                f"{config.generation.max_completion_length}); raise it or warmup.samples"
            )
        extra = {"sampled": float(sampled), "parsed": float(len(examples))}
        rng = Random(config.seed + 2)
        cycled = []
        while len(cycled) < count:  # every parsed plan once, in a new order each pass
            cycled.extend(rng.sample(examples, len(examples)))
        examples = cycled[:count]
    else:
        examples = warmup_texts(
            problems, pool_size, config, count, seed=config.seed + 1, descriptions=descriptions
        )
    encoded = [encode_example(tokenizer, m, p, prompt_loss=spec.prompt_loss) for m, p in examples]
    trained = model
    if spec.lora:
        peft = require("peft", "train", "a LoRA warm-up")
        trained = peft.get_peft_model(model, lora_adapters(config.lora))
    stats = train_supervised(trained, tokenizer, encoded, spec, seed=config.seed, on_step=on_step)
    if spec.lora:
        trained.merge_and_unload()  # the adapters' update, into ``model``'s own weights
    return {**stats, **extra, "seconds": time.perf_counter() - started}


def train_supervised(
    model: Any,
    tokenizer: Any,
    encoded: Sequence[tuple[list[int], list[int]]],
    spec: WarmupSpec | ExpertStartSpec,
    *,
    seed: int = 0,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, float]:
    """Train ``model`` in place with AdamW (constant ``spec.learning_rate``) on consecutive
    batches of ``spec.batch_size`` ``encoded`` examples (:func:`encode_example`); returns
    ``{"steps", "loss", "seconds"}``.

    Stops after ``spec.steps`` steps or ``spec.max_seconds``, whichever comes first; leaves the
    model in eval mode.
    """
    import torch

    steps, batch_size, max_seconds = spec.steps, spec.batch_size, spec.max_seconds
    torch.manual_seed(seed)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    optimizer = torch.optim.AdamW(
        [p for p in model.parameters() if p.requires_grad], lr=spec.learning_rate
    )
    model.train()
    start = time.perf_counter()
    loss_value = float("nan")
    done = 0
    for step in range(steps):
        batch = encoded[step * batch_size : (step + 1) * batch_size]
        if not batch:
            break
        loss_value = supervised_step(model, optimizer, batch, pad)
        done = step + 1
        if on_step is not None:
            on_step(done, loss_value)
        if max_seconds is not None and time.perf_counter() - start > max_seconds:
            break
    model.eval()
    return {"steps": float(done), "loss": loss_value, "seconds": time.perf_counter() - start}
