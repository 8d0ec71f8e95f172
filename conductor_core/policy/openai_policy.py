"""A Conductor reached over an OpenAI-compatible endpoint: how a vLLM-served Conductor is called."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from conductor_core.errors import ConductorError, ConfigError
from conductor_core.policy.base import (
    PlanRequest,
    PlanResult,
    as_trained,
    parse_result,
    plan_grammar,
)
from conductor_core.telemetry import outgoing_headers
from conductor_core.workflow.prompts import PromptStyle, plan_messages


def normalize_base_url(url: str) -> str:
    """The API base URL: ``http://host:8000`` becomes ``http://host:8000/v1``; paths are kept."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"base_url: {url!r} is not an http(s) URL; use e.g. http://host:8000/v1")
    path = parts.path.rstrip("/")
    if not path:
        path = "/v1"
    return urlunsplit((parts.scheme, parts.netloc, path, parts.query, ""))


def resolve_api_key(api_key_env: str | None) -> str:
    """The key from the environment variable named ``api_key_env`` (a placeholder when None)."""
    if api_key_env is None:
        return "EMPTY"
    value = os.environ.get(api_key_env)
    if not value:
        raise ConfigError(
            f"api_key_env: the environment variable {api_key_env} is not set; export it with the "
            f"Conductor endpoint's API key"
        )
    return value


class OpenAIPlanSource:
    """Plans from a Conductor model served behind ``/v1/chat/completions`` (vLLM or any compatible).

    ``model`` None asks ``/v1/models`` on first use and takes the only model served there.
    ``api_key_env`` names the environment variable holding the key (never the key itself).
    ``seed``, when set, is sent as ``seed + sample_index`` so repeated samples differ but replay.
    ``max_retries`` is the client's own retries on connection errors, 429 and 5xx.
    ``extra_body`` is merged into each request (for example vLLM's ``structured_outputs``).
    ``prompt_style``: the style the served model was trained with (None: each request's own).
    The prompt version is each request's own (the current one): a served model trained with
    prompt version 1 or 2 is asked its recursion round in the current layout, since the server
    does not say which version its model learned.
    ``structured``: constrain decoding to the plan grammar
    (:func:`~conductor_core.workflow.grammar.plan_regex` for each request's workers, steps,
    access mode and round) by sending vLLM's ``"structured_outputs": {"regex": ...}``, so that
    the served Conductor cannot write a malformed plan (only one cut short by ``max_tokens``); it
    then writes the three lists without reasoning. ``max_subtask_chars`` bounds each subtask in
    that grammar (None: unbounded). Servers without structured outputs ignore or reject it.
    Unreachable endpoints and HTTP errors raise :class:`ConductorError`; format errors are returned.
    A gateway request's plan call carries its ``X-Request-ID`` and trace context
    (:func:`conductor_core.telemetry.outgoing_headers`).
    """

    def __init__(
        self,
        base_url: str,
        model: str | None,
        *,
        api_key_env: str | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_tokens: int = 1024,
        timeout_s: float = 60,
        max_retries: int = 2,
        seed: int | None = None,
        extra_body: dict[str, Any] | None = None,
        prompt_style: PromptStyle | str | None = None,
        structured: bool = False,
        max_subtask_chars: int | None = None,
    ) -> None:
        if max_tokens < 1:
            raise ConfigError(f"max_tokens must be at least 1, got {max_tokens}")
        if timeout_s <= 0:
            raise ConfigError(f"timeout_s must be positive, got {timeout_s}")
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self.api_key_env = api_key_env
        self.temperature = temperature
        self.top_p = top_p
        self.max_tokens = max_tokens
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.seed = seed
        self.extra_body = dict(extra_body or {})
        if structured and "structured_outputs" in self.extra_body:
            raise ConfigError(
                "extra_body: structured_outputs is set there and structured=True would replace "
                "it; drop one of the two"
            )
        if max_subtask_chars is not None and max_subtask_chars < 1:
            raise ConfigError(f"max_subtask_chars must be at least 1, got {max_subtask_chars}")
        self.structured = bool(structured)
        self.max_subtask_chars = max_subtask_chars
        self.prompt_style = PromptStyle(prompt_style) if prompt_style is not None else None
        self._client = None
        self._lock = asyncio.Lock()

    def _get_client(self):
        if self._client is None:
            import openai

            self._client = openai.AsyncOpenAI(
                base_url=self.base_url,
                api_key=resolve_api_key(self.api_key_env),
                timeout=self.timeout_s,
                max_retries=self.max_retries,
            )
        return self._client

    async def resolve_model(self) -> str:
        """The served model name: the configured one, else the only one listed at /v1/models."""
        if self.model is not None:
            return self.model
        async with self._lock:
            if self.model is None:
                page = await self._call(self._get_client().models.list)
                names = [m.id for m in page.data]
                if len(names) != 1:
                    served = ", ".join(names) or "none"
                    raise ConfigError(
                        f"model: the Conductor at {self.base_url} serves {len(names)} models "
                        f"({served}); name one with --model"
                    )
                self.model = names[0]
        return self.model

    async def plan(self, request: PlanRequest) -> PlanResult:
        """Ask the served Conductor for one plan and parse it."""
        model = await self.resolve_model()
        messages = plan_messages(as_trained(request, self.prompt_style))
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        if self.seed is not None:
            kwargs["seed"] = self.seed + request.sample_index
        extra_body = dict(self.extra_body)
        if self.structured:
            extra_body["structured_outputs"] = {"regex": self.grammar(request)}
        if extra_body:
            kwargs["extra_body"] = extra_body
        headers = outgoing_headers()  # a gateway request's id and trace context
        if headers:
            kwargs["extra_headers"] = headers
        start = time.perf_counter()
        response = await self._call(self._get_client().chat.completions.create, **kwargs)
        latency = time.perf_counter() - start
        if not response.choices:
            raise ConductorError(f"the Conductor at {self.base_url} returned no choices")
        choice = response.choices[0]
        usage = response.usage
        extra: dict[str, Any] = {"model": model, "finish_reason": choice.finish_reason}
        if self.structured:
            extra["structured"] = True
        return parse_result(
            request,
            choice.message.content or "",
            input_tokens=usage.prompt_tokens if usage else 0,
            output_tokens=usage.completion_tokens if usage else 0,
            latency_s=latency,
            extra=extra,
        )

    def grammar(self, request: PlanRequest) -> str:
        """The plan regex for ``request`` (what ``structured`` sends), parsed the same way."""
        return plan_grammar(request, self.max_subtask_chars)

    async def _call(self, fn, /, **kwargs):
        """Call the API, turning transport and HTTP failures into one clear ConductorError."""
        import openai

        try:
            return await fn(**kwargs)
        except openai.APITimeoutError as exc:
            raise ConductorError(
                f"the Conductor at {self.base_url} timed out after {self.timeout_s:g} s; "
                f"raise timeout_s or check the server"
            ) from exc
        except openai.APIConnectionError as exc:
            raise ConductorError(
                f"cannot reach the Conductor at {self.base_url}: {_root_cause(exc)}"
            ) from exc
        except openai.AuthenticationError as exc:
            raise ConductorError(
                f"the Conductor at {self.base_url} rejected the API key (HTTP 401); "
                f"check the variable named by api_key_env"
            ) from exc
        except openai.NotFoundError as exc:
            raise ConductorError(
                f"the Conductor at {self.base_url} answered 404 for model {self.model!r}: "
                f"{_api_message(exc)}; check the URL and --model"
            ) from exc
        except openai.APIStatusError as exc:
            raise ConductorError(
                f"the Conductor at {self.base_url} answered HTTP {exc.status_code}: "
                f"{_api_message(exc)}"
            ) from exc

    async def aclose(self) -> None:
        """Close the HTTP client."""
        if self._client is not None:
            await self._client.close()
            self._client = None


def _root_cause(exc: BaseException) -> str:
    """The innermost cause's message (e.g. 'Connection refused'), else the error's own."""
    inner: BaseException = exc
    while inner.__cause__ is not None:
        inner = inner.__cause__
    text = str(inner) or type(inner).__name__
    return text if inner is not exc else (str(exc) or type(exc).__name__)


def _api_message(exc: Exception) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if body.get("detail"):
            return str(body["detail"])
    return str(getattr(exc, "message", exc))
