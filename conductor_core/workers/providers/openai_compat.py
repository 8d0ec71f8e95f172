"""OpenAI-compatible chat completions (OpenAI, vLLM, the worker simulator, any compatible server).

Request rules:

* ``max_tokens`` vs ``max_completion_tokens``: the official OpenAI API (host ``*.openai.com`` or
  ``*.openai.azure.com``) gets ``max_completion_tokens`` (its reasoning models reject
  ``max_tokens``; its other chat models accept both). Every other server (vLLM and most
  compatible servers) gets ``max_tokens``.
* ``reasoning_effort`` is sent only when set. On the official API, a worker with
  ``reasoning_effort`` set is a reasoning model, which rejects ``temperature``/``top_p``: they are
  then not sent.
* ``params.extra`` is merged into the JSON body (``extra_body``), e.g. vLLM's ``top_k``.

The SDK's own retries are off (``max_retries=0``): the pool retries, with its own backoff.

Streaming (:meth:`OpenAIProvider.complete_stream`, used by the pool for a call that streams): the
same request with ``stream: true`` and ``stream_options: {"include_usage": true}`` (the usage
comes in the last chunk, as OpenAI and vLLM send it); a stream that ends without a
``finish_reason`` was cut short (malformed), and an error in the middle of a stream is mapped like
any other.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from conductor_core.errors import require
from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.keys import resolve_key
from conductor_core.workers.providers.errors import (
    clean_message,
    malformed,
    map_sdk_error,
    map_transport_error,
)
from conductor_core.workers.types import Completion, DeltaHandler, Messages, ProviderError, Usage

_OFFICIAL_HOST_SUFFIXES = ("openai.com", "openai.azure.com")


def is_official_openai(endpoint: str | None) -> bool:
    """True for the official OpenAI (or Azure OpenAI) API, judged by the endpoint's host."""
    host = (urlparse(endpoint or "").hostname or "").lower()
    return any(host == s or host.endswith("." + s) for s in _OFFICIAL_HOST_SUFFIXES)


def build_request(worker: WorkerConfig, messages: Messages) -> dict[str, Any]:
    """Keyword arguments of ``chat.completions.create`` for ``worker`` (see module rules)."""
    params = worker.params
    official = is_official_openai(worker.endpoint)
    request: dict[str, Any] = {"model": worker.model, "messages": messages}
    if official:
        request["max_completion_tokens"] = params.max_tokens
    else:
        request["max_tokens"] = params.max_tokens
    reasoning = params.reasoning_effort is not None
    if not (official and reasoning):
        request["temperature"] = params.temperature
        if params.top_p is not None:
            request["top_p"] = params.top_p
    if reasoning:
        request["reasoning_effort"] = params.reasoning_effort
    if params.extra:
        request["extra_body"] = dict(params.extra)
    return request


class OpenAIProvider:
    """A worker behind an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Args:
        worker: its config (``endpoint`` is required by the config schema).
        worker_id: only labels error messages.
        http_client: an ``httpx.AsyncClient`` to use (tests pass one with a mock transport).
    """

    def __init__(
        self,
        worker: WorkerConfig,
        *,
        worker_id: int | None = None,
        http_client: Any = None,
    ) -> None:
        openai = require("openai", extra="providers", purpose="OpenAI-compatible workers")
        self.worker = worker
        self._openai = openai
        key = resolve_key(worker, worker_id=worker_id)
        # Kept only to redact a key that a server echoes in an error body; never printed.
        self._secrets = (key,)
        self._client = openai.AsyncOpenAI(
            base_url=worker.endpoint,
            api_key=key,
            max_retries=0,
            timeout=worker.timeout_s,
            http_client=http_client,
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.worker.model!r}, endpoint={self.worker.endpoint!r})"

    async def complete(self, messages: Messages, *, sample_index: int = 0) -> Completion:
        """One chat completion. ``sample_index`` is not sent: repeats rely on sampling."""
        request = build_request(self.worker, messages)
        error: ProviderError | None = None
        try:
            response = await self._client.chat.completions.create(**request)
        except self._openai.APIError as exc:
            error = self._map_error(exc)
        except (ValueError, TypeError) as exc:  # undecodable body the SDK could not parse
            error = malformed(f"unreadable response: {clean_message(exc, self._secrets)}")
        if error is not None:
            raise error  # raised outside the except block: no chained SDK exception
        return self._to_completion(response)

    async def complete_stream(
        self, messages: Messages, *, sample_index: int = 0, on_delta: DeltaHandler
    ) -> Completion:
        """One streamed chat completion: ``on_delta`` gets the content of each chunk as it
        arrives; returns the whole text with the usage of the stream's last chunk."""
        request = build_request(self.worker, messages)
        request["stream"] = True
        request["stream_options"] = {"include_usage": True}
        parts: list[str] = []
        usage: Any = None
        finished = False
        error: ProviderError | None = None
        try:
            stream = await self._client.chat.completions.create(**request)
            try:
                async for chunk in stream:
                    usage = getattr(chunk, "usage", None) or usage
                    for choice in getattr(chunk, "choices", None) or []:
                        if getattr(choice, "index", 0) != 0:
                            continue
                        text = getattr(getattr(choice, "delta", None), "content", None)
                        if isinstance(text, str) and text:
                            parts.append(text)
                            on_delta(text)
                        finished = finished or bool(getattr(choice, "finish_reason", None))
            finally:
                await stream.close()
        except self._openai.APIError as exc:
            error = self._map_error(exc)
        except Exception as exc:  # the HTTP library's own, while reading the stream
            error = map_transport_error(exc, self._secrets)
        if error is not None:
            raise error  # raised outside the except block: no chained SDK exception
        text = "".join(parts)
        if not finished:
            raise malformed("the stream ended before the reply did (no finish_reason)")
        if not text.strip():
            raise malformed("response has no message content")
        return Completion(
            text=text,
            usage=Usage(
                input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            ),
        )

    def _to_completion(self, response: Any) -> Completion:
        if isinstance(response, (str, bytes)) or not hasattr(response, "choices"):
            raise malformed("response is not a chat completion object")
        choices = response.choices or []
        if not choices:
            raise malformed("response has no choices")
        message = getattr(choices[0], "message", None)
        text = getattr(message, "content", None) if message is not None else None
        if not isinstance(text, str) or not text.strip():
            raise malformed("response has no message content")
        usage = getattr(response, "usage", None)
        return Completion(
            text=text,
            usage=Usage(
                input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
            ),
        )

    def _map_error(self, exc: Exception) -> ProviderError:
        return map_sdk_error(exc, self._secrets, where=self.worker.endpoint)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.close()
