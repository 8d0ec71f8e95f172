"""The TRL behaviour the training code relies on, checked on a real GRPOTrainer over a tiny model
(the version pins and method signatures: tests/unit/test_trl_contract.py):

- TRL calls the private methods the recursive trainer overrides the way it expects and returns
  what it expects; it sets ``async_loop`` for async rewards and keeps ``_metrics[mode]`` as lists
  to append to;
- TRL calls the stage's reward function with the rows' columns, and its rewards are what TRL
  trains on; the trainer hands the scored batch to the callbacks that ask for it;
- a None reward is left out of its group's baseline (TRL < 1.6 scored it 0, so infrastructure
  failures lowered the baseline and pushed the other plans up);
- the learning-rate warm-up of ``warmup_ratio`` is actually applied (a float ``warmup_steps`` is a
  step count before transformers 5, and transformers' ``constant`` schedule has no warm-up).
"""

from __future__ import annotations

import asyncio
import statistics
from pathlib import Path

import pytest

from conductor_core.train.grpo import stop_reward_loop
from tests.support.train_configs import small

GROUP = 4
SCORES = [None, 1.0, 2.0, 4.0, 5.0, None, 1.0, None]
"""Rewards of two groups of GROUP plans (None: the plan could not be scored)."""


# --------------------------------------------------------------------------------------------
# A real GRPOTrainer on a tiny model


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    from conductor_core.policy.tiny import build_tiny_conductor

    t = small(Path("unused")).model.tiny
    out = tmp_path_factory.mktemp("contract") / "tiny"
    return build_tiny_conductor(
        out, hidden=t.hidden, layers=t.layers, heads=t.heads, kv_heads=t.kv_heads, vocab=t.vocab
    )


def rows() -> list[dict]:
    return [
        {"prompt": [{"role": "user", "content": f"question {i // GROUP}"}], "score": s}
        for i, s in enumerate(SCORES)
    ]


async def scored(completions, score, **kwargs):
    """An async reward (like ConductorReward): the row's ``score``, None for unscorable plans."""
    await asyncio.sleep(0)
    return list(score)


def trainer_for(config, tiny_dir, cls=None, reward=None):
    from datasets import Dataset
    from trl import GRPOTrainer

    from conductor_core.train.grpo import grpo_args, load_model

    model, tokenizer = load_model(str(tiny_dir), config, "cpu")
    args = grpo_args(config, config.output_path() / "checkpoints", "cpu", progress=False)
    return (cls or GRPOTrainer)(
        model=model,
        reward_funcs=[reward or scored],
        args=args,
        train_dataset=Dataset.from_list(rows()),
        processing_class=tokenizer,
    )


EXTRA = [7, 7, 7]


@pytest.fixture(scope="module")
def scored_batch(tiny_dir, tmp_path_factory):
    """One batch through TRL's _generate_and_score_completions, spying on _generate_single_turn.

    The spy takes any arguments (so that a changed signature shows up in the call test, not
    here) and appends EXTRA to the last prompt, as the recursive trainer rewrites round-2 prompts
    in the list it is given.
    """
    from trl import GRPOTrainer

    calls: list[dict] = []

    class Spy(GRPOTrainer):
        def _generate_single_turn(self, *args, **kwargs):
            result = super()._generate_single_turn(*args, **kwargs)
            prompt_ids = args[0] if args else kwargs["prompt_ids"]
            calls.append({"args": args, "kwargs": kwargs, "last": len(prompt_ids[-1])})
            prompt_ids[-1] = list(prompt_ids[-1]) + EXTRA
            calls[-1]["result"] = result
            return result

    out = tmp_path_factory.mktemp("scored")
    config = small(out, questions_per_step=2, plans_per_question=GROUP, scale_rewards="group")
    trainer = trainer_for(config, tiny_dir, cls=Spy)
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows())
    yield trainer, output, calls
    stop_reward_loop(trainer)


@pytest.fixture
def make_trainer(tiny_dir):
    """``make_trainer(config, cls=None, reward=None)``: a trainer on the tiny model (rewarded by
    ``reward``, default the rows' scores) whose reward loop thread is stopped after the test."""
    made = []

    def make(config, cls=None, reward=None):
        made.append(trainer_for(config, tiny_dir, cls=cls, reward=reward))
        return made[-1]

    yield make
    for trainer in made:
        stop_reward_loop(trainer)


def test_none_reward_is_left_out_of_the_group_baseline(scored_batch):
    import torch

    trainer, output, _ = scored_batch
    advantages = output["advantages"]
    assert advantages.shape == (len(SCORES),)
    expected = []
    for start in range(0, len(SCORES), GROUP):
        group = SCORES[start : start + GROUP]
        known = [s for s in group if s is not None]
        mean, std = statistics.mean(known), statistics.stdev(known)
        expected += [0.0 if s is None else (s - mean) / (std + 1e-4) for s in group]
    assert torch.allclose(advantages.float(), torch.tensor(expected), atol=1e-4), (
        advantages.tolist(),
        expected,
    )
    # The logged reward averages the scored plans only.
    known = [s for s in SCORES if s is not None]
    assert trainer._metrics["train"]["reward"][-1] == pytest.approx(statistics.mean(known))


def test_generate_single_turn_is_called_and_returns_as_the_override_expects(scored_batch):
    _, output, calls = scored_batch
    (call,) = calls
    # TRL passes (prompt_ids, images, multimodal_fields, num_generations) positionally.
    assert not call["kwargs"] and len(call["args"]) == 4
    prompt_ids, images, multimodal_fields, num_generations = call["args"]
    assert len(prompt_ids) == len(SCORES) and images is None
    assert isinstance(multimodal_fields, dict) and num_generations == GROUP
    # It returns (completion_ids, logprobs), one entry per prompt.
    completion_ids, logprobs = call["result"]
    assert len(completion_ids) == len(SCORES)
    assert all(isinstance(t, int) for ids in completion_ids for t in ids)
    assert logprobs is None or len(logprobs) == len(SCORES)
    # The prompts TRL trains on are the list it passed, as the override left it.
    assert int(output["prompt_mask"][-1].sum()) == call["last"] + len(EXTRA)


def test_async_reward_loop_and_metrics_are_what_the_recursive_trainer_uses(scored_batch):
    trainer, _, _ = scored_batch
    # An async reward starts TRL's event loop, which the recursive trainer schedules work on.
    loop = trainer.async_loop
    assert isinstance(loop, asyncio.AbstractEventLoop) and loop.is_running()
    assert asyncio.run_coroutine_threadsafe(asyncio.sleep(0, "ok"), loop).result(5) == "ok"
    # _metrics[mode] maps names to lists that the recursive trainer appends to.
    trainer._metrics["train"]["recursion/contract"].append(1.0)
    assert trainer._metrics["train"]["recursion/contract"] == [1.0]


def test_each_prompt_is_generated_with_the_workers_its_row_offers(make_trainer, tmp_path):
    """The offered-workers recorder (train/trainers.py, OfferedGRPOTrainer): TRL tokenizes the
    rows' prompts in row order, so every prompt ``generate`` gets is recorded with its row's
    ``offered`` ids, and the routing exploration samples only those (coverage writes each offered
    id)."""
    from conductor_core.train.exploration import routing_exploration
    from conductor_core.train.trainers import OfferedGRPOTrainer

    offered = [[1, 3]] * GROUP + [[0, 2]] * GROUP
    seen: list[list[tuple[int, ...] | None]] = []

    class Watching(OfferedGRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            seen.append([self.offered_prompts.get(ids) for ids in prompt_ids])
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)

    config = small(tmp_path, questions_per_step=2, plans_per_question=GROUP)
    trainer = make_trainer(config, cls=Watching)
    trainer.model.train()
    batch = [{**row, "offered": ids} for row, ids in zip(rows(), offered, strict=True)]
    tokenizer = trainer.processing_class
    with routing_exploration(trainer.model, tokenizer, trainer.offered_prompts, coverage=GROUP):
        output = trainer._generate_and_score_completions(batch)
    assert seen == [[tuple(ids) for ids in offered]]
    assert len(trainer.offered_prompts) == 0  # forgotten once the batch is done
    texts = tokenizer.batch_decode(output["completion_ids"], skip_special_tokens=True)
    # The tiny random model writes no plan, so coverage has no slot to fill: the check is that
    # generation ran with every prompt found (an unrecorded prompt raises RuntimeError).
    assert len(texts) == len(SCORES)


def test_the_stage_reward_scores_the_rows_and_the_trainer_hands_the_batch_on(tiny_dir, tmp_path):
    """With ``conductor_reward`` the trainer makes the reward function TRL calls (named
    ``conductor``): it scores TRL's completions with the rows' ``problem_id`` and ``offered``
    columns at the rows' training-stream sample indices, TRL gets its rewards, and the scored
    batch reaches each callback with ``on_batch_scored``, once per batch, and no other object."""
    from datasets import Dataset
    from transformers import TrainerCallback

    from conductor_core.sample_streams import training_index
    from conductor_core.tasks.problem import read_problems
    from conductor_core.train.grpo import grpo_args, load_model
    from conductor_core.train.reward import ConductorReward
    from conductor_core.train.trainers import OfferedGRPOTrainer
    from conductor_core.workers.bundled import (
        bundled_train_pool_path,
        bundled_train_problems_path,
    )
    from conductor_core.workers.config import load_pool

    problems = read_problems(bundled_train_problems_path())[:2]
    reward = ConductorReward({p.id: p for p in problems}, load_pool(bundled_train_pool_path()))
    indices: list[list[int]] = []
    score_batch = reward.score_batch

    async def recorded(*args, **kwargs):
        indices.append(list(kwargs["sample_indices"]))
        return await score_batch(*args, **kwargs)

    reward.score_batch = recorded
    batches = []

    class Scored(TrainerCallback):
        def on_batch_scored(self, args, state, control, scored=None, **kwargs):
            batches.append(scored)

    rows = [
        {"prompt": [{"role": "user", "content": p.question}], "problem_id": p.id, "offered": [0, 1]}
        for p in problems
        for _ in range(GROUP)
    ]
    config = small(tmp_path, questions_per_step=2, plans_per_question=GROUP)
    model, tokenizer = load_model(str(tiny_dir), config, "cpu")
    trainer = OfferedGRPOTrainer(
        model=model,
        conductor_reward=reward,
        args=grpo_args(config, tmp_path / "checkpoints", "cpu", progress=False),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Scored()],
    )
    try:
        assert trainer.reward_func_names == ["conductor"]
        trainer.model.train()
        output = trainer._generate_and_score_completions(rows)
        (scored,) = batches
        assert trainer.batches_scored == 1
        assert indices == [[training_index(0, len(rows), i) for i in range(len(rows))]]
        assert scored.problem_ids == tuple(r["problem_id"] for r in rows)
        texts = tokenizer.batch_decode(output["completion_ids"], skip_special_tokens=True)
        assert [t.strip() for t in scored.texts] == [t.strip() for t in texts]
        known = [r for r in scored.rewards if r is not None]
        logged = trainer._metrics["train"]["rewards/conductor/mean"][-1]
        assert logged == pytest.approx(sum(known) / len(known))
        with pytest.raises(RuntimeError, match="the batch its trainer is generating"):
            asyncio.run(trainer.reward_funcs[0](["x"], [problems[0].id]))
    finally:
        stop_reward_loop(trainer)


@pytest.mark.parametrize("mask", [True, False])
def test_truncated_completions_are_left_out_of_the_loss_when_asked(make_trainer, tmp_path, mask):
    """``mask_truncated_completions`` (the tiny profile's) reaches TRL, which zeroes the loss mask
    of every completion without an end token."""
    from trl import GRPOTrainer

    class Fixed(GRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            eos = self.processing_class.eos_token_id
            ends = [i % 2 == 0 for i in range(len(prompt_ids))]
            return [[5, 6, eos] if end else [5, 6, 7, 8] for end in ends], None

    config = small(tmp_path, questions_per_step=2, plans_per_question=GROUP)
    config = config.model_copy(update={"mask_truncated_completions": mask})
    trainer = make_trainer(config, cls=Fixed)
    assert trainer.args.mask_truncated_completions is mask
    output = trainer._generate_and_score_completions(rows())
    kept = output["completion_mask"].sum(dim=1).tolist()
    assert kept[0::2] == [3] * (len(SCORES) // 2)  # ended: every token in the loss
    assert kept[1::2] == ([0] if mask else [4]) * (len(SCORES) // 2)


def test_num_iterations_reuses_each_scored_batch(make_trainer, tmp_path):
    """``num_iterations`` reaches TRL, which generates and scores once per that many optimiser
    steps (the plans, and their worker calls, are reused)."""
    from trl import GRPOTrainer

    generations: list[int] = []

    class Counting(GRPOTrainer):
        def _generate_and_score_completions(self, inputs):
            generations.append(self.state.global_step)
            return super()._generate_and_score_completions(inputs)

    config = small(tmp_path, steps=4, questions_per_step=2, plans_per_question=GROUP)
    config = config.model_copy(update={"num_iterations": 2})
    trainer = make_trainer(config, cls=Counting)
    assert trainer.args.num_iterations == 2
    trainer.train()
    assert trainer.state.global_step == 4
    assert generations == [0, 2]


@pytest.mark.parametrize("on", [False, True])
def test_gradient_checkpointing_is_what_the_config_says(make_trainer, tmp_path, on):
    """TRL's own default is on: left unset, a tiny model recomputed its activations for nothing."""
    config = small(tmp_path, steps=1, questions_per_step=2, plans_per_question=GROUP)
    trainer = make_trainer(config.model_copy(update={"gradient_checkpointing": on}))
    trainer.train()
    layers = [m for m in trainer.model.modules() if hasattr(m, "gradient_checkpointing")]
    assert layers and all(m.gradient_checkpointing is on for m in layers)


@pytest.mark.parametrize("sync", [0, 2])
def test_ref_sync_steps_makes_the_policy_the_kl_reference(make_trainer, tmp_path, sync):
    """``ref_sync_steps`` reaches TRL's reference reset: after that many steps the KL reference
    holds the policy's weights; without it the reference stays the starting model."""
    import torch
    from trl import GRPOTrainer

    class Ending(GRPOTrainer):  # plans that end, so that every row is in the loss
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            eos = self.processing_class.eos_token_id
            return [[5] * (1 + i % 3) + [eos] for i in range(len(prompt_ids))], None

    config = small(tmp_path, steps=2, questions_per_step=2, plans_per_question=GROUP)
    config = config.model_copy(update={"beta": 0.1, "ref_sync_steps": sync, "learning_rate": 1e-2})

    async def by_plan(completions, **kwargs):  # different plans, different rewards
        return [float(len(str(c))) for c in completions]

    trainer = make_trainer(config, cls=Ending, reward=by_plan)
    start = [p.detach().clone() for p in trainer.model.parameters()]
    assert trainer.args.sync_ref_model is bool(sync)
    trainer.train()
    moved = [
        p for p, p0 in zip(trainer.model.parameters(), start, strict=True) if not torch.equal(p, p0)
    ]
    assert moved  # the policy trained
    pairs = zip(trainer.ref_model.parameters(), trainer.model.parameters(), strict=True)
    same = all(torch.equal(ref, policy) for ref, policy in pairs)
    assert same is bool(sync)


def test_a_resumed_run_takes_the_checkpoints_policy_as_its_reference(make_trainer, tmp_path):
    """With ``ref_sync_steps``, a resumed run's KL reference is the policy it resumes (TRL would
    load it from the starting model), in place before the first step."""
    import torch
    from transformers import TrainerCallback

    from conductor_core.train.grpo import reference_from_checkpoint

    config = small(tmp_path, steps=1, questions_per_step=2, plans_per_question=GROUP)
    trainer = make_trainer(config.model_copy(update={"beta": 0.1, "ref_sync_steps": 4}))
    with torch.no_grad():  # the checkpoint's weights: the policy has moved from the start
        for p in trainer.model.parameters():
            p.add_(0.01)
    seen: list[bool] = []

    class Look(TrainerCallback):
        def on_step_begin(self, args, state, control, model=None, **kwargs):
            pairs = zip(trainer.ref_model.parameters(), trainer.model.parameters(), strict=True)
            seen.append(all(torch.equal(ref, policy) for ref, policy in pairs))

    trainer.add_callback(Look())  # before: TRL's reference is the starting model
    trainer.add_callback(reference_from_checkpoint(trainer))
    trainer.add_callback(Look())
    trainer.train()
    assert seen == [False, True]


# --------------------------------------------------------------------------------------------
# The learning-rate warm-up


@pytest.mark.parametrize("scheduler", ["cosine", "linear", "constant", "constant_with_warmup"])
def test_warmup_ratio_is_applied(make_trainer, tmp_path, scheduler):
    peak = 1e-3
    config = small(tmp_path, steps=8, warmup_ratio=0.25, lr_scheduler=scheduler, learning_rate=peak)
    trainer = make_trainer(config)
    assert trainer.args.get_warmup_steps(config.steps) == 2
    trainer.create_optimizer_and_scheduler(num_training_steps=config.steps)
    lrs = []
    for _ in range(4):
        lrs.append(trainer.lr_scheduler.get_last_lr()[0])
        trainer.optimizer.step()
        trainer.lr_scheduler.step()
    # Linear from 0 over ceil(8 * 0.25) = 2 steps, then the peak.
    assert lrs[:3] == pytest.approx([0.0, peak / 2, peak])
    if scheduler.startswith("constant"):
        assert lrs[3] == pytest.approx(peak)
    else:
        assert lrs[3] < peak


def test_no_warmup_starts_at_the_peak(make_trainer, tmp_path):
    config = small(tmp_path, steps=8, warmup_ratio=0.0, lr_scheduler="constant")
    trainer = make_trainer(config)
    trainer.create_optimizer_and_scheduler(num_training_steps=config.steps)
    assert trainer.lr_scheduler.get_last_lr()[0] == pytest.approx(config.learning_rate)


# --------------------------------------------------------------------------------------------
# The importance correction of tokens not sampled from the policy


def test_a_token_not_sampled_from_the_policy_gets_its_truncated_importance_weight(
    make_trainer, tmp_path
):
    """train/exploration.py through TRL's own batch path: the sampling log-probability recorded
    for a token (here: row 1's first token, drawn with q = 0.5) becomes a per-token advantage
    weight min(pi / q, cap), with pi what TRL's loss computes; every other token keeps its row's
    advantage, and the loss takes the (rows, tokens) advantages."""
    import math

    import torch

    from conductor_core.train.trainers import OfferedGRPOTrainer

    class Recorded(OfferedGRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            # What the routing exploration leaves after its generate call.
            self.offered_prompts.sampling_log = [{}, {0: math.log(0.5)}]
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)

    config = small(tmp_path, questions_per_step=2, plans_per_question=GROUP, scale_rewards="group")
    trainer = make_trainer(config, cls=Recorded)
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows())
    assert "sampling_per_token_logps" not in output  # folded into the advantages
    advantages = output["advantages"]
    assert advantages.shape == output["completion_ids"].shape
    known = [s for s in SCORES[:GROUP] if s is not None]
    row_advantage = (SCORES[1] - statistics.mean(known)) / (statistics.stdev(known) + 1e-4)
    completion = output["completion_ids"]
    with torch.no_grad():
        log_pi, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model,
            torch.cat([output["prompt_ids"], completion], dim=1),
            torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
            completion.size(1),
        )
    weight = min(math.exp(float(log_pi[1, 0]) - math.log(0.5)), trainer.importance_ratio_cap)
    assert float(advantages[1, 0]) == pytest.approx(row_advantage * weight, rel=1e-3)
    length = int(output["completion_mask"][1].sum())
    assert torch.allclose(advantages[1, 1:length], torch.tensor(row_advantage), rtol=1e-3)
    for row in (0, 2, 3):  # untouched rows: one advantage for every token
        assert torch.allclose(advantages[row], advantages[row, :1].expand(completion.size(1)))
    assert trainer._metrics["train"]["exploration/tokens"][-1] == 1.0
    trainer.current_gradient_accumulation_steps = 1  # what training_step sets before the loss
    loss = trainer._compute_loss(trainer.model, output)
    assert torch.isfinite(loss)


# --------------------------------------------------------------------------------------------
# The offered mask: the loss's log-probabilities at masked slots


def scored_with_masks(trainer, output, masks):
    """TRL's log-probabilities of a scored batch's completions, without and with ``masks`` (the
    batch keys of LOSS_MASKS), and the policy's next-token probabilities at row 1's first
    completion token."""
    import torch

    completion = output["completion_ids"]
    ids = torch.cat([output["prompt_ids"], completion], dim=1)
    mask = torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1)
    with torch.no_grad():
        plain, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, completion.size(1)
        )
        trainer._loss_masks = masks
        masked, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, mask, completion.size(1)
        )
        trainer._loss_masks = {}
        logits = trainer.model(input_ids=ids[1:2], attention_mask=mask[1:2]).logits
    start = ids.size(1) - completion.size(1) - 1
    return plain, masked, torch.softmax(logits[0, start].float(), dim=-1)


def test_a_masked_slot_is_scored_under_the_mask_in_trls_batch_and_loss(make_trainer, tmp_path):
    """train/offered_mask.py through TRL's own batch path: the masked slots recorded at
    generation travel with their rows (``unoffered_slots``), and TRL's log-probability of the
    token there becomes ``log pi - log(1 - m)``, ``m`` the policy's mass on the masked ids; every
    other token's is TRL's own, and the loss runs on it."""
    import math

    import torch

    from conductor_core.train.trainers import OfferedGRPOTrainer

    class Recorded(OfferedGRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            # What the routing exploration leaves after a generate call under the mask.
            self.offered_prompts.slot_log = [{}, {0: 0b0101}] + [{}] * (len(prompt_ids) - 2)
            return super()._generate_single_turn(prompt_ids, *args, **kwargs)

    config = small(tmp_path, questions_per_step=2, plans_per_question=GROUP, scale_rewards="group")
    trainer = make_trainer(config, cls=Recorded)
    tok = trainer.processing_class
    digits = [tok.encode(str(i), add_special_tokens=False)[0] for i in range(4)]
    trainer.offered_prompts.mask_tokens = digits
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows())
    slots = output["unoffered_slots"]
    assert slots.shape == output["completion_ids"].shape
    assert int(slots[1, 0]) == 0b0101 and int(slots.count_nonzero()) == 1
    assert trainer._loss_masks == {}  # the batch is done

    plain, masked, probs = scored_with_masks(trainer, output, {"unoffered_slots": slots})
    m = float(probs[digits[0]] + probs[digits[2]])
    assert float(masked[1, 0]) == pytest.approx(float(plain[1, 0]) - math.log1p(-m), abs=1e-4)
    rest = torch.ones_like(masked, dtype=torch.bool)
    rest[1, 0] = False
    assert torch.equal(masked[rest], plain[rest])
    trainer.current_gradient_accumulation_steps = 1  # what training_step sets before the loss
    loss = trainer.compute_loss(trainer.model, output)
    assert torch.isfinite(loss) and trainer._loss_masks == {}


def test_a_grammar_sampled_row_is_scored_under_the_grammar_in_trls_batch_and_loss(
    make_trainer, tmp_path
):
    """train/grammar_sampling.py through TRL's own batch path: the allowed tokens recorded at
    generation travel with their rows (``grammar_allowed``), and TRL's log-probability of each
    token of a grammar-sampled row becomes ``log pi - log Z``, ``Z`` the policy's mass on the
    allowed tokens there; rows sampled unaided keep TRL's own, and the loss runs on it."""
    import math

    import torch

    from conductor_core.train.grammar_sampling import allowed_tensor
    from conductor_core.train.trainers import OfferedGRPOTrainer

    class Recorded(OfferedGRPOTrainer):
        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            completion_ids, logprobs = super()._generate_single_turn(prompt_ids, *args, **kwargs)
            # What the recursive stage leaves after sampling row 1 under a grammar that allowed
            # the token it wrote and the 8 lowest ids at each step.
            width = max(len(c) for c in completion_ids)
            masks = torch.zeros((1, width, self.model.config.vocab_size), dtype=torch.bool)
            masks[0, :, :8] = True
            for t, token in enumerate(completion_ids[1]):
                masks[0, t, token] = True
            self._loss_masks["grammar_allowed"] = allowed_tensor(masks, [1], len(prompt_ids), width)
            return completion_ids, logprobs

    config = small(tmp_path, questions_per_step=2, plans_per_question=GROUP, scale_rewards="group")
    trainer = make_trainer(config, cls=Recorded)
    trainer.model.train()
    output = trainer._generate_and_score_completions(rows())
    allowed = output["grammar_allowed"]
    assert allowed.shape[:2] == output["completion_ids"].shape and trainer._loss_masks == {}
    plain, under, probs = scored_with_masks(trainer, output, {"grammar_allowed": allowed})
    z = float(probs[allowed[1, 0, : probs.shape[0]]].sum())
    assert float(under[1, 0]) == pytest.approx(float(plain[1, 0]) - math.log(z), abs=1e-4)
    assert float(under[1, 0]) > float(plain[1, 0])
    assert torch.equal(under[0], plain[0]) and torch.equal(under[2:], plain[2:])
    trainer.current_gradient_accumulation_steps = 1
    loss = trainer.compute_loss(trainer.model, output)
    assert torch.isfinite(loss) and trainer._loss_masks == {}
