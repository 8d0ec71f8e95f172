"""Exploration of the routing choice (a floor and coverage), for GRPO sampling with transformers.

A small policy cannot tell question types apart at first, so GRPO moves every question's routing
towards the worker that is best on average; a specialist that is weak elsewhere then loses its
probability for its own domain too, and once it is never sampled GRPO cannot bring it back
(docs/training.md, "On other pools"). The floor keeps it sampled: at each worker-id slot of a plan
(``model_id = [`` or the ``,`` after an id), the next-token distribution becomes
``(1 - floor) * p + floor * uniform(offered ids)``, so each offered worker keeps at least
``floor / n`` of the choice. Other tokens are sampled from the policy unchanged.

The sampled plans then come from a slightly different policy than the one trained; GRPO's loss
takes them as on-policy (ratio 1 with one update per batch), which biases it a little towards the
forced choices that scored well, the point of the floor. It is applied by wrapping the model's
``generate`` (the call TRL makes with its transformers backend) with one logits processor; vLLM
sampling does not go through it.

The floor alone does not separate question types when one worker is best on most of them: the
policy sends everything to that worker, and the few floor samples of the others carry too little
contrast to split off the rest. Routing *coverage* gives every group that contrast: the first
``coverage`` plans of each group (the rows that share one prompt) each route to a different
offered worker, drawn in random order, at every worker slot. Within a group GRPO's advantages sum
to zero, so the part of the gradient that moves all questions towards the worker best on average
cancels, and what is left ranks the workers for that question.

Which workers a prompt offers comes from the data, not from the prompt's text: each training row
carries its ``offered`` pool ids (:mod:`conductor_core.train.data`). ``generate`` only sees token
ids, so the trainer (:func:`offered_trainer_class`) records, for each generation batch, every
prompt's token ids with its row's offered ids (:class:`OfferedPrompts`), where TRL turns the rows'
prompts into token ids; the exploration looks each generated row up there.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any

__all__ = [
    "OfferedPrompts",
    "offered_trainer_class",
    "routing_exploration",
    "routing_processor",
    "without_exploration",
]

_SLOT = re.compile(r"model_id\s*=\s*\[\s*(?:\d+\s*,\s*)*$")


class OfferedPrompts:
    """The pool ids each prompt of the current generation batch offers, keyed by the prompt's
    token ids (as ``generate`` gets them, without padding). Filled from the training rows'
    ``offered`` column by the trainer (:func:`offered_trainer_class`), read by
    :func:`routing_exploration`."""

    def __init__(self) -> None:
        self._by_prompt: dict[tuple[int, ...], tuple[int, ...]] = {}

    def record(self, prompt_ids: Sequence[Sequence[int]], offered: Sequence[Sequence[int]]) -> None:
        """Record that prompt ``prompt_ids[i]`` offers the pool ids ``offered[i]``."""
        if len(prompt_ids) != len(offered):
            raise ValueError(
                f"routing exploration: {len(prompt_ids)} prompts but {len(offered)} offered lists"
            )
        for ids, workers in zip(prompt_ids, offered, strict=True):
            self._by_prompt[_key(ids)] = tuple(int(w) for w in workers)

    def get(self, prompt_ids: Sequence[int]) -> tuple[int, ...] | None:
        """The pool ids the prompt with these token ids offers (None: not recorded)."""
        return self._by_prompt.get(_key(prompt_ids))

    def clear(self) -> None:
        """Forget every prompt (the batch is done)."""
        self._by_prompt.clear()

    def __len__(self) -> int:
        return len(self._by_prompt)


def _key(ids: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(t) for t in ids)


def _single_token_ids(tokenizer: Any, ids: Sequence[int]) -> list[int] | None:
    """Token ids of the worker ids written as text, or None when one takes several tokens."""
    out = []
    for i in ids:
        toks = tokenizer.encode(str(i), add_special_tokens=False)
        if len(toks) != 1:
            return None
        out.append(toks[0])
    return out


def routing_processor(
    tokenizer: Any,
    prompts: Sequence[Hashable],
    offered: Sequence[Sequence[int] | None],
    prompt_length: int,
    floor: float,
    coverage: int = 0,
) -> Callable[[Any, Any], Any]:
    """A logits processor for one ``generate`` call that applies the routing floor ``floor`` and
    routes the first ``coverage`` rows of each prompt to distinct offered workers.

    ``prompts`` identifies each prompt of the call (rows with equal prompts form one group: text,
    or a tuple of token ids), ``offered`` gives the pool ids each prompt offers (None or empty:
    that prompt is sampled as it is), and the batch is left-padded to ``prompt_length`` tokens.
    With ``num_return_sequences`` the rows of a prompt follow each other."""
    import torch

    if len(prompts) != len(offered):
        raise ValueError(f"routing exploration: {len(prompts)} prompts, {len(offered)} offered")
    allowed = [_single_token_ids(tokenizer, ids) if ids else None for ids in offered]
    token_text: dict[int, str] = {}
    assigned: dict[int, int] = {}  # row -> the token of the worker id it is routed to
    drawn = False

    def text_of(tok: int) -> str:
        if tok not in token_text:
            token_text[tok] = tokenizer.decode([tok])
        return token_text[tok]

    def assign(rows: int, per_prompt: int) -> None:
        """Draw each group's worker order once per call (the torch RNG, seeded by the trainer)."""
        groups: dict[Hashable, list[int]] = {}
        for row in range(rows):
            index = row // per_prompt
            if index < len(prompts) and allowed[index]:
                groups.setdefault(prompts[index], []).append(row)
        for members in groups.values():
            ids = allowed[members[0] // per_prompt]
            assert ids
            order = torch.randperm(len(ids)).tolist()
            for j, row in enumerate(members[:coverage]):
                assigned[row] = ids[order[j % len(ids)]]

    def process(input_ids: Any, scores: Any) -> Any:
        per_prompt = max(1, input_ids.shape[0] // max(1, len(allowed)))  # num_return_sequences
        nonlocal drawn
        if coverage and not drawn:
            assign(input_ids.shape[0], per_prompt)
            drawn = True
        rows = []
        for row in range(input_ids.shape[0]):
            ids = allowed[row // per_prompt] if row // per_prompt < len(allowed) else None
            if not ids or input_ids.shape[1] <= prompt_length:
                continue
            last = text_of(int(input_ids[row, -1])).rstrip()
            if last and not last.endswith(("[", ",")):  # a slot follows only these (or spaces)
                continue
            completion = tokenizer.decode(input_ids[row, prompt_length:].tolist())
            if _SLOT.search(completion):
                rows.append((row, ids))
        if not rows:
            return scores
        out = scores.clone()
        for row, ids in rows:
            if row in assigned:
                out[row] = float("-inf")
                out[row, assigned[row]] = 0.0
                continue
            if not floor:
                continue
            probs = torch.softmax(scores[row].float(), dim=-1) * (1.0 - floor)
            probs[ids] += floor / len(ids)
            out[row] = torch.log(probs).to(scores.dtype)
        return out

    return process


@contextmanager
def routing_exploration(
    model: Any,
    tokenizer: Any,
    offered: OfferedPrompts,
    floor: float = 0.0,
    coverage: int = 0,
) -> Iterator[Any]:
    """Within the block, ``model.generate`` samples plans with the routing floor ``floor`` (in
    [0, 1)) and routes the first ``coverage`` (>= 0) plans of each prompt to distinct offered
    workers; both 0 leave it alone. Each call looks its prompts (the unpadded ``input_ids`` of
    each row) up in ``offered``, so both spread over the pool ids each row of the data offers; a
    call with a prompt that was not recorded there raises ``RuntimeError``."""
    if not 0.0 <= floor < 1.0:
        raise ValueError(f"routing floor must lie in [0, 1), got {floor}")
    if coverage < 0:
        raise ValueError(f"routing coverage must be >= 0, got {coverage}")
    if floor == 0.0 and coverage == 0:
        yield model
        return
    from transformers import LogitsProcessorList

    generate = model.generate

    def generate_with_exploration(*args: Any, **kwargs: Any) -> Any:
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        if input_ids is None:
            return generate(*args, **kwargs)
        mask = kwargs.get("attention_mask")
        prompts = [
            _key(row[m.bool()].tolist() if mask is not None else row.tolist())
            for row, m in zip(input_ids, mask if mask is not None else input_ids, strict=True)
        ]
        workers = [offered.get(p) for p in prompts]
        if any(w is None for w in workers):
            missing = sum(w is None for w in workers)
            raise RuntimeError(
                f"routing exploration: {missing} of {len(prompts)} prompts to generate were not "
                f"recorded with their offered workers; generate through the trainer of "
                f"offered_trainer_class() (it records each batch's rows)"
            )
        processor = routing_processor(
            tokenizer, prompts, workers, input_ids.shape[1], floor, coverage
        )
        processors = LogitsProcessorList(kwargs.pop("logits_processor", None) or [])
        processors.append(processor)
        return generate(*args, logits_processor=processors, **kwargs)

    model.generate = generate_with_exploration  # an instance attribute: the class's stays as it was
    try:
        yield model
    finally:
        del model.generate


@cache
def offered_trainer_class() -> type:
    """TRL's ``GRPOTrainer`` that records, for each generation batch, the pool ids each prompt
    offers (its row's ``offered`` column) in ``self.offered_prompts``, keyed by the token ids TRL
    makes of the prompt: what :func:`routing_exploration` reads (built lazily: TRL is imported
    here only)."""
    from trl import GRPOTrainer

    class OfferedGRPOTrainer(GRPOTrainer):
        """GRPOTrainer recording which workers each prompt of a generation batch offers."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.offered_prompts = OfferedPrompts()
            self._batch_offered: list[Any] | None = None
            super().__init__(*args, **kwargs)

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            self._batch_offered = [row.get("offered") for row in inputs]
            try:
                return super()._generate_and_score_completions(inputs)
            finally:
                self._batch_offered = None
                self.offered_prompts.clear()

        def _tokenize_prompts(self, prompts: list) -> Any:
            out = super()._tokenize_prompts(prompts)
            rows = self._batch_offered
            if rows is not None and len(rows) == len(out[0]):
                # a row without the column is recorded offering nothing: sampled as it is
                self.offered_prompts.record(out[0], [r or () for r in rows])
            return out

    return OfferedGRPOTrainer


@contextmanager
def without_exploration(model: Any) -> Iterator[Any]:
    """Within the block, ``model.generate`` samples the policy as it is, even inside
    :func:`routing_exploration` (the recursive stage's second round: coverage writes worker ids
    at every slot, which would rule out the keep plan)."""
    wrapped = model.__dict__.pop("generate", None)
    try:
        yield model
    finally:
        if wrapped is not None:
            model.generate = wrapped
