"""A Conductor run locally with transformers (the tiny model on a laptop, or any causal LM dir).

Also home of :func:`plan_messages`, the chat messages every model-backed plan source sends for a
:class:`PlanRequest` (first round: the Conductor prompt; later rounds: the recursion prompt).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError, require
from conductor_core.policy.base import PlanRequest, PlanResult


def plan_messages(request: PlanRequest) -> list[dict[str, str]]:
    """The chat messages that ask a Conductor for a plan for ``request`` (one user message).

    The Conductor prompt for a first round; the recursion prompt when ``request.previous`` is set.
    """
    from conductor_core.workflow.prompts import prompt_from_request

    return [{"role": "user", "content": prompt_from_request(request)}]


def parse_result(request: PlanRequest, raw: str, **fields: Any) -> PlanResult:
    """Parse ``raw`` for ``request`` (empty plans allowed in recursion rounds) into a PlanResult."""
    from conductor_core.workflow.parser import try_parse_plan

    workflow, error = try_parse_plan(
        raw,
        num_workers=len(request.workers),
        max_steps=request.max_steps,
        access_mode=request.access_mode,
        allow_empty=request.previous is not None,
    )
    return PlanResult(raw=raw, workflow=workflow, error=error, **fields)


class TransformersPlanSource:
    """Plans from a local transformers causal LM (loaded lazily, on first use).

    Generation runs in a worker thread (``asyncio.to_thread``) under a lock, so concurrent
    ``plan`` calls queue rather than corrupt the model's state. With ``seed`` set, each call seeds
    torch with ``seed + sample_index`` (of the batch's first request in :meth:`plan_many`), so a
    plan can be replayed. ``temperature`` 0 means greedy decoding.
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        max_new_tokens: int = 1024,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        device: str = "cpu",
        dtype: str | None = None,
    ) -> None:
        if max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be at least 1, got {max_new_tokens}")
        if temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {temperature}")
        if not 0 < top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {top_p}")
        self.model_dir = Path(model_dir).expanduser()
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.seed = seed
        self.device = device
        self.dtype = dtype
        self._model = None
        self._tokenizer = None
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
            outputs = self._generate(prompts, seed_offset=requests[0].sample_index)
            latency = time.perf_counter() - start
        return [
            parse_result(
                request,
                text,
                input_tokens=n_in,
                output_tokens=n_out,
                latency_s=latency,
                extra={
                    "model_dir": str(self.model_dir),
                    "batch_size": len(requests),
                    "finish_reason": "stop" if stopped else "length",
                },
            )
            for request, (text, n_in, n_out, stopped) in zip(requests, outputs, strict=True)
        ]

    def prompt_text(self, request: PlanRequest) -> str:
        """The chat-templated prompt string for ``request`` (generation prompt appended)."""
        if self._tokenizer is None:
            self.load()
        return self._tokenizer.apply_chat_template(
            plan_messages(request), tokenize=False, add_generation_prompt=True
        )

    def _generate(
        self, prompts: list[str], *, seed_offset: int
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
