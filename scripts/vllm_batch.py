"""A Conductor run with vLLM's offline batch API: one ``LLM.chat`` call plans a whole shard.

A helper of ``scripts/gpu_eval_planning.py`` (which imports it as ``vllm_batch``) and of the GPU
tests (``scripts.vllm_batch``), not a script; training and serving do not use it.

GPU only: ``vllm`` is imported when the engine is first built, never at module import, so this
module can be imported (and its prompt/parse path tested) on machines without vLLM. On a script
that builds the engine, guard the entry point with ``if __name__ == "__main__":`` (vLLM spawns
worker processes).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conductor_core.errors import require
from conductor_core.policy.base import PlanRequest, PlanResult, as_trained, parse_result
from conductor_core.policy.local import (
    trained_descriptors,
    trained_plan_tokens,
    trained_style,
    trained_version,
)
from conductor_core.workflow.prompts import PromptStyle, plan_messages


class VLLMBatchPlanSource:
    """Plans with ``vllm.LLM``: :meth:`plan_many` sends every request in one batched call.

    ``engine_kwargs`` go to ``vllm.LLM`` (e.g. ``tensor_parallel_size``,
    ``gpu_memory_utilization``, ``max_model_len``, ``dtype``). Sampling uses ``temperature``,
    ``top_p``, ``max_tokens`` and a per-request seed ``seed + sample_index`` so that repeats are
    reproducible. The model is asked in ``prompt_style``, else the style saved with its weights,
    and in the prompt version saved there (a recursion round's layout depends on it).
    """

    def __init__(
        self,
        model: str | Path,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int | None = None,
        seed: int = 0,
        prompt_style: PromptStyle | str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        self.model = str(model)
        self.prompt_style = trained_style(model, prompt_style)
        self.prompt_version = trained_version(model)
        self.descriptors = trained_descriptors(model)
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = trained_plan_tokens(model, max_tokens)
        self.seed = seed
        self.engine_kwargs = engine_kwargs
        self._llm = None

    def engine(self):
        """The vLLM engine (built on first use)."""
        if self._llm is None:
            vllm = require("vllm", extra="vllm", purpose="vLLM offline batch planning (GPU only)")
            self._llm = vllm.LLM(model=self.model, seed=self.seed, **self.engine_kwargs)
        return self._llm

    def sampling_params(self, request: PlanRequest):
        """vLLM sampling parameters for one request."""
        from vllm import SamplingParams

        return SamplingParams(
            temperature=self.temperature,
            top_p=self.top_p,
            max_tokens=self.max_tokens,
            seed=self.seed + request.sample_index,
        )

    def generate_many(self, requests: Sequence[PlanRequest]) -> list[PlanResult]:
        """Plan every request with one ``LLM.chat`` call (blocking)."""
        if not requests:
            return []
        llm = self.engine()
        t0 = time.perf_counter()
        outputs = llm.chat(
            [
                plan_messages(
                    as_trained(r, self.prompt_style, self.prompt_version, self.descriptors)
                )
                for r in requests
            ],
            [self.sampling_params(r) for r in requests],
            use_tqdm=True,
        )
        per = (time.perf_counter() - t0) / len(requests)
        results = []
        for request, out in zip(requests, outputs, strict=True):
            completion = out.outputs[0]
            results.append(
                parse_result(
                    request,
                    completion.text,
                    input_tokens=len(out.prompt_token_ids or []),
                    output_tokens=len(completion.token_ids),
                    latency_s=per,
                )
            )
        return results

    async def plan_many(self, requests: Sequence[PlanRequest]) -> list[PlanResult]:
        """Plan a batch off the event loop."""
        return await asyncio.to_thread(self.generate_many, list(requests))

    async def plan(self, request: PlanRequest) -> PlanResult:
        """Plan one request (a batch of one)."""
        return (await self.plan_many([request]))[0]

    async def aclose(self) -> None:
        """Drop the engine (frees GPU memory when nothing else holds it)."""
        self._llm = None
