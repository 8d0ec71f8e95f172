"""Anthropic Messages API workers (official ``anthropic`` SDK, ``AsyncAnthropic``).

Request rules:

* ``system`` messages are joined into the ``system`` field; the rest go to ``messages``.
* ``reasoning_effort`` set -> extended thinking is enabled with a token budget of
  :data:`THINKING_BUDGETS` (at least 1024, and kept below ``max_tokens``; when ``max_tokens`` is too
  small for the minimum budget, thinking stays off). Not set -> no thinking.
* ``temperature``/``top_p`` are not sent: the Messages API of the SDK generation pinned here
  (``anthropic`` 2.x) has no sampling parameters. A model that still takes them gets them through
  ``params.extra`` (e.g. ``{"temperature": 0.2}``).
* ``params.extra`` is merged into the JSON body.
* The reply text is the concatenation of the text blocks (thinking blocks are dropped).
* No ``output_format``: the Messages API has no JSON mode, so the pool asks for the gateway's
  ``response_format`` in words (a system message, joined into ``system``), and the gateway
  checks the answer.

The SDK's own retries are off; the pool retries.
"""

from __future__ import annotations

from typing import Any

from conductor_core.errors import require
from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.keys import resolve_key
from conductor_core.workers.providers.errors import clean_message, malformed, map_sdk_error
from conductor_core.workers.types import Completion, Messages, ProviderError, Usage

THINKING_BUDGETS = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384}
MIN_THINKING_BUDGET = 1024


def thinking_budget(effort: str | None, max_tokens: int) -> int | None:
    """Extended-thinking budget for ``effort`` under ``max_tokens``, or ``None`` for no thinking."""
    if effort is None:
        return None
    budget = min(THINKING_BUDGETS[effort], max_tokens - 1)
    return budget if budget >= MIN_THINKING_BUDGET else None


def build_request(worker: WorkerConfig, messages: Messages) -> dict[str, Any]:
    """Keyword arguments of ``messages.create`` for ``worker`` (see module rules)."""
    params = worker.params
    system = "\n\n".join(m["content"] for m in messages if m.get("role") == "system")
    chat = [
        {"role": m["role"], "content": m["content"]}
        for m in messages
        if m.get("role") in ("user", "assistant")
    ]
    request: dict[str, Any] = {
        "model": worker.model,
        "max_tokens": params.max_tokens,
        "messages": chat,
    }
    if system:
        request["system"] = system
    budget = thinking_budget(params.reasoning_effort, params.max_tokens)
    if budget is not None:
        request["thinking"] = {"type": "enabled", "budget_tokens": budget}
    if params.extra:
        request["extra_body"] = dict(params.extra)
    return request


class AnthropicProvider:
    """A Claude worker.

    Args:
        worker: its config; ``endpoint`` (optional) overrides the API base URL.
        worker_id: only labels error messages.
        http_client: an ``httpx.AsyncClient`` to use (tests pass one with a mock transport).
    """

    def __init__(
        self, worker: WorkerConfig, *, worker_id: int | None = None, http_client: Any = None
    ) -> None:
        anthropic = require("anthropic", extra="providers", purpose="Anthropic workers")
        self.worker = worker
        self._sdk = anthropic
        key = resolve_key(worker, worker_id=worker_id)
        self._secrets = (key,)  # kept only to redact echoed error bodies; never printed
        kwargs: dict[str, Any] = {"api_key": key, "max_retries": 0, "timeout": worker.timeout_s}
        if worker.endpoint:
            kwargs["base_url"] = worker.endpoint
        if http_client is not None:
            kwargs["http_client"] = http_client
        self._client = anthropic.AsyncAnthropic(**kwargs)

    def __repr__(self) -> str:
        return f"AnthropicProvider(model={self.worker.model!r})"

    async def complete(self, messages: Messages, *, sample_index: int = 0) -> Completion:
        """One Messages API call. ``sample_index`` is not sent: repeats rely on sampling."""
        request = build_request(self.worker, messages)
        error: ProviderError | None = None
        try:
            response = await self._client.messages.create(**request)
        except self._sdk.APIError as exc:
            error = self._map_error(exc)
        except (ValueError, TypeError) as exc:
            error = malformed(f"unreadable response: {clean_message(exc, self._secrets)}")
        if error is not None:
            raise error
        return self._to_completion(response)

    def _to_completion(self, response: Any) -> Completion:
        blocks = getattr(response, "content", None)
        if not isinstance(blocks, list):
            raise malformed("response is not a message object")
        text = "".join(
            getattr(b, "text", "") or "" for b in blocks if getattr(b, "type", "") == "text"
        )
        if not text.strip():
            raise malformed("response has no text content")
        usage = getattr(response, "usage", None)
        return Completion(
            text=text,
            usage=Usage(
                input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
                output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
            ),
        )

    def _map_error(self, exc: Exception) -> ProviderError:
        return map_sdk_error(exc, self._secrets)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.close()
