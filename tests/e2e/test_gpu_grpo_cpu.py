"""``scripts/gpu_grpo.py``, the GPU check a lent device runs, tested on CPU up to where CUDA is
needed: the small profile's base stage (the bundled model, LoRA) trains one GRPO step through the
transformers backend and the script writes its figures; asked for vLLM without a GPU, it stops
with the configuration's one-line reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.bundled_model import BundledModel

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_grpo.py"


def _run(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=420,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def test_the_gpu_check_runs_the_small_profile_on_cpu(bundled_model: BundledModel, tmp_path):
    proc = _run(
        tmp_path,
        *("--backend", "transformers", "--steps", "1", "--questions", "1", "--plans", "2"),
        *("--micro-batch", "2", "--completion-tokens", "24"),
        *("--set", "warmup.enabled=false"),  # the format start's sampling: minutes on 2 cores
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    figures = json.loads((tmp_path / "gpu_grpo.json").read_text())
    assert figures["profile"] == "small" and figures["device"] == "cpu"
    assert figures["training"] == "lora" and figures["completions_per_step"] == 2
    (step,) = figures["steps"]
    assert step["step"] == 1 and step["step_time_s"] > 0 and step["completion_tokens"] > 0
    assert step["format_error_rate"] is not None and step["reward"] is not None
    assert "step 1:" in proc.stdout


def test_vllm_without_a_gpu_is_refused_in_one_line(bundled_model: BundledModel, tmp_path):
    proc = _run(tmp_path, "--backend", "vllm", "--steps", "1", "--plans", "2", "--micro-batch", "2")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == (
        "gpu_grpo: generation.backend: vllm needs a GPU; use 'transformers' on CPU"
    )
    assert "Traceback" not in proc.stderr
