"""The training stages' ``GRPOTrainer`` subclasses, in one place.

* :class:`OfferedGRPOTrainer` (every stage but the recursive one): records which workers each
  prompt of a generation batch offers, for the routing exploration
  (:mod:`~conductor_core.train.exploration`), applies the importance correction of the tokens the
  exploration changed, scores the loss under the adaptive stage's offered mask
  (:mod:`~conductor_core.train.offered_mask`) and, with ``generation.plan_grammar``, samples round 1
  under the plan grammar (:mod:`~conductor_core.train.grammar_sampling`).
* :class:`RecursiveGRPOTrainer` (the recursive stage, :mod:`~conductor_core.train.recursive`):
  the former with part of each batch forced into a second round.

Given the stage's :class:`~conductor_core.train.reward.ConductorReward`, a trainer makes the reward
function TRL calls (:class:`StageRewardFunction`), and each batch's data flows one way: the trainer
gives every row its sample index (:func:`~conductor_core.sample_streams.training_index`, over all
ranks) and, in the recursive stage, makes the batch's recursion context while it generates; the
reward function hands both to :meth:`~conductor_core.train.reward.ConductorReward.score_batch`,
whose :class:`~conductor_core.train.reward.ScoredBatch` comes back to the trainer; the trainer
measures its round-2 advantages and metrics on it and hands it to every trainer callback with an
``on_batch_scored(args, state, control, scored=...)`` method (the stage's tracking). Nothing of a
batch is left on the reward for another object to read.

The helpers they call live with their subject in those modules; this one holds the classes only.
It imports TRL at module level, so its callers (:func:`~conductor_core.train.grpo.build_trainer`)
import it inside functions: importing the rest of ``conductor_core.train`` does not load TRL.

The trainers extend TRL through its public ``compute_loss`` and through the private methods of
:data:`TRL_PRIVATE_OVERRIDES`, which change within TRL's 1.x. That list is the one place they are
named: tests/unit/test_trl_contract.py checks it against the installed TRL (each exists on
``GRPOTrainer`` with a signature the override accepts, and no other private method is
overridden), and tests/integration/test_trl_trainer_contract.py runs them through a real trainer.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from trl import GRPOTrainer

from conductor_core.policy.base import PlanRequest, PreviousRound
from conductor_core.policy.plan_mask import PlanGrammar
from conductor_core.sample_streams import training_index
from conductor_core.solve import plan_request
from conductor_core.train.exploration import (
    IMPORTANCE_RATIO_CAP,
    LOSS_MASKS,
    OfferedPrompts,
    importance_weights,
    sampling_log_probs,
    without_coverage,
)
from conductor_core.train.grammar_sampling import allowed_tensor, generating_under
from conductor_core.train.offered_mask import (
    backbone_and_head,
    grammar_log_probs,
    masked_log_probs,
    slot_tensor,
)
from conductor_core.train.recursive import (
    _Batch,
    discount_rows,
    measure_against_keeping,
    pair_rows,
    prompt_token_ids,
    rank_pairs,
    round_metrics,
)
from conductor_core.train.reward import ConductorReward, RoundState, ScoredBatch

__all__ = [
    "TRL_PRIVATE_OVERRIDES",
    "OfferedGRPOTrainer",
    "RecursiveGRPOTrainer",
    "StageRewardFunction",
]

TRL_PRIVATE_OVERRIDES: tuple[tuple[str, str], ...] = (
    (
        "_generate_and_score_completions",
        "per batch: its rows' offered ids, loss masks, IS weights; recursive: the forced pairs",
    ),
    (
        "_generate_single_turn",
        "sample under the plan grammar or routing exploration, return log q; recursive: round 2",
    ),
    (
        "_get_per_token_logps_and_entropies",
        "score each token under the offered mask or plan grammar it was sampled under",
    ),
    (
        "_tokenize_prompts",
        "record each prompt's offered workers under the token ids TRL makes of it",
    ),
)
"""Every private ``GRPOTrainer`` method the trainers of this module override (name, why)."""


@dataclass
class _Scoring:
    """One generation batch on its way through TRL: its rows' sample indices, the recursion
    context the recursive trainer makes while generating it, and what the stage's reward returned
    for it (set when TRL has called the reward function)."""

    indices: list[int]
    rounds: RoundState | None = None
    scored: ScoredBatch | None = None


class StageRewardFunction:
    """The reward function TRL calls for a trainer of this module: the stage's reward scores
    TRL's batch (:meth:`~conductor_core.train.reward.ConductorReward.score_batch`) at the sample
    indices, and with the recursion context, that the trainer made for the batch; the metrics go
    to TRL's ``log_metric`` and ``log_extra`` hooks and the scored batch back to the trainer."""

    __name__ = "conductor"  # TRL's name for it: the logged `rewards/conductor/*`

    def __init__(self, trainer: OfferedGRPOTrainer, reward: ConductorReward) -> None:
        self.trainer = trainer
        self.reward = reward

    async def __call__(
        self,
        completions: list[Any],
        problem_id: list[str],
        *,
        completion_ids: list[list[int]] | None = None,
        offered: list[Any] | None = None,
        workers: list[Any] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        log_extra: Callable[[str, list], None] | None = None,
        **_: Any,
    ) -> list[float | None]:
        """One reward (None: left out) per completion, in batch order."""
        scoring = self.trainer._scoring
        if scoring is None or len(scoring.indices) != len(completions):
            raise RuntimeError(
                "the stage's reward function scores the batch its trainer is generating, "
                f"not {len(completions)} completions called from elsewhere"
            )
        scored = await self.reward.score_batch(
            completions,
            problem_id,
            sample_indices=scoring.indices,
            offered=offered,
            completion_ids=completion_ids,
            workers=workers,
            rounds=scoring.rounds,
        )
        scored.report(log_metric, log_extra)
        scoring.scored = scored
        return list(scored.rewards)


class OfferedGRPOTrainer(GRPOTrainer):
    """TRL's ``GRPOTrainer`` that records, for each generation batch, the pool ids each prompt
    offers (its row's ``offered`` column) in ``self.offered_prompts``, keyed by the token ids TRL
    makes of the prompt: what :func:`~conductor_core.train.exploration.routing_exploration`
    reads. It weights the tokens the exploration changed by their truncated importance ratios,
    scores the loss under the sampling masks of its rows and, with ``plan_grammar``
    (``generation.plan_grammar``), samples under the plan grammar.

    With ``conductor_reward`` (the stage's reward) it makes the reward function TRL calls
    (:class:`StageRewardFunction`; ``reward_funcs`` is then not given) and hands each scored
    batch to its callbacks that have ``on_batch_scored``; ``batches_scored`` counts them.
    """

    importance_ratio_cap: float = IMPORTANCE_RATIO_CAP

    def __init__(
        self,
        *args: Any,
        conductor_reward: ConductorReward | None = None,
        plan_grammar: bool = False,
        **kwargs: Any,
    ) -> None:
        if conductor_reward is not None:
            if "reward_funcs" in kwargs or len(args) > 1:
                raise TypeError("give the trainer conductor_reward or reward_funcs, not both")
            kwargs["reward_funcs"] = [StageRewardFunction(self, conductor_reward)]
        elif plan_grammar:
            raise TypeError("plan_grammar needs the stage's conductor_reward (its plan requests)")
        self.conductor_reward = conductor_reward
        self.batches_scored = 0
        self._scoring: _Scoring | None = None
        self.offered_prompts = OfferedPrompts()
        self._batch_offered: list[Any] | None = None
        # With `generation.plan_grammar`: the rows being generated (the stage's reward, its
        # problems, pool and solve options, makes each row's plan request).
        self.plan_grammar = plan_grammar
        self._grammar: Any = None
        self._batch_inputs: list[dict[str, Any]] | None = None
        # The sampling masks of the rows being scored, by key (LOSS_MASKS): set while a batch
        # is generated (TRL's old and reference log-probs are computed there), then carried
        # with their rows through TRL's shuffle and split to the loss.
        self._loss_masks: dict[str, Any] = {}
        super().__init__(*args, **kwargs)

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        self._batch_offered = [row.get("offered") for row in inputs]
        self._batch_inputs = inputs
        scoring = self._scoring = _Scoring(self._row_sample_indices(len(inputs)))
        try:
            output = super()._generate_and_score_completions(inputs)
            output.update(self._loss_masks)  # travels with its rows to the loss
            if not self.use_vllm:  # vLLM's sampling log-probs are TRL's own correction's
                log_q = output.pop("sampling_per_token_logps", None)
                if log_q is not None:
                    self._weight_off_policy_tokens(output, log_q)
        finally:
            self._batch_offered = None
            self._batch_inputs = None
            self._scoring = None
            self._loss_masks = {}
            self.offered_prompts.clear()
        self._use_scored(output, scoring)
        return output

    def _row_sample_indices(self, rows: int) -> list[int]:
        """The sample index of each of this process's ``rows`` rows: row ``i`` of rank ``k`` is
        row ``k * rows + i`` of the step's rows over all ranks
        (:func:`~conductor_core.sample_streams.training_index`), so no two ranks draw alike."""
        acc = self.accelerator
        step, total = int(self.state.global_step), rows * acc.num_processes
        first = acc.process_index * rows
        return [training_index(step, total, first + i) for i in range(rows)]

    def _use_scored(self, output: dict[str, Any], scoring: _Scoring) -> None:
        """Hand the batch the stage's reward scored to every callback with an
        ``on_batch_scored(args, state, control, scored=...)`` method (nothing when the trainer
        has no stage reward)."""
        if scoring.scored is None:
            return
        self.batches_scored += 1
        for callback in self.callback_handler.callbacks:
            receive = getattr(callback, "on_batch_scored", None)
            if receive is not None:
                receive(self.args, self.state, self.control, scored=scoring.scored)

    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch=None
    ) -> Any:
        self._loss_masks = {k: inputs[k] for k in LOSS_MASKS if inputs.get(k) is not None}
        try:
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        finally:
            self._loss_masks = {}

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, *args: Any, **kwargs: Any
    ):
        """TRL's log-probabilities, under the masks the rows being scored were sampled
        under: the offered mask at masked slots
        (:func:`~conductor_core.train.offered_mask.masked_log_probs`), the plan grammar in
        rows sampled under it (:func:`~conductor_core.train.offered_mask.grammar_log_probs`)."""
        slots = self._loss_masks.get("unoffered_slots")
        allowed = self._loss_masks.get("grammar_allowed")
        tokens = self.offered_prompts.mask_tokens
        if slots is None or tokens is None or not bool(slots.any()):
            slots = None
        if allowed is None or bool(allowed.all()):
            allowed = None
        if slots is None and allowed is None:
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        want = (input_ids.size(0), logits_to_keep)
        for name, mask in (("offered mask", slots), ("plan grammar", allowed)):
            if mask is not None and tuple(mask.shape[:2]) != want:
                raise RuntimeError(
                    f"{name}: masks of shape {tuple(mask.shape)} for "
                    f"{input_ids.size(0)} rows of {logits_to_keep} completion tokens"
                )
        if slots is not None and allowed is not None:
            raise RuntimeError("the offered mask and the plan grammar never mask one batch")
        backbone, head = backbone_and_head(self.accelerator.unwrap_model(model))
        states: list[Any] = []

        def keep(_module: Any, _args: Any, out: Any) -> None:
            hidden = getattr(out, "last_hidden_state", None)
            states.append(out[0] if hidden is None else hidden)

        handle = backbone.register_forward_hook(keep)
        try:
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        finally:
            handle.remove()
        hidden = torch.cat(states, dim=0)[:, -logits_to_keep - 1 : -1]
        if slots is not None:
            logps = masked_log_probs(
                logps, hidden, head, slots.to(logps.device), tokens, self.temperature
            )
        else:
            logps = grammar_log_probs(
                logps, hidden, head, allowed.to(logps.device), self.temperature
            )
        return logps, entropies, aux

    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        processor = self._plan_grammar_processor(prompt_ids)
        model = self.accelerator.unwrap_model(self.model)
        with generating_under(model, processor):
            completion_ids, logprobs = super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        if processor is not None:  # the loss scores the plans under the grammar they were
            rows = len(prompt_ids)  # sampled from (set for TRL's old log-probs, too)
            self._loss_masks["grammar_allowed"] = allowed_tensor(
                processor.allowed(),
                range(rows),
                rows,
                max((len(ids) for ids in completion_ids), default=0),
                self.accelerator.device,
            )
        masked = self.offered_prompts.take_slot_log()
        if masked is not None and not self.use_vllm:
            # Set for the rest of this batch's generation step: TRL computes old and
            # reference log-probs there, which must be masked as the loss's are.
            length = max((len(ids) for ids in completion_ids), default=0)
            self._loss_masks["unoffered_slots"] = slot_tensor(
                masked, length, self.accelerator.device
            )
        log = self.offered_prompts.take_sampling_log()
        if self.use_vllm or log is None:  # vLLM's are its own; None: nothing was changed
            return completion_ids, logprobs
        return completion_ids, sampling_log_probs(completion_ids, log)

    def _plan_grammar_processor(self, prompt_ids: list[Any]) -> Any:
        """With ``generation.plan_grammar``, a recording plan-grammar logits processor for
        the rows being generated (each row's plan request: its question, the workers it
        offers, the stage's solve options); else None."""
        reward, inputs = self.conductor_reward, self._batch_inputs
        if not self.plan_grammar or reward is None or inputs is None:
            return None
        if len(inputs) != len(prompt_ids):
            raise RuntimeError(
                f"generation.plan_grammar: {len(prompt_ids)} prompts to generate for "
                f"{len(inputs)} rows"
            )
        if self._grammar is None:
            self._grammar = PlanGrammar(self.processing_class)
        pool_size = len(reward.pool_config.workers)
        requests = []
        for row in inputs:
            offered = tuple(row.get("offered") or range(pool_size))
            options = replace(reward.options, worker_ids=offered)
            question = reward.problems[row["problem_id"]].question
            requests.append(plan_request(question, pool_size, options))
        return self._grammar.processor(requests, record=True)

    def _weight_off_policy_tokens(self, output: dict[str, Any], log_q: Any) -> None:
        """Multiply the advantage of each token not sampled from the policy (``log_q`` not
        NaN) by its truncated importance ratio
        (:func:`~conductor_core.train.exploration.importance_weights`)."""
        mask = output["completion_mask"]
        if not bool((~torch.isnan(log_q) & mask.bool()).any()):
            return
        log_pi = output.get("old_per_token_logps")
        if log_pi is None:  # one update per batch: the policy now is the one that sampled
            completion = output["completion_ids"]
            with torch.no_grad():
                log_pi, _, _ = self._get_per_token_logps_and_entropies(
                    self.model,
                    torch.cat([output["prompt_ids"], completion], dim=1),
                    torch.cat([output["prompt_mask"], mask], dim=1),
                    completion.size(1),
                    batch_size=self.args.per_device_train_batch_size,
                )
        weights, stats = importance_weights(log_pi, log_q, mask, self.importance_ratio_cap)
        advantages = output["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        output["advantages"] = advantages * weights
        mode = "train" if self.model.training else "eval"
        for name, value in stats.items():
            self._metrics[mode][name].append(value)

    def _tokenize_prompts(self, prompts: list) -> Any:
        out = super()._tokenize_prompts(prompts)
        rows = self._batch_offered
        if rows is not None and len(rows) == len(out[0]):
            # a row without the column is recorded offering nothing: sampled as it is
            self.offered_prompts.record(out[0], [r or () for r in rows])
        return out


class RecursiveGRPOTrainer(OfferedGRPOTrainer):
    """:class:`OfferedGRPOTrainer` with forced second rounds (the recursive stage:
    :mod:`~conductor_core.train.recursive`)."""

    def __init__(
        self,
        *args: Any,
        conductor_reward: ConductorReward,
        forced_fraction: float = 0.5,
        first_round_discount: float = 0.25,
        round2_grammar: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, conductor_reward=conductor_reward, **kwargs)
        # The stage's plan format and prompt style, as the reward scores plans.
        self.options = conductor_reward.options
        self.forced_fraction = forced_fraction
        self.first_round_discount = first_round_discount
        self.round2_grammar = round2_grammar
        self._batch: _Batch | None = None

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        g = self.num_generations
        mode = "train" if self.model.training else "eval"
        pairs = 0
        if mode == "train":
            acc = self.accelerator
            pairs = rank_pairs(
                len(inputs) // g, self.forced_fraction, acc.process_index, acc.num_processes
            )
        batch = _Batch(inputs=inputs, pairs=pairs)
        batch.first_rows, batch.second_rows = pair_rows(pairs, g)
        for r1, r2 in zip(batch.first_rows, batch.second_rows, strict=True):
            inputs[r2] = dict(inputs[r1])  # the round-2 group works on the same question
        self._batch = batch
        try:
            return super()._generate_and_score_completions(inputs)
        finally:
            self._batch = None

    def _use_scored(self, output: dict[str, Any], scoring: _Scoring) -> None:
        """The forced pairs' advantages, from the scored batch and the round-1 outcomes of the
        batch's recursion context: round 1's discounted, round 2's measured against keeping
        (:func:`~conductor_core.train.recursive.measure_against_keeping`); the step's recursion
        metrics; then the callbacks get the batch."""
        batch = self._batch
        assert batch is not None  # called within _generate_and_score_completions
        advantages = output["advantages"]
        discount_rows(advantages, batch.first_rows, self.first_round_discount)
        scored = scoring.scored
        if scored is not None:
            firsts = scoring.rounds.cached if scoring.rounds is not None else {}
            rows = (batch.first_rows, batch.second_rows)
            measure_against_keeping(advantages, *rows, scored.rewards, firsts)
            if batch.second_rows and len(scored.outcomes) >= len(batch.inputs):
                mode = "train" if self.model.training else "eval"
                for name, value in round_metrics(*rows, scored.outcomes).items():
                    self._metrics[mode][name].append(value)
        super()._use_scored(output, scoring)

    def _generate_single_turn(
        self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False
    ):
        batch = self._batch
        if batch is None or not batch.pairs or images is not None:
            return super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
        second = set(batch.second_rows)
        firsts = [r for r in range(len(prompt_ids)) if r not in second]
        comp1, lp1 = super()._generate_single_turn(
            [prompt_ids[r] for r in firsts], None, multimodal_fields, num_generations
        )
        completion_ids: list[Any] = [None] * len(prompt_ids)
        for k, r in enumerate(firsts):
            completion_ids[r] = comp1[k]
        texts = self.processing_class.batch_decode(
            [completion_ids[r] for r in batch.first_rows], skip_special_tokens=True
        )
        round2_ids, requests = self._second_round_prompts(batch, texts)
        processor = self._round2_processor(requests)
        model = self.accelerator.unwrap_model(self.model)
        with without_coverage(self.offered_prompts), generating_under(model, processor):
            comp2, lp2 = super()._generate_single_turn(round2_ids, None, {}, 1)
        for k, r in enumerate(batch.second_rows):
            prompt_ids[r] = round2_ids[k]  # the caller keeps this list as the prompts
            completion_ids[r] = comp2[k]
        if processor is not None:  # the loss scores round 2 under the grammar it was sampled
            self._loss_masks["grammar_allowed"] = allowed_tensor(
                processor.allowed(),
                batch.second_rows,
                len(prompt_ids),
                max(len(ids) for ids in completion_ids),
                self.accelerator.device,
            )
        if lp1 is None and lp2 is None:
            return completion_ids, None
        # Sampling log-probs for every row; NaN (sampled from the policy, no correction)
        # where a call returned none.
        logprobs: list[Any] = [None] * len(prompt_ids)
        for rows, comps, lps in ((firsts, comp1, lp1), (batch.second_rows, comp2, lp2)):
            for k, r in enumerate(rows):
                logprobs[r] = lps[k] if lps is not None else [math.nan] * len(comps[k])
        return completion_ids, logprobs

    def _round2_processor(self, requests: list[PlanRequest]) -> Any:
        """With ``round2_grammar``, a recording plan-grammar logits processor for round 2's
        requests (in row order); else None."""
        if not self.round2_grammar:
            return None
        if self._grammar is None:
            self._grammar = PlanGrammar(self.processing_class)
        return self._grammar.processor(requests, record=True)

    def _second_round_prompts(
        self, batch: _Batch, texts: list[str]
    ) -> tuple[list[list[int]], list[PlanRequest]]:
        """Run the round-1 plans (each at its own row's sample index), and build the round-2
        prompts (their token ids, and their requests: what the plan grammar of each is made from)
        and the batch's recursion context, which the stage's reward gets with the batch."""
        rows = batch.first_rows
        inputs = batch.inputs
        scoring = self._scoring
        assert scoring is not None  # set for the batch being generated
        coro = self.conductor_reward.score(
            texts,
            [inputs[r]["problem_id"] for r in rows],
            [inputs[r].get("offered") for r in rows],
            sample_indices=[scoring.indices[r] for r in rows],
        )
        outcomes = asyncio.run_coroutine_threadsafe(coro, self.async_loop_or_new()).result()
        by_row = dict(zip(rows, zip(texts, outcomes, strict=True), strict=True))
        tokenizer = self.processing_class
        pool_size = len(self.conductor_reward.pool_config.workers)
        ids: list[list[int]] = []
        requests: list[PlanRequest] = []
        offered_rows: list[list[int]] = []
        previous_rounds: dict[int, PreviousRound] = {}
        excluded: set[int] = set()
        for r2, source in zip(batch.second_rows, batch.first_rows, strict=True):
            text, outcome = by_row[source]
            offered = inputs[source].get("offered") or list(range(pool_size))
            previous = previous_rounds[r2] = PreviousRound(plan=text, answer=outcome.answer)
            if outcome.infra_error:
                excluded.add(r2)  # its round 1 was spoiled by infrastructure: left out
            problem = self.conductor_reward.problems[inputs[source]["problem_id"]]
            options = replace(self.options, worker_ids=tuple(offered))
            request = plan_request(problem.question, pool_size, options, previous=previous)
            ids.append(prompt_token_ids(tokenizer, request))
            requests.append(request)
            offered_rows.append(offered)
        # The routing floor looks each prompt up with the workers it offers.
        self.offered_prompts.record(ids, offered_rows)
        scoring.rounds = RoundState(
            previous=previous_rounds,
            cached={r: outcome for r, (_, outcome) in by_row.items()},
            excluded=frozenset(excluded),
        )
        return ids, requests

    def async_loop_or_new(self):
        """TRL's reward event loop (started because the reward is async)."""
        loop = getattr(self, "async_loop", None)
        if loop is None:
            raise RuntimeError("the recursive stage needs an async reward function")
        return loop
