"""Talking to simulated workers in tests: worker messages in the exact format of
``conductor_core/workflow/prompts.py``, a simulated worker config, and one completion
(``tests/unit/test_simulated.py``, ``tests/integration/test_simulated.py``)."""

from __future__ import annotations

import asyncio

from conductor_core.simulation.provider import SimulatedProvider
from conductor_core.workers.config import SimulationProfile, WorkerConfig

PREAMBLE = "You are one agent solving one subtask of a larger task."


def worker_message(
    question: str,
    subtask: str = "Solve the problem.",
    steps: list[tuple[str, str]] | None = None,
    previous_answer: str | None = None,
) -> str:
    """A worker message in the exact format of workflow/prompts.py."""
    parts = [PREAMBLE, f"<question>\n{question}\n</question>"]
    if previous_answer is not None:
        parts.append(f"<previous_answer>\n{previous_answer}\n</previous_answer>")
    for i, (sub, resp) in enumerate(steps or []):
        parts.append(
            f'<step agent="agent_{i}">\n<subtask>\n{sub}\n</subtask>\n'
            f"<response>\n{resp}\n</response>\n</step>"
        )
    parts.append(f"Your assigned subtask:\n{subtask}")
    return "\n\n".join(parts)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


def make_worker(model: str = "sim-test", **profile) -> WorkerConfig:
    return WorkerConfig(provider="simulated", model=model, simulation=SimulationProfile(**profile))


def ask(provider: SimulatedProvider, text: str, sample_index: int = 0) -> str:
    return asyncio.run(provider.complete(user(text), sample_index=sample_index)).text
