"""A Conductor run locally with transformers (the tiny model on a laptop, or any causal LM dir)."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError, require
from conductor_core.policy.base import PlanRequest, PlanResult, as_trained, parse_result
from conductor_core.policy.plan_mask import PlanGrammar
from conductor_core.policy.pretrained import resolve_model_path
from conductor_core.workflow.prompts import (
    PromptSpec,
    PromptStyle,
    load_prompt_spec,
    plan_messages,
)

DEFAULT_MAX_PLAN_TOKENS = 1024


def _saved_spec(model_dir: str | Path) -> PromptSpec | None:
    try:
        return load_prompt_spec(model_dir)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def trained_style(model_dir: str | Path, given: PromptStyle | str | None) -> PromptStyle | None:
    """The prompt style to ask the model in ``model_dir`` with: ``given``, else the one saved
    with its weights, else None (unknown: each request's own style is used)."""
    if given is not None:
        return PromptStyle(given)
    spec = _saved_spec(model_dir)
    return spec.style if spec is not None else None


def trained_version(model_dir: str | Path, given: str | None = None) -> str | None:
    """The prompt version to ask the model in ``model_dir`` with: ``given``, else the one saved
    with its weights, else None (unknown: each request's own version, the current one)."""
    if given is not None:
        return given
    spec = _saved_spec(model_dir)
    return spec.version if spec is not None else None


def trained_descriptors(model_dir: str | Path) -> bool:
    """Whether the model in ``model_dir`` was trained in descriptor mode (saved with its
    weights): it is then always shown the workers' descriptions."""
    spec = _saved_spec(model_dir)
    return spec is not None and spec.descriptors


def trained_plan_tokens(model_dir: str | Path, given: int | None) -> int:
    """The most tokens to generate for a plan: ``given``, else the plan length the model in
    ``model_dir`` was trained with (saved with its weights), else 1024."""
    if given is not None:
        return given
    spec = _saved_spec(model_dir)
    if spec is not None and spec.max_plan_tokens:
        return spec.max_plan_tokens
    return DEFAULT_MAX_PLAN_TOKENS


class TransformersPlanSource:
    """Plans from a local transformers causal LM (loaded lazily, on first use).

    ``model_dir``: a ``save_pretrained`` folder, or (a string) ``"smollm2-135m-instruct"``, the
    bundled pretrained model (:func:`~conductor_core.policy.pretrained.resolve_model_path`).

    Generation runs in a worker thread (``asyncio.to_thread``) under a lock, so concurrent
    ``plan`` calls queue rather than corrupt the model's state. With ``seed`` set, each call seeds
    torch with ``seed + sample_index`` (of the batch's first request in :meth:`plan_many`), so a
    plan can be replayed. ``temperature`` 0 means greedy decoding. The model is asked in the
    prompt style and version it was trained with: ``prompt_style`` and ``prompt_version`` when
    given, else the ones saved in the model folder
    (:data:`~conductor_core.workflow.prompts.PROMPT_SPEC_FILE`), else the request's;
    and ``max_new_tokens`` defaults to the plan length it was trained with (saved there too).

    ``plan_grammar``: decode under the plan grammar, the same regex a served Conductor is sent
    (:mod:`~conductor_core.policy.plan_mask`), so that every plan parses unless cut short by
    ``max_new_tokens``; the model then writes the three lists without reasoning. Off here (a model
    measured on what it writes unaided, as during training); on by default for the ``--conductor``
    forms that :func:`~conductor_core.policy.factory.load_plan_source` builds (``solve``, ``eval``,
    ``serve``). ``max_subtask_chars`` bounds each subtask in that grammar (None: unbounded).
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_new_tokens: int | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        device: str = "cpu",
        dtype: str | None = None,
        prompt_style: PromptStyle | str | None = None,
        prompt_version: str | None = None,
        plan_grammar: bool = False,
        max_subtask_chars: int | None = None,
    ) -> None:
        if max_new_tokens is not None and max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {top_p}")
        if max_subtask_chars is not None and max_subtask_chars < 1:
            raise ConfigError(f"max_subtask_chars must be at least 1, got {max_subtask_chars}")
        # A string may name the bundled pretrained model (converted on first use); a Path is a path.
        if isinstance(model_dir, str):
            model_dir = resolve_model_path(model_dir)
        self.model_dir = Path(model_dir).expanduser()
        self.max_new_tokens = trained_plan_tokens(self.model_dir, max_new_tokens)
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.device = device
        self.dtype = dtype
        self.prompt_style = trained_style(self.model_dir, prompt_style)
        self.prompt_version = trained_version(self.model_dir, prompt_version)
        self.descriptors = trained_descriptors(self.model_dir)
        self.plan_grammar = bool(plan_grammar)
        self.max_subtask_chars = max_subtask_chars
        self._model = None
        self._tokenizer = None
        self._grammar = None
        self._lock = threading.Lock()

    @classmethod
    def from_loaded(cls, model: Any, tokenizer: Any, **kwargs: Any) -> TransformersPlanSource:
        """Wrap a model and tokenizer already in memory (for example during training)."""
        source = cls(getattr(model, "name_or_path", "") or ".", **kwargs)
        source._model = model
        source._tokenizer = tokenizer
        return source

    def load(self) -> None:
        """Load the tokenizer and model now (otherwise done on the first plan)."""
        with self._lock:
            self._load_locked()

    def _load_locked(self) -> None:
        if self._model is not None:
            return
        if not (self.model_dir / "config.json").is_file():
            raise ConfigError(
                f"model_dir: {self.model_dir} has no config.json; pass a directory written by "
                f"save_pretrained (or use 'tiny' for the built-in tiny Conductor)"
            )
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        torch = require("torch", "local", "a local transformers Conductor")
        transformers = require("transformers", "local", "a local transformers Conductor")
        tokenizer = transformers.AutoTokenizer.from_pretrained(self.model_dir)
        if not getattr(tokenizer, "chat_template", None):
            raise ConfigError(
                f"model_dir: the tokenizer in {self.model_dir} has no chat template; "
                f"use a chat/instruct model or set tokenizer.chat_template and save it"
            )
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        dtype = getattr(torch, self.dtype) if self.dtype else "auto"
        model = transformers.AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=dtype)
        model.to(self.device)
        model.eval()
        self._tokenizer = tokenizer
        self._model = model

    async def plan(self, request: PlanRequest) -> PlanResult:
        """Generate and parse one plan for ``request``."""
        return (await self.plan_many([request]))[0]

    async def plan_many(self, requests: Sequence[PlanRequest]) -> list[PlanResult]:
        """Generate plans for ``requests`` in one left-padded ``generate`` call, then parse each."""
        if not requests:
            return []
        return await asyncio.to_thread(self.generate_many, list(requests))

    def generate_many(self, requests: list[PlanRequest]) -> list[PlanResult]:
        """Synchronous :meth:`plan_many` (runs in the calling thread, under the model lock)."""
        with self._lock:
            self._load_locked()
            prompts = [self.prompt_text(r) for r in requests]
            start = time.perf_counter()
            processor = self._grammar_processor(requests) if self.plan_grammar else None
            outputs = self._generate(
                prompts, seed_offset=requests[0].sample_index, processor=processor
            )
            latency = time.perf_counter() - start
        extra: dict[str, Any] = {"model_dir": str(self.model_dir), "batch_size": len(requests)}
        if processor is not None:
            # the whole batch's masking time: the grammar's share of ``latency_s``
            extra.update(plan_grammar=True, grammar_s=processor.seconds)
        return [
            parse_result(
                request,
                text,
                input_tokens=n_in,
                output_tokens=n_out,
                latency_s=latency,
                extra={**extra, "finish_reason": "stop" if stopped else "length"},
            )
            for request, (text, n_in, n_out, stopped) in zip(requests, outputs, strict=True)
        ]

    def prompt_text(self, request: PlanRequest) -> str:
        """The chat-templated prompt string for ``request`` (generation prompt appended)."""
        if self._tokenizer is None:
            self.load()
        return self._tokenizer.apply_chat_template(
            plan_messages(
                as_trained(request, self.prompt_style, self.prompt_version, self.descriptors)
            ),
            tokenize=False,
            add_generation_prompt=True,
        )

    def _grammar_processor(self, requests: list[PlanRequest]) -> Any:
        """The plan-grammar logits processor for one batch (the vocabulary is read once)."""
        if self._grammar is None:
            self._grammar = PlanGrammar(self._tokenizer, max_subtask_chars=self.max_subtask_chars)
        return self._grammar.processor(requests)

    def _generate(
        self, prompts: list[str], *, seed_offset: int, processor: Any = None
    ) -> list[tuple[str, int, int, bool]]:
        """One completion per prompt: (text, prompt tokens, completion tokens, stopped at eos)."""
        import torch

        tokenizer, model = self._tokenizer, self._model
        tokenizer.padding_side = "left"
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(model.device) for k, v in enc.items()}
        kwargs: dict[str, Any] = {
            "max_new_tokens": self.max_new_tokens,
            "pad_token_id": tokenizer.pad_token_id,
            "eos_token_id": tokenizer.eos_token_id,
        }
        if self.temperature > 0:
            kwargs.update(do_sample=True, temperature=self.temperature, top_p=self.top_p)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if processor is not None:
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList([processor])
        if self.seed is not None:
            torch.manual_seed(self.seed + seed_offset)
        with torch.inference_mode():
            out = model.generate(**enc, **kwargs)
        width = enc["input_ids"].shape[1]
        results = []
        for row, mask in zip(out[:, width:].tolist(), enc["attention_mask"].tolist(), strict=True):
            stopped = tokenizer.eos_token_id in row
            length = row.index(tokenizer.eos_token_id) + 1 if stopped else len(row)
            text = tokenizer.decode(row[:length], skip_special_tokens=True)
            results.append((text, int(sum(mask)), length, stopped))
        return results

    async def aclose(self) -> None:
        """Drop the model and tokenizer (they are reloaded on next use)."""
        self._model = None
        self._tokenizer = None
        self._grammar = None
