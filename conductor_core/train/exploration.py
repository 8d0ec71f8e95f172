"""Exploration of the routing choice (a floor and coverage), for GRPO sampling with transformers.

A small policy cannot tell question types apart at first, so GRPO moves every question's routing
towards the worker that is best on average; a specialist that is weak elsewhere then loses its
probability for its own domain too, and once it is never sampled GRPO cannot bring it back
(docs/training.md, "On other pools"). The floor keeps it sampled: at each worker-id slot of a plan
(``model_id = [`` or the ``,`` after an id), the next-token distribution becomes
``(1 - floor) * p + floor * uniform(offered ids)``, so each offered worker keeps at least
``floor / n`` of the choice. Other tokens are sampled from the policy unchanged.

It is applied by wrapping the model's ``generate`` (the call TRL makes with its transformers
backend) with one logits processor; vLLM sampling does not go through it.

Routing *coverage* evaluates every worker on every question: the first ``coverage`` plans of
each group (the rows that share one prompt) each route to a different offered worker, drawn in
random order, at every worker slot (a stratified sample of the routing choice).

The sampled plans then come from a distribution ``q`` other than the policy ``pi`` being trained,
so the loss is corrected where they differ (truncated importance sampling, as TRL does for vLLM's
sampling): the processor records ``log q`` of each token it changed (the mixture's probability
under the floor; ``1 / n`` for the first worker id a coverage row is routed to, whose worker is a
uniform draw over the ``n`` offered ones, and 1 for its later ids), and the trainer multiplies that
token's advantage by ``min(pi / q, IMPORTANCE_RATIO_CAP)`` (:func:`importance_weights`). Every
other token was sampled from the policy and keeps weight 1. The gradient is then the policy
gradient of the expected reward, up to the truncation; what the exploration still changes is which
plans are evaluated, not what is optimised. The ``exploration/*`` training metrics show the
weights.

The same processor applies the adaptive stage's offered mask (:mod:`conductor_core.train.
offered_mask`): at each worker slot the ids of workers the row does not offer are removed before
the floor or coverage acts, and the trainer scores those slots under the mask.

Which workers a prompt offers comes from the data, not from the prompt's text: each training row
carries its ``offered`` pool ids (:mod:`conductor_core.train.data`). ``generate`` only sees token
ids, so the trainer (:class:`~conductor_core.train.trainers.OfferedGRPOTrainer`) records, for
each generation batch, every prompt's token ids with its row's offered ids
(:class:`OfferedPrompts`), where TRL turns the rows' prompts into token ids; the exploration looks
each generated row up there.
"""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from conductor_core.errors import ConfigError
from conductor_core.train.generate_hook import generate_hook

__all__ = [
    "IMPORTANCE_RATIO_CAP",
    "LOSS_MASKS",
    "OfferedPrompts",
    "RoutingProcessor",
    "importance_weights",
    "routing_exploration",
    "routing_processor",
    "sampling_log_probs",
    "without_coverage",
]

_SLOT = re.compile(r"model_id\s*=\s*\[\s*(?:\d+\s*,\s*)*$")

LOSS_MASKS = ("unoffered_slots", "grammar_allowed")
"""Keys of the sampling masks a batch's rows carry to the loss: the offered mask's masked slots
(:func:`~conductor_core.train.offered_mask.slot_tensor`) and the plan grammar's allowed tokens
(:func:`~conductor_core.train.grammar_sampling.allowed_tensor`)."""

IMPORTANCE_RATIO_CAP = 3.0
"""Truncation of the importance ratios of tokens not sampled from the policy (the routing
floor's and coverage's choices): TRL's default cap for vLLM sampling; a lower one trades bias
for variance."""


class OfferedPrompts:
    """The pool ids each prompt of the current generation batch offers, keyed by the prompt's
    token ids (as ``generate`` gets them, without padding). Filled from the training rows'
    ``offered`` column by the trainer
    (:class:`~conductor_core.train.trainers.OfferedGRPOTrainer`), read by
    :func:`routing_exploration`."""

    def __init__(self) -> None:
        self._by_prompt: dict[tuple[int, ...], tuple[int, ...]] = {}
        self.sampling_log: list[dict[int, float]] | None = None
        """Per row of the last exploring ``generate`` call: completion position -> ``log q`` of
        the token sampled there, for the tokens the exploration changed (read by the trainer)."""
        self.mask_tokens: list[int] | None = None
        """With the offered mask (:func:`routing_exploration` ``mask_pool``): the token of each
        pool id, in pool order; None without it."""
        self.slot_log: list[dict[int, int]] | None = None
        """Per row of the last ``generate`` call under the offered mask: completion position ->
        the pool ids masked there, as a bit set (bit ``p``: pool id ``p``)."""
        self.coverage_paused = False
        """Set by :func:`without_coverage`: calls sample with the routing floor only."""

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

    def take_slot_log(self) -> list[dict[int, int]] | None:
        """The masked slots of the last ``generate`` call (then forgotten)."""
        log, self.slot_log = self.slot_log, None
        return log

    def take_sampling_log(self) -> list[dict[int, float]] | None:
        """The last ``generate`` call's sampling log (None: that call explored nothing), once."""
        log, self.sampling_log = self.sampling_log, None
        return log

    def clear(self) -> None:
        """Forget every prompt (the batch is done)."""
        self._by_prompt.clear()
        self.sampling_log = None
        self.slot_log = None

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
    mask_tokens: Sequence[int] | None = None,
) -> RoutingProcessor:
    """A logits processor for one ``generate`` call that applies the routing floor ``floor`` and
    routes the first ``coverage`` rows of each prompt to distinct offered workers; with
    ``mask_tokens`` (the token of each pool id, in pool order) it first masks, at every worker
    slot, the ids of the pool's workers that the row's prompt does not offer (the offered mask).

    ``prompts`` identifies each prompt of the call (rows with equal prompts form one group: text,
    or a tuple of token ids), ``offered`` gives the pool ids each prompt offers (None or empty:
    that prompt is sampled as it is), and the batch is left-padded to ``prompt_length`` tokens.
    With ``num_return_sequences`` the rows of a prompt follow each other. After the call,
    :meth:`RoutingProcessor.sampling_log` gives ``log q`` of every token it changed and
    :meth:`RoutingProcessor.slot_log` the slots it masked."""
    if len(prompts) != len(offered):
        raise ValueError(f"routing exploration: {len(prompts)} prompts, {len(offered)} offered")
    return RoutingProcessor(
        tokenizer, prompts, offered, prompt_length, floor, coverage, mask_tokens
    )


class RoutingProcessor:
    """The logits processor of :func:`routing_processor`; it records the sampling distribution's
    log-probability of each token it changed, by row and completion position."""

    def __init__(
        self,
        tokenizer: Any,
        prompts: Sequence[Hashable],
        offered: Sequence[Sequence[int] | None],
        prompt_length: int,
        floor: float,
        coverage: int,
        mask_tokens: Sequence[int] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.prompts = prompts
        self.allowed = [_single_token_ids(tokenizer, ids) if ids else None for ids in offered]
        # Per prompt: (tokens of the pool ids it does not offer, their bit set); None: no mask.
        self.blocked: list[tuple[list[int], int] | None] = [None] * len(offered)
        if mask_tokens is not None:
            for index, ids in enumerate(offered):
                given = set(ids or ())
                unoffered = [p for p in range(len(mask_tokens)) if given and p not in given]
                if unoffered:
                    bits = sum(1 << p for p in unoffered)
                    self.blocked[index] = ([mask_tokens[p] for p in unoffered], bits)
        self.prompt_length = prompt_length
        self.floor = floor
        self.coverage = coverage
        self._token_text: dict[int, str] = {}
        self._assigned: dict[int, int] = {}  # row -> the token of the worker id it is routed to
        self._drawn = False
        self._log: dict[int, dict[int, float]] = {}  # row -> position -> log q
        self._pending: dict[int, tuple[int, Any]] = {}  # row -> (position, log q over the vocab)
        self._masked: dict[int, dict[int, int]] = {}  # row -> position -> masked pool ids' bits

    def _text_of(self, tok: int) -> str:
        if tok not in self._token_text:
            self._token_text[tok] = self.tokenizer.decode([tok])
        return self._token_text[tok]

    def _assign(self, rows: int, per_prompt: int) -> None:
        """Draw each group's worker order once per call (the torch RNG, seeded by the trainer)."""
        import torch

        groups: dict[Hashable, list[int]] = {}
        for row in range(rows):
            index = row // per_prompt
            if index < len(self.prompts) and self.allowed[index]:
                groups.setdefault(self.prompts[index], []).append(row)
        for members in groups.values():
            ids = self.allowed[members[0] // per_prompt]
            assert ids
            order = torch.randperm(len(ids)).tolist()
            for j, row in enumerate(members[: self.coverage]):
                self._assigned[row] = ids[order[j % len(ids)]]

    def _resolve(self, input_ids: Any) -> None:
        """Record ``log q`` of the tokens sampled at pending floor slots (now in ``input_ids``)."""
        for row, (position, log_q) in list(self._pending.items()):
            index = self.prompt_length + position
            if index < input_ids.shape[1]:
                self._log.setdefault(row, {})[position] = float(log_q[int(input_ids[row, index])])
                del self._pending[row]

    def sampling_log(self, sequences: Any) -> list[dict[int, float]]:
        """Per row of the call: completion position -> ``log q`` of the token sampled there, for
        every token this processor changed (``sequences``: what ``generate`` returned)."""
        self._resolve(sequences)
        return [self._log.get(row, {}) for row in range(sequences.shape[0])]

    def slot_log(self, rows: int) -> list[dict[int, int]]:
        """Per row of the call: completion position -> the bit set of the pool ids the offered
        mask removed there (empty without the mask)."""
        return [self._masked.get(row, {}) for row in range(rows)]

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        per_prompt = max(1, input_ids.shape[0] // max(1, len(self.allowed)))
        if self.coverage and not self._drawn:
            self._assign(input_ids.shape[0], per_prompt)
            self._drawn = True
        self._resolve(input_ids)
        position = input_ids.shape[1] - self.prompt_length
        rows = []
        for row in range(input_ids.shape[0]):
            index = row // per_prompt
            ids = self.allowed[index] if index < len(self.allowed) else None
            if not ids or position <= 0:
                continue
            last = self._text_of(int(input_ids[row, -1])).rstrip()
            if last and not last.endswith(("[", ",")):  # a slot follows only these (or spaces)
                continue
            completion = self.tokenizer.decode(input_ids[row, self.prompt_length :].tolist())
            if _SLOT.search(completion):
                rows.append((row, ids))
        if not rows:
            return scores
        out = scores.clone()
        for row, ids in rows:
            blocked = self.blocked[row // per_prompt]
            if blocked is not None:
                # The offered mask is part of the policy (the loss's log-probs are masked too),
                # so a masked choice is the policy's own and records no log q.
                out[row, blocked[0]] = float("-inf")
                self._masked.setdefault(row, {})[position] = blocked[1]
            if row in self._assigned:
                out[row] = float("-inf")
                out[row, self._assigned[row]] = 0.0
                slots = self._log.setdefault(row, {})
                # The first id is a uniform draw over the offered workers; later ones follow it.
                slots[position] = 0.0 if slots else -math.log(len(ids))
                continue
            if not self.floor:
                continue
            probs = torch.softmax(out[row].float(), dim=-1) * (1.0 - self.floor)
            probs[ids] += self.floor / len(ids)
            log_q = torch.log(probs)
            out[row] = log_q.to(scores.dtype)
            self._pending[row] = (position, log_q)
        return out


def sampling_log_probs(
    completion_ids: Sequence[Sequence[int]], log: Sequence[dict[int, float]] | None
) -> list[list[float]]:
    """Per completion token, ``log q`` where the exploration changed the sampling distribution
    (``log``: per row, completion position -> ``log q``) and NaN where the policy sampled it."""
    rows = [[math.nan] * len(ids) for ids in completion_ids]
    for row, slots in enumerate(log or ()):
        if row < len(rows):
            for position, value in slots.items():
                if position < len(rows[row]):
                    rows[row][position] = value
    return rows


def importance_weights(
    log_pi: Any, log_q: Any, mask: Any, cap: float
) -> tuple[Any, dict[str, float]]:
    """Per-token truncated importance weights ``min(pi / q, cap)`` where ``log_q`` (B, T) is
    recorded (not NaN) and ``mask`` is set, 1 elsewhere; with summary figures (the changed
    tokens' count and their weights' mean and minimum) for the training metrics."""
    import torch

    changed = ~torch.isnan(log_q) & mask.bool()
    weights = torch.ones_like(log_pi)
    if not bool(changed.any()):
        return weights, {}
    ratio = torch.exp(log_pi[changed] - log_q[changed]).clamp(max=cap)
    weights[changed] = ratio.to(weights.dtype)
    return weights, {
        "exploration/tokens": float(changed.sum()),
        "exploration/ratio_mean": float(ratio.mean()),
        "exploration/ratio_min": float(ratio.min()),
    }


@contextmanager
def routing_exploration(
    model: Any,
    tokenizer: Any,
    offered: OfferedPrompts,
    floor: float = 0.0,
    coverage: int = 0,
    mask_pool: int = 0,
) -> Iterator[Any]:
    """Within the block, ``model.generate`` samples plans with the routing floor ``floor`` (in
    [0, 1)) and routes the first ``coverage`` (>= 0) plans of each prompt to distinct offered
    workers; both 0 leave it alone. With ``mask_pool`` (the pool size; 0: off) it masks the ids
    of unoffered workers at every worker slot first (the offered mask: ``offered.mask_tokens``
    and ``offered.slot_log`` tell the trainer, which masks the loss's log-probabilities the same
    way). Each call looks its prompts (the unpadded ``input_ids`` of each row) up in ``offered``,
    so all of them spread over the pool ids each row of the data offers; a call with a prompt that
    was not recorded there raises ``RuntimeError``."""
    if not 0.0 <= floor < 1.0:
        raise ValueError(f"routing floor must lie in [0, 1), got {floor}")
    if coverage < 0:
        raise ValueError(f"routing coverage must be >= 0, got {coverage}")
    mask_tokens = None
    if mask_pool:
        mask_tokens = _single_token_ids(tokenizer, range(mask_pool))
        if mask_tokens is None:
            raise ConfigError(
                f"adaptive.mask_unoffered: the tokenizer writes some of the pool ids 0-"
                f"{mask_pool - 1} as several tokens, which the offered mask cannot mask; "
                f"train without it on a pool this large"
            )
    if floor == 0.0 and coverage == 0 and mask_tokens is None:
        yield model
        return
    offered.mask_tokens = mask_tokens

    def make(input_ids: Any, mask: Any) -> Any:
        if input_ids is None:
            return None
        prompts = [
            _key(row[m.bool()].tolist() if mask is not None else row.tolist())
            for row, m in zip(input_ids, mask if mask is not None else input_ids, strict=True)
        ]
        workers = [offered.get(p) for p in prompts]
        if any(w is None for w in workers):
            missing = sum(w is None for w in workers)
            raise RuntimeError(
                f"routing exploration: {missing} of {len(prompts)} prompts to generate were not "
                f"recorded with their offered workers; generate through "
                f"conductor_core.train.trainers.OfferedGRPOTrainer (it records each batch's rows)"
            )
        covered = 0 if offered.coverage_paused else coverage
        return routing_processor(
            tokenizer, prompts, workers, input_ids.shape[1], floor, covered, mask_tokens
        )

    def seen(processor: Any, out: Any) -> None:
        sequences = getattr(out, "sequences", out)
        offered.sampling_log = processor.sampling_log(sequences)
        if mask_tokens is not None:
            offered.slot_log = processor.slot_log(sequences.shape[0])

    try:
        with generate_hook(model, make, seen):
            yield model
    finally:
        offered.mask_tokens = None


@contextmanager
def without_coverage(offered: OfferedPrompts) -> Iterator[OfferedPrompts]:
    """Within the block, :func:`routing_exploration` samples with its routing floor only (the
    recursive stage's second round: coverage writes a worker id at every slot, which would rule
    out the keep plan; the floor leaves the keep plan ``1 - floor`` of its probability)."""
    paused, offered.coverage_paused = offered.coverage_paused, True
    try:
        yield offered
    finally:
        offered.coverage_paused = paused
