"""Gemini workers through ``google-genai`` (``genai.Client(...).aio.models.generate_content``).

Request rules:

* ``system`` messages become ``system_instruction``; ``assistant`` turns become ``model`` turns.
* ``max_tokens`` -> ``max_output_tokens``; ``temperature``, ``top_p`` as is.
* ``reasoning_effort`` set -> ``thinking_config.thinking_level`` (MINIMAL/LOW/MEDIUM/HIGH); not set
  -> the model's default thinking. Older models that take a token budget get it via
  ``params.extra`` (``{"thinking_config": {"thinking_budget": 1024}}``).
* ``params.extra`` is merged into the generation config (e.g. ``top_k``, ``seed``).
* Output tokens count the visible reply plus thinking tokens (both are billed as output).
* The SDK's own retries are off (one attempt); ``endpoint`` (optional) overrides the base URL.
* An ``output_format`` (the gateway's ``response_format``, asked of the last step) turns on
  Gemini's JSON mode: ``response_mime_type`` ``application/json``, with ``response_json_schema``
  (a JSON Schema, as given) for ``json_schema``.
"""

from __future__ import annotations

from typing import Any

from conductor_core.errors import require
from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.keys import resolve_key
from conductor_core.workers.providers.errors import (
    clean_message,
    malformed,
    map_sdk_error,
    map_transport_error,
)
from conductor_core.workers.types import (
    Completion,
    ErrorKind,
    Messages,
    OutputFormat,
    ProviderError,
    Usage,
)


def build_request(
    worker: WorkerConfig, messages: Messages, output_format: OutputFormat | None = None
) -> dict[str, Any]:
    """Keyword arguments of ``generate_content`` (``config`` as a plain dict)."""
    params = worker.params
    system = "\n\n".join(m["content"] for m in messages if m.get("role") == "system")
    contents = [
        {
            "role": "model" if m["role"] == "assistant" else "user",
            "parts": [{"text": m["content"]}],
        }
        for m in messages
        if m.get("role") in ("user", "assistant")
    ]
    config: dict[str, Any] = {
        "max_output_tokens": params.max_tokens,
        "temperature": params.temperature,
    }
    if params.top_p is not None:
        config["top_p"] = params.top_p
    if system:
        config["system_instruction"] = system
    if params.reasoning_effort is not None:
        config["thinking_config"] = {"thinking_level": params.reasoning_effort.upper()}
    if output_format is not None:
        config["response_mime_type"] = "application/json"
        if output_format.type == "json_schema":
            config["response_json_schema"] = output_format.schema or {}
    config.update(params.extra)
    return {"model": worker.model, "contents": contents, "config": config}


class GeminiProvider:
    """A Gemini worker.

    Args:
        worker: its config.
        worker_id: only labels error messages.
        http_client: an ``httpx.AsyncClient`` to use (tests pass one with a mock transport).
    """

    def __init__(
        self, worker: WorkerConfig, *, worker_id: int | None = None, http_client: Any = None
    ) -> None:
        genai = require(
            "google.genai", extra="providers", purpose="Gemini workers", package="google-genai"
        )
        self._errors = require("google.genai.errors", extra="providers", package="google-genai")
        self.worker = worker
        key = resolve_key(worker, worker_id=worker_id)
        self._secrets = (key,)  # kept only to redact echoed error bodies; never printed
        options: dict[str, Any] = {
            "timeout": int(worker.timeout_s * 1000),
            "retry_options": {"attempts": 1},
        }
        if worker.endpoint:
            options["base_url"] = worker.endpoint
        if http_client is not None:
            options["httpx_async_client"] = http_client
        self._client = genai.Client(api_key=key, http_options=options)

    accepts_output_format = True
    """``output_format`` turns on Gemini's JSON mode (see the module rules)."""

    def __repr__(self) -> str:
        return f"GeminiProvider(model={self.worker.model!r})"

    async def complete(
        self,
        messages: Messages,
        *,
        sample_index: int = 0,
        output_format: OutputFormat | None = None,
    ) -> Completion:
        """One ``generate_content`` call. ``sample_index`` is not sent."""
        request = build_request(self.worker, messages, output_format)
        error: ProviderError | None = None
        try:
            response = await self._client.aio.models.generate_content(**request)
        except self._errors.APIError as exc:
            error = self._map_api_error(exc)
        except Exception as exc:
            error = self._map_transport_error(exc)
        if error is not None:
            raise error
        return self._to_completion(response)

    def _to_completion(self, response: Any) -> Completion:
        try:
            text = response.text
        except (AttributeError, ValueError, TypeError):
            text = None
        if not isinstance(text, str) or not text.strip():
            raise malformed("response has no text (empty candidates or blocked output)")
        meta = getattr(response, "usage_metadata", None)
        out = int(getattr(meta, "candidates_token_count", 0) or 0)
        out += int(getattr(meta, "thoughts_token_count", 0) or 0)
        return Completion(
            text=text,
            usage=Usage(
                input_tokens=int(getattr(meta, "prompt_token_count", 0) or 0), output_tokens=out
            ),
        )

    def _map_api_error(self, exc: Any) -> ProviderError:
        code = int(getattr(exc, "code", 0) or 0)
        if code == 400 and "API key" in str(getattr(exc, "message", "")):
            # Gemini answers an invalid key with 400 (not 401): an auth error, not retried.
            detail = clean_message(getattr(exc, "message", None) or exc, self._secrets)
            return ProviderError(
                f"HTTP 400: {detail}", kind=ErrorKind.AUTH, retryable=False, status=400
            )
        return map_sdk_error(exc, self._secrets, status=code if code > 0 else None)

    def _map_transport_error(self, exc: Exception) -> ProviderError:
        return map_transport_error(exc, self._secrets)

    async def aclose(self) -> None:
        """Close the client's HTTP sessions."""
        await self._client.aio.aclose()
