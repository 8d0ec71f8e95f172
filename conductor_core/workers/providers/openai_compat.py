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
* An ``output_format`` (the gateway's ``response_format``, asked of the last step) is sent as
  ``response_format``, as OpenAI and vLLM take it (vLLM decodes under the schema).

The SDK's own retries are off (``max_retries=0``): the pool retries, with its own backoff.

Every request of a gateway's workflow also carries its ``X-Request-ID`` and, when the gateway
traces, the trace context of the worker call's span (``traceparent``):
:func:`conductor_core.telemetry.outgoing_headers`, on both paths below.

A plain call (:meth:`OpenAIProvider.complete`) skips the SDK's request building and response
models, which cost more CPU than the HTTP exchange itself (on a 2-core machine about 2.5 ms of CPU
per call through the SDK, about 0.3 ms through the small client below): it posts the JSON body
the SDK would send, with the SDK's headers (taken once, on the first call), and reads the reply as
JSON. The exchange goes through :class:`~conductor_core.workers.providers.http11.Http11Client`
for a plain ``http://`` endpoint (vLLM, the worker simulator; no ``http_proxy``/``all_proxy``),
else through the SDK's own HTTP client (TLS, proxies, redirects; a redirect that the small client
receives is sent again through it). Errors are the SDK's, in the same words: a status other than
2xx is ``Error code: <status> - <error.message>``, a timeout ``Request timed out.``, a failed
connection ``Connection error.``; an unreadable body is malformed. Streamed calls go through the
SDK.

Streaming (:meth:`OpenAIProvider.complete_stream`, used by the pool for a call that streams): the
same request with ``stream: true`` and ``stream_options: {"include_usage": true}`` (the usage
comes in the last chunk, as OpenAI and vLLM send it); a stream that ends without a
``finish_reason`` was cut short (malformed), and an error in the middle of a stream is mapped like
any other.
"""

from __future__ import annotations

import functools
import json
import ssl
from typing import Any
from urllib.parse import urlparse

from conductor_core.errors import require
from conductor_core.telemetry import outgoing_headers
from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.keys import resolve_key
from conductor_core.workers.providers import http11
from conductor_core.workers.providers.errors import (
    clean_message,
    error_for_status,
    malformed,
    map_sdk_error,
    map_transport_error,
    timed_out,
    unreachable,
)
from conductor_core.workers.resilience import parse_retry_after
from conductor_core.workers.types import (
    Completion,
    DeltaHandler,
    Messages,
    OutputFormat,
    ProviderError,
    Usage,
)

_OFFICIAL_HOST_SUFFIXES = ("openai.com", "openai.azure.com")


@functools.lru_cache(maxsize=256)
def is_official_openai(endpoint: str | None) -> bool:
    """True for the official OpenAI (or Azure OpenAI) API, judged by the endpoint's host
    (remembered per endpoint: every call asks)."""
    host = (urlparse(endpoint or "").hostname or "").lower()
    return any(host == s or host.endswith("." + s) for s in _OFFICIAL_HOST_SUFFIXES)


def build_request(
    worker: WorkerConfig, messages: Messages, output_format: OutputFormat | None = None
) -> dict[str, Any]:
    """Keyword arguments of ``chat.completions.create`` for ``worker`` (see module rules)."""
    params = worker.params
    official = is_official_openai(worker.endpoint)
    request: dict[str, Any] = {"model": worker.model, "messages": messages}
    if output_format is not None:
        request["response_format"] = output_format.response_format()
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


def request_body(request: dict[str, Any]) -> bytes:
    """The JSON body the SDK sends for ``request`` (:func:`build_request`'s keyword arguments):
    ``extra_body`` merged at the top level, encoded as ``httpx`` encodes JSON."""
    payload = {k: v for k, v in request.items() if k != "extra_body"}
    payload.update(request.get("extra_body") or {})
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


def _status_message(status: int, content: bytes) -> str:
    """The SDK's message for an HTTP error: ``Error code: <status>``, then `` - <message>`` when
    the body is JSON with an ``error.message`` (or a top-level ``message``)."""
    message = f"Error code: {status}"
    try:
        body = json.loads(content)
    except ValueError:
        return message
    error = body.get("error", body) if isinstance(body, dict) else None
    said = error.get("message") if isinstance(error, dict) else None
    if isinstance(said, str) and said:
        message += f" - {said}"
    return message


def _json_body(response: Any) -> Any:
    """A 2xx reply's decoded JSON. As in the SDK, a body that is not JSON is a
    :class:`ValueError` under a JSON content type, and stands as its text under another."""
    try:
        return json.loads(response.content)
    except ValueError:
        content_type = response.headers.get("content-type", "*").split(";")[0]
        if content_type.endswith("json"):
            raise
        return response.text


def _class_names(exc: BaseException) -> set[str]:
    return {cls.__name__ for cls in type(exc).__mro__}


class OpenAIProvider:
    """A worker behind an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Args:
        worker: its config (``endpoint`` is required by the config schema).
        worker_id: only labels error messages.
        http_client: an ``httpx.AsyncClient`` to use for every call (tests pass one with a
            mock transport); default: the SDK's default client, built once and shared by the
            streams and the plain calls that :class:`~.http11.Http11Client` does not make.
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
        # One HTTP client (one connection pool) for the SDK's streams and the plain calls.
        self._http = http_client if http_client is not None else openai.DefaultAsyncHttpxClient()
        self._client = openai.AsyncOpenAI(
            base_url=worker.endpoint,
            api_key=key,
            max_retries=0,
            timeout=worker.timeout_s,
            http_client=self._http,
        )
        # base_url ends with "/" (the SDK enforces it)
        self._url = str(self._client.base_url) + "chat/completions"
        self._headers: dict[str, str] | None = None  # the SDK's, read on the first call
        self._head = b""  # self._headers encoded for self._lean
        self._lean = (
            http11.Http11Client(self._url, timeout_s=worker.timeout_s)
            if http_client is None and http11.fits(self._url)
            else None
        )

    accepts_output_format = True
    """``output_format`` is sent as ``response_format``."""

    def __repr__(self) -> str:
        return f"OpenAIProvider(model={self.worker.model!r}, endpoint={self.worker.endpoint!r})"

    def _request_headers(self) -> dict[str, str]:
        """The headers the SDK sends (its defaults and authentication), built once, in the
        event loop (one of them names the async library)."""
        if self._headers is None:
            sdk = self._client
            headers = {k: v for k, v in sdk.default_headers.items() if isinstance(v, str)}
            headers.update(sdk.auth_headers)
            headers["X-Stainless-Retry-Count"] = "0"
            headers["X-Stainless-Read-Timeout"] = str(float(self.worker.timeout_s))
            if self._lean is not None:
                try:
                    self._head = self._lean.request_head(headers.items())
                except ValueError:  # a header h11 refuses: the SDK's client answers for it
                    self._lean = None
            self._headers = headers
        return self._headers

    async def complete(
        self,
        messages: Messages,
        *,
        sample_index: int = 0,
        output_format: OutputFormat | None = None,
    ) -> Completion:
        """One chat completion. ``sample_index`` is not sent: repeats rely on sampling."""
        request = build_request(self.worker, messages, output_format)
        error: ProviderError | None = None
        try:
            body = request_body(request)
            headers = self._request_headers()
            context = outgoing_headers()
            response: Any = None
            if self._lean is not None:
                head = self._head + http11.header_fields(context) if context else self._head
                response = await self._lean.post(body, head)
                if 300 <= response.status_code < 400 and "location" in response.headers:
                    response = None  # the SDK's client follows redirects
            if response is None:
                response = await self._http.post(
                    self._url,
                    content=body,
                    headers={**headers, **context} if context else headers,
                    timeout=self.worker.timeout_s,
                )
            if not 200 <= response.status_code < 300:
                message = _status_message(response.status_code, response.content)
                error = error_for_status(
                    response.status_code,
                    clean_message(message, self._secrets),
                    retry_after=parse_retry_after(response.headers),
                )
            else:
                data = _json_body(response)
        except Exception as exc:  # what the SDK maps; anything else propagates, as from the SDK
            names = _class_names(exc)
            if "TimeoutException" in names or isinstance(exc, http11.HTTPTimeout):
                error = timed_out("Request timed out.")
            elif names & {"RequestError", "EndOfStream"} or isinstance(
                exc, (ssl.SSLError, http11.HTTPConnectionError)
            ):
                error = unreachable("Connection error.", self.worker.endpoint)
            elif isinstance(exc, (ValueError, TypeError)):  # undecodable body
                error = malformed(f"unreadable response: {clean_message(exc, self._secrets)}")
            else:
                raise
        if error is not None:
            raise error  # raised outside the except block: no chained exception
        return _completion_of(data)

    async def complete_stream(
        self,
        messages: Messages,
        *,
        sample_index: int = 0,
        on_delta: DeltaHandler,
        output_format: OutputFormat | None = None,
    ) -> Completion:
        """One streamed chat completion: ``on_delta`` gets the content of each chunk as it
        arrives; returns the whole text with the usage of the stream's last chunk."""
        request = build_request(self.worker, messages, output_format)
        request["stream"] = True
        request["stream_options"] = {"include_usage": True}
        context = outgoing_headers()
        if context:
            request["extra_headers"] = context
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

    def _map_error(self, exc: Exception) -> ProviderError:
        return map_sdk_error(exc, self._secrets, where=self.worker.endpoint)

    async def aclose(self) -> None:
        """Close the HTTP clients."""
        if self._lean is not None:
            await self._lean.aclose()
        await self._client.close()


def _completion_of(data: Any) -> Completion:
    """A :class:`Completion` from a decoded ``chat.completion`` body.

    Raises:
        ProviderError: malformed, when it is not a completion, has no choices, or the first
            choice has no text.
    """
    if not isinstance(data, dict):
        raise malformed("response is not a chat completion object")
    choices = data.get("choices") or []
    if not isinstance(choices, list) or not choices:
        raise malformed("response has no choices")
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    text = message.get("content") if isinstance(message, dict) else None
    if not isinstance(text, str) or not text.strip():
        raise malformed("response has no message content")
    usage = data.get("usage")
    if not isinstance(usage, dict):
        usage = {}
    try:
        tokens = Usage(
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
        )
    except (TypeError, ValueError):
        raise malformed("response has an unreadable usage") from None
    return Completion(text=text, usage=tokens)
