"""GPU only (marked ``gpu`` by its folder): vLLM offline batch planning on a small random model."""

from __future__ import annotations

import asyncio

import pytest


def test_vllm_batch_plans_a_shard_in_one_call(tmp_path) -> None:
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from conductor_core.policy.base import PlanRequest, WorkerInfo
    from scripts.architectures import architecture_dir
    from scripts.vllm_batch import VLLMBatchPlanSource

    model = architecture_dir(tmp_path / "m", "qwen2.5-0.5b")
    source = VLLMBatchPlanSource(
        model, max_tokens=32, load_format="dummy", max_model_len=4096, gpu_memory_utilization=0.3
    )
    requests = [
        PlanRequest(question=f"Q{i}?", workers=(WorkerInfo(0), WorkerInfo(1)), sample_index=i)
        for i in range(16)
    ]
    results = asyncio.run(source.plan_many(requests))
    assert len(results) == 16
    assert all(r.output_tokens > 0 and (r.ok or r.error is not None) for r in results)
