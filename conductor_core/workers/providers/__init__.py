"""Worker providers: one class per backend, built from a :class:`WorkerConfig` by
:func:`build_provider`. SDKs are imported inside the provider modules' constructors, so importing
this package is cheap and a missing SDK is one clear message naming the extra to install.

The mapping of SDK errors and HTTP statuses to :class:`ProviderError` kinds lives in
:mod:`conductor_core.workers.providers.errors` (re-exported here), shared by every provider.
"""

from __future__ import annotations

from conductor_core.simulation.provider import SimulatedProvider
from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.providers.anthropic_provider import AnthropicProvider
from conductor_core.workers.providers.errors import (
    MAX_ERROR_CHARS,
    clean_message,
    error_for_status,
    malformed,
)
from conductor_core.workers.providers.gemini_provider import GeminiProvider
from conductor_core.workers.providers.openai_compat import OpenAIProvider
from conductor_core.workers.providers.transformers_provider import TransformersProvider
from conductor_core.workers.types import Provider


def build_provider(worker: WorkerConfig, *, worker_id: int | None = None) -> Provider:
    """Create the provider of ``worker`` (``worker_id`` only labels error messages).

    A ``simulated`` worker finds the problems it knows from its own ``simulation.problems``.

    Raises:
        ConfigError: a missing key variable or an invalid local model path.
        MissingDependencyError: the provider's SDK is not installed (names the extra).
    """
    if worker.provider == "openai":
        return OpenAIProvider(worker, worker_id=worker_id)
    if worker.provider == "anthropic":
        return AnthropicProvider(worker, worker_id=worker_id)
    if worker.provider == "gemini":
        return GeminiProvider(worker, worker_id=worker_id)
    if worker.provider == "transformers":
        return TransformersProvider(worker, worker_id=worker_id)
    if worker.provider == "simulated":
        return SimulatedProvider(worker)
    raise ValueError(f"unknown provider {worker.provider!r}")


__all__ = [
    "MAX_ERROR_CHARS",
    "build_provider",
    "clean_message",
    "error_for_status",
    "malformed",
]
