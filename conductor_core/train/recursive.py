"""The recursive stage: a small GRPOTrainer subclass that forces part of each batch into a
second round.

A generation batch holds ``B`` groups of ``G`` plans (one group per question). The first
``2 * pairs`` groups form ``pairs`` forced trajectories, ``pairs = round(B * forced_fraction / 2)``:
group ``2j`` holds round-1 plans for a question; one of them, drawn at random, is continued by
group ``2j + 1``, whose ``G`` rows are round-2 plans written after seeing that round-1 plan and its
final answer (a new plan, or three empty lists to keep the answer). Other groups are ordinary
single-round groups.

Rewards: a round-1 row scores its own answer; a round-2 row scores the final answer after the
second round. Each group holds one round only, so group-normalised advantages are normalised per
round; the advantages of forced round-1 rows are then multiplied by ``first_round_discount``.
A round-2 group shares one prompt (one previous plan and answer), as GRPO groups do, so its
baseline compares keeping with revising the same answer (measured: with one different previous
answer per row, the baseline mixed right and wrong previous answers and the tiny policy stopped
keeping altogether instead of learning when to keep).
Generation goes through TRL's own backend (transformers or vLLM), round 2 with one sample per
prompt.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from random import Random
from typing import Any

from conductor_core.train.data import prompt_messages
from conductor_core.train.reward import ConductorReward, PreviousRound, RoundState
from conductor_core.workflow.model import AccessMode
from conductor_core.workflow.parser import try_parse_plan

MAX_PREVIOUS_PLAN_CHARS = 600
"""An unparsable round-1 plan is shown (truncated) as the previous plan."""


@dataclass
class _Batch:
    inputs: list[dict[str, Any]]
    group: int
    pairs: int
    first_rows: list[int] = field(default_factory=list)
    second_rows: list[int] = field(default_factory=list)
    sources: list[int] = field(default_factory=list)
    """``sources[k]``: the round-1 row that round-2 row ``second_rows[k]`` continues."""


def forced_pairs(groups: int, fraction: float) -> int:
    """How many (round-1, round-2) group pairs a batch of ``groups`` groups gets."""
    return max(0, min(groups // 2, round(groups * fraction / 2)))


def make_recursive_trainer_class():
    """Build the subclass lazily (TRL is imported only here)."""
    from trl import GRPOTrainer

    class RecursiveGRPOTrainer(GRPOTrainer):
        """GRPOTrainer with forced second rounds (see the module docstring)."""

        def __init__(
            self,
            *args: Any,
            conductor_reward: ConductorReward,
            rounds: RoundState,
            prompt_style: str = "full",
            max_steps: int = 5,
            access_mode: str = "binary",
            forced_fraction: float = 0.5,
            first_round_discount: float = 0.25,
            **kwargs: Any,
        ) -> None:
            super().__init__(*args, **kwargs)
            self.conductor_reward = conductor_reward
            self.rounds = rounds
            self.prompt_style = prompt_style
            self.plan_max_steps = max_steps
            self.access_mode = access_mode
            self.forced_fraction = forced_fraction
            self.first_round_discount = first_round_discount
            self._batch: _Batch | None = None
            self.round_stats: dict[str, float] = {}

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            g = self.num_generations
            mode = "train" if self.model.training else "eval"
            self.rounds.clear()
            pairs = forced_pairs(len(inputs) // g, self.forced_fraction) if mode == "train" else 0
            batch = _Batch(inputs=inputs, group=g, pairs=pairs)
            rng = Random(f"{self.args.seed}:{self.state.global_step}")
            for j in range(pairs):
                a, b = 2 * j * g, (2 * j + 1) * g
                source = a + rng.randrange(g)
                for i in range(g):
                    # The round-2 group works on the round-1 group's question.
                    inputs[b + i] = dict(inputs[a + i])
                    batch.first_rows.append(a + i)
                    batch.second_rows.append(b + i)
                    batch.sources.append(source)
            self._batch = batch
            try:
                output = super()._generate_and_score_completions(inputs)
            finally:
                self._batch = None
            if batch.first_rows and self.first_round_discount != 1.0:
                adv = output["advantages"]
                rows = [r for r in batch.first_rows if r < adv.shape[0]]
                adv[rows] = adv[rows] * self.first_round_discount
            self._log_rounds(batch, mode)
            return output

        def _log_rounds(self, batch: _Batch, mode: str) -> None:
            """Per-step recursion metrics: keep rates by round-1 correctness, rewards by round."""
            from conductor_core.train.evaluate import recursion_metrics

            outcomes = self.conductor_reward.last_outcomes
            if not batch.second_rows or len(outcomes) < len(batch.inputs):
                return
            seconds = [outcomes[r] for r in batch.second_rows]
            got = recursion_metrics([outcomes[r] for r in batch.sources], seconds)
            parsed = [o for o in seconds if o.plan_ok]
            stats = {
                "recursion/second_round_rows": float(len(batch.second_rows)),
                "recursion/contexts": float(len(set(batch.sources))),
                "recursion/keep_rate": sum(1 for o in parsed if o.keep) / len(parsed)
                if parsed
                else 0.0,
                **{
                    f"recursion/{key}": got[key]
                    for key in (
                        "keep_when_right",
                        "keep_when_wrong",
                        "keep_discrimination",
                        "first_reward",
                        "final_reward",
                    )
                },
            }
            self.round_stats = stats
            for name, value in stats.items():
                self._metrics[mode][name].append(value)

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
            logprobs: list[Any] | None = [None] * len(prompt_ids) if lp1 is not None else None
            for k, r in enumerate(firsts):
                completion_ids[r] = comp1[k]
                if logprobs is not None:
                    logprobs[r] = lp1[k]
            texts = self.processing_class.batch_decode(
                [completion_ids[r] for r in batch.first_rows], skip_special_tokens=True
            )
            round2_ids = self._second_round_prompts(batch, texts)
            comp2, lp2 = super()._generate_single_turn(round2_ids, None, {}, 1)
            for k, r in enumerate(batch.second_rows):
                prompt_ids[r] = round2_ids[k]  # the caller keeps this list as the prompts
                completion_ids[r] = comp2[k]
                if logprobs is not None:
                    logprobs[r] = lp2[k] if lp2 is not None else []
            return completion_ids, logprobs

        def _second_round_prompts(self, batch: _Batch, texts: list[str]) -> list[list[int]]:
            """Run the round-1 plans, cache their outcomes and build the round-2 prompts."""
            rows = batch.first_rows
            inputs = batch.inputs
            step = int(self.state.global_step)
            coro = self.conductor_reward.score(
                texts,
                [inputs[r]["problem_id"] for r in rows],
                [inputs[r].get("offered") for r in rows],
                base_index=(step + 1) * 1_000_003,
            )
            outcomes = asyncio.run_coroutine_threadsafe(coro, self.async_loop_or_new()).result()
            by_row = dict(zip(rows, zip(texts, outcomes, strict=True), strict=True))
            for r, (_, outcome) in by_row.items():
                self.rounds.cached[r] = outcome
            tokenizer = self.processing_class
            prompts: dict[int, list[int]] = {}
            ids: list[list[int]] = []
            for r2, source in zip(batch.second_rows, batch.sources, strict=True):
                text, outcome = by_row[source]
                offered = inputs[source].get("offered") or []
                plan_text = previous_plan_text(
                    text, len(offered), self.plan_max_steps, self.access_mode
                )
                self.rounds.previous[r2] = PreviousRound(plan=plan_text, answer=outcome.answer)
                if outcome.infra_error:
                    self.rounds.excluded.add(r2)
                if source not in prompts:
                    problem = self.conductor_reward.problems[inputs[source]["problem_id"]]
                    messages = prompt_messages(
                        problem.question,
                        len(offered),
                        style=self.prompt_style,
                        max_steps=self.plan_max_steps,
                        access_mode=self.access_mode,
                        previous_plan=plan_text,
                        previous_answer=outcome.answer or "",
                    )
                    chat = tokenizer.apply_chat_template(
                        messages, tokenize=False, add_generation_prompt=True
                    )
                    prompts[source] = tokenizer(chat, add_special_tokens=False)["input_ids"]
                ids.append(list(prompts[source]))
            return ids

        def async_loop_or_new(self):
            """TRL's reward event loop (started because the reward is async)."""
            loop = getattr(self, "async_loop", None)
            if loop is None:
                raise RuntimeError("the recursive stage needs an async reward function")
            return loop

    return RecursiveGRPOTrainer


def previous_plan_text(raw: str, num_workers: int, max_steps: int, access_mode: str) -> str:
    """The previous plan as the Conductor sees it: rendered when it parsed, else the raw text."""
    workflow, _ = try_parse_plan(
        raw, num_workers=num_workers, max_steps=max_steps, access_mode=AccessMode(access_mode)
    )
    if workflow is not None:
        return workflow.render()
    return raw.strip()[:MAX_PREVIOUS_PLAN_CHARS]
