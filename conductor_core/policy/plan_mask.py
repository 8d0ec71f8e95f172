"""Decoding a local transformers Conductor under the plan grammar, so that it cannot write a
malformed plan (only one cut short by ``max_new_tokens``).

The served path sends vLLM the plan regex (``OpenAIPlanSource(structured=True)``); a local model
decodes under the very same grammar (:func:`~conductor_core.policy.base.plan_grammar`, in its
``utf8`` form) through `llguidance <https://github.com/guidance-ai/llguidance>`_, the
constrained-decoding library behind vLLM's ``guidance`` backend. llguidance matches the regex on
UTF-8 bytes against the tokenizer's own vocabulary, so a byte-level BPE token that spans several
characters is allowed exactly when the grammar can consume all its bytes from the current state,
and the end-of-sequence token only where a complete plan has been written.

:class:`PlanGrammar` reads a tokenizer's vocabulary once; :meth:`PlanGrammar.processor` gives a
transformers logits processor for one ``generate`` call (row ``i`` of the batch under request
``i``'s grammar), applied before temperature and top-p (transformers puts caller processors first).
:class:`~conductor_core.policy.local.TransformersPlanSource` uses it with ``plan_grammar=True``;
so does the recursive stage's round 2 with ``recursive.round2_grammar``
(:mod:`~conductor_core.train.grammar_sampling`), which records the masks to train the policy it
sampled. Other GRPO sampling learns from what the model writes unaided.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from conductor_core.errors import ConductorError, ConfigError, require
from conductor_core.policy.base import PlanRequest, plan_grammar

_PURPOSE = "decoding a local Conductor under the plan grammar (--no-plan-grammar goes without)"


class PlanGrammar:
    """The plan grammar compiled against one tokenizer (a transformers fast tokenizer).

    ``max_subtask_chars`` bounds each subtask (None: unbounded), as for the served path.
    """

    def __init__(self, tokenizer: Any, *, max_subtask_chars: int | None = None) -> None:
        require("llguidance", "local", _PURPOSE)
        from llguidance.hf import from_tokenizer

        if tokenizer.eos_token_id is None:
            raise ConfigError("plan grammar: the tokenizer has no eos token to end a plan with")
        try:
            self._lltokenizer = from_tokenizer(tokenizer, eos_token=tokenizer.eos_token_id)
        except ValueError as exc:
            raise ConfigError(
                f"plan grammar: {exc}; save the model with a fast (tokenizers) tokenizer, or "
                f"decode without the grammar (--no-plan-grammar)"
            ) from exc
        self.eos_token_id = int(tokenizer.eos_token_id)
        self.max_subtask_chars = max_subtask_chars
        self._fresh: dict[str, Any] = {}  # regex -> a matcher at its start, copied for each plan

    def regex(self, request: PlanRequest) -> str:
        """The regex ``request``'s plan is decoded under (the served grammar, ``utf8`` form)."""
        return plan_grammar(request, self.max_subtask_chars, utf8=True)

    def matcher(self, request: PlanRequest) -> Any:
        """A fresh llguidance matcher at the start of ``request``'s plan (a grammar is compiled
        once, then copied: about 1.5 ms against 6 us on the tiny model)."""
        regex = self.regex(request)
        fresh = self._fresh.get(regex)
        if fresh is None:
            from llguidance import LLMatcher

            grammar = LLMatcher.grammar_from_regex(regex)
            fresh = LLMatcher(self._lltokenizer, grammar, log_level=0)
            if fresh.is_error():
                raise ConductorError(f"plan grammar: llguidance rejected it: {fresh.get_error()}")
            self._fresh[regex] = fresh
        return fresh.deep_copy()

    def processor(
        self, requests: Sequence[PlanRequest], *, record: bool = False
    ) -> PlanLogitsProcessor:
        """A logits processor for one ``generate`` call over ``requests`` (in batch order);
        ``record`` keeps each step's allowed tokens (:meth:`PlanLogitsProcessor.allowed`)."""
        start = time.perf_counter()
        matchers = [self.matcher(r) for r in requests]
        processor = PlanLogitsProcessor(matchers, self.eos_token_id, record=record)
        processor.seconds = time.perf_counter() - start
        return processor


class PlanLogitsProcessor:
    """A transformers logits processor (``generate(logits_processor=[...])``): at each step, row
    ``i``'s scores keep only the tokens that ``matchers[i]`` allows, all others ``-inf``.

    It follows each row: the token chosen at the previous step is fed to the row's matcher. A row
    that has written its end-of-sequence token is left alone (``generate`` pads it); a row whose
    grammar is complete may only end. ``seconds`` is the time spent here and in making the
    matchers (the decoding overhead). ``rejected`` counts tokens a matcher refused (0 unless
    something after the mask changed the choice: that row may then only end, and its plan fails
    to parse as any malformed plan does). With ``record`` it keeps each step's mask, so that a
    trainer can score the sampled tokens under the distribution they were drawn from
    (:meth:`allowed`).
    """

    def __init__(self, matchers: list[Any], eos_token_id: int, *, record: bool = False) -> None:
        self.matchers = matchers
        self.eos_token_id = eos_token_id
        self.ended = [False] * len(matchers)
        self.steps = 0
        self.seconds = 0.0
        self.rejected = 0
        self.record = record
        self._masks: list[Any] = []  # with record: each step's (rows, vocab) allowed tokens

    def allowed(self) -> Any:
        """The recorded masks as one ``(rows, steps, vocab)`` bool tensor (on the CPU): at step
        ``t``, the tokens row ``i`` could be sampled from (every token once the row had ended)."""
        import torch

        if not self.record:
            raise ConductorError("plan grammar: the processor was made without record=True")
        if not self._masks:
            return torch.ones((len(self.matchers), 0, 0), dtype=torch.bool)
        return torch.stack(self._masks, dim=1)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import numpy as np
        import torch

        start = time.perf_counter()
        if input_ids.shape[0] != len(self.matchers):
            raise ConductorError(
                f"plan grammar: {input_ids.shape[0]} rows to decode, {len(self.matchers)} grammars"
            )
        if self.steps:
            for i, token in enumerate(input_ids[:, -1].tolist()):
                if self.ended[i]:
                    continue
                if token == self.eos_token_id:
                    self.ended[i] = True
                elif not self.matchers[i].consume_token(token):
                    self.rejected += 1
        self.steps += 1
        width = scores.shape[-1]
        allowed = torch.zeros(scores.shape, dtype=torch.bool)
        for i, matcher in enumerate(self.matchers):
            if self.ended[i]:
                allowed[i] = True
            elif matcher.is_error() or matcher.is_stopped():
                allowed[i, self.eos_token_id] = True
            else:
                words = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
                bits = np.unpackbits(words, bitorder="little")[:width].astype(bool)
                if not bits.any():  # a dead end (never in a plan grammar): end, do not crash
                    bits[self.eos_token_id] = True
                allowed[i, : len(bits)] = torch.from_numpy(bits)
        scores = scores.masked_fill(~allowed.to(scores.device), float("-inf"))
        if self.record:
            self._masks.append(allowed)
        self.seconds += time.perf_counter() - start
        return scores
