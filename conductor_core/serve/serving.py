"""The serving object of the gateway: one worker pool and one plan source per app, and the
translation between OpenAI chat completions and :func:`conductor_core.solve.solve`.

A request's last user message is the question; earlier messages are put before it as context.
The workflow's answer is the assistant message; ``usage`` sums the Conductor's tokens (every
round) and every worker call's. The ``conductor`` extension of the request maps onto
:class:`~conductor_core.solve.SolveOptions` (see :meth:`ConductorServing.prepare`); it may only
lower the server's limits.

A JSON ``response_format`` is asked of the last step's worker (the executor's
:data:`~conductor_core.workflow.executor.ANSWER_FORMAT`, set in the workflow's context) and the
answer is checked against it (:mod:`.structured`): an answer that fails is a 502
``response_format_unmet``. Streamed, such an answer is sent whole once it has passed the check.

No error message sent to a client names an internal address: an upstream's URL (the Conductor's,
a worker's) is replaced by ``<url>`` (:func:`redact_urls`); the full error goes to the log.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import json
import logging
import math
import os
import random
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from conductor_core import telemetry
from conductor_core.errors import ConductorError
from conductor_core.policy.base import PlanSource
from conductor_core.serve.auth import SpendQuota
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.metrics import GatewayMetrics
from conductor_core.serve.protocol import (
    AssistantMessage,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatCompletionStreamChoice,
    ChatMessage,
    ConductorEvent,
    ConductorOptions,
    DeltaMessage,
    RequestError,
    UsageInfo,
    completion_id,
    error_body,
    refuse_unsupported,
)
from conductor_core.serve.structured import check_answer, output_format_of, unfenced
from conductor_core.solve import SolveOptions, solve, solve_options
from conductor_core.workers.config import PoolConfig
from conductor_core.workers.types import ErrorKind, OutputFormat
from conductor_core.workflow.executor import ANSWER_FORMAT, Budget
from conductor_core.workflow.trace import SolveTrace, TraceSummary

logger = logging.getLogger("conductor.gateway")


def compose_question(messages: list[ChatMessage]) -> str:
    """The question solved for a conversation: the last message (which must be the user's),
    preceded by the earlier messages as context when there are any.

    Raises:
        RequestError: 400 when the last message is not a user message or is empty.
    """
    last = messages[-1]
    where = f"messages.{len(messages) - 1}"
    if last.role != "user":
        raise RequestError(
            400,
            f"{where}.role: the last message must be the user's question (role 'user'), "
            f"got {last.role!r}",
            param=f"{where}.role",
        )
    if not last.content.strip():
        raise RequestError(400, f"{where}.content: the question is empty", param=f"{where}.content")
    if len(messages) == 1:
        return last.content
    context = "\n\n".join(f"{m.role}: {m.content}" for m in messages[:-1])
    return (
        "Context (the conversation so far):\n\n"
        f"{context}\n\n"
        "Answer the last message of the conversation:\n\n"
        f"{last.content}"
    )


@dataclass(frozen=True)
class SolveJob:
    """A validated request, ready to solve (``max_answer_tokens``: the request's ``max_tokens``
    or ``max_completion_tokens``, None when it sets neither; ``stop``: its stop sequences;
    ``caller``: whose spend quota the workflow's cost is charged to, None: nobody's;
    ``output_format``: the JSON form its ``response_format`` asks for, None: free text)."""

    request_id: str
    model: str
    question: str
    options: SolveOptions
    sample_index: int
    return_trace: bool
    include_usage: bool
    max_answer_tokens: int | None = None
    stop: tuple[str, ...] = ()
    caller: str | None = None
    output_format: OutputFormat | None = None


_TOKEN = re.compile(r"\S+")


def before_stop(text: str, stops: tuple[str, ...]) -> str:
    """``text`` up to the first of the ``stops`` it holds (the stop sequence itself left out, as
    OpenAI's API leaves it out); all of it when it holds none."""
    ends = [i for stop in stops if (i := text.find(stop)) >= 0]
    return text[: min(ends)] if ends else text


def final_answer(text: str, limit: int | None, stops: tuple[str, ...] = ()) -> tuple[str, bool]:
    """The answer the client gets: cut before its first stop sequence, then after its
    ``limit``-th word (:func:`cut_to_tokens`); and whether the word limit cut it (a stop
    sequence ends it as a finished answer: ``finish_reason`` ``stop``)."""
    return cut_to_tokens(before_stop(text, stops), limit)


def cut_to_tokens(text: str, limit: int | None) -> tuple[str, bool]:
    """``text`` cut after its ``limit``-th token, and whether it was cut.

    A token here is a run of non-whitespace characters (a word with its punctuation), an
    approximation: the answer comes from workers with different tokenizers, so the gateway
    counts words (a word is often several model tokens). The text kept is the prefix up to the
    end of that word, its spacing intact.
    """
    if limit is None:
        return text, False
    for count, match in enumerate(_TOKEN.finditer(text), start=1):
        if count == limit:
            end = match.end()
            if text[end:].strip():
                return text[:end], True
            break
    return text, False


def _stop_start(text: str, stops: tuple[str, ...]) -> int:
    """How many characters at the end of ``text`` could begin one of the ``stops``."""
    return max(
        (k for stop in stops for k in range(1, len(stop)) if text.endswith(stop[:k])), default=0
    )


class AnswerStream:
    """The answer as it is streamed: which part of the text received so far may go to the
    client now, so that what has been sent is always a prefix of the final answer
    (:func:`final_answer`: before its first stop sequence, cut to ``limit`` words).

    Without a limit or stop sequences every piece goes at once. With a limit, text past the end
    of the ``limit``-th word is held back, and so is whitespace at the end of what has arrived
    (it belongs to the answer only if another word follows, or if the answer ends there). With
    stop sequences, the end of what has arrived that could begin one is held back until the
    next piece says whether it does.
    """

    def __init__(self, limit: int | None, stops: tuple[str, ...] = ()) -> None:
        self.limit = limit
        self.stops = stops
        self.received = ""
        self.sent = ""

    def push(self, text: str) -> str:
        """Take the next piece of the answer; returns the text to send now (maybe empty)."""
        self.received += text
        visible = before_stop(self.received, self.stops)
        if visible == self.received:  # no stop yet: hold back what may be the start of one
            visible = visible[: len(visible) - _stop_start(visible, self.stops)]
        ready = visible if self.limit is None else cut_to_tokens(visible, self.limit)[0].rstrip()
        out = ready[len(self.sent) :]
        self.sent = ready
        return out

    def finish(self, answer: str) -> tuple[str, bool, bool]:
        """The workflow's final ``answer``: (the rest of it to send, whether it was cut to the
        limit, whether it continues what was sent). False means that the text sent is not the
        start of this answer (the streamed step failed after part of its reply was sent and
        another round's answer stands): the stream must end with an error."""
        final, cut = final_answer(answer, self.limit, self.stops)
        if not final.startswith(self.sent):
            return "", cut, False
        return final[len(self.sent) :], cut, True


_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{}]+")


def redact_urls(text: str, hosts: Iterable[str] = ()) -> str:
    """``text`` without URLs (each replaced by ``<url>``) nor the given ``host[:port]`` names
    (each replaced by ``<host>``): what an upstream error says, fit for a client."""
    text = _URL.sub("<url>", text)
    for host in hosts:
        if host:
            text = text.replace(host, "<host>")
    return text


def _netloc(url: str | None) -> str | None:
    if not url:
        return None
    try:
        return urlsplit(url).netloc or None
    except ValueError:
        return None


_CLIENT_FAULT_STATUSES = frozenset({400, 413, 422})
"""Upstream statuses that blame the request itself (e.g. a prompt longer than the Conductor's
context): the client's error, which a retry cannot fix. Others (401, 404, 429, 5xx, no answer)
are the deployment's fault: 502."""


def _upstream_status(exc: BaseException) -> int | None:
    """The HTTP status of the upstream response behind ``exc`` (its chain of causes), if any."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        status = getattr(cause, "status_code", None)
        if isinstance(status, int):
            return status
        cause = cause.__cause__
    return None


def _upstream_message(exc: BaseException) -> str:
    """The upstream API's own message behind ``exc`` (the ``error.message`` of its body), else
    the error's text."""
    cause = exc.__cause__ or exc
    body = getattr(cause, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"]
        if isinstance(body.get("detail"), str):
            return body["detail"]
    return str(getattr(cause, "message", None) or cause)


def _redact_errors(data: Any, hosts: Iterable[str]) -> Any:
    """A trace dump with every string under an ``error`` key passed through :func:`redact_urls`
    (worker errors may quote an endpoint)."""
    if isinstance(data, dict):
        return {
            k: redact_urls(v, hosts)
            if k == "error" and isinstance(v, str)
            else _redact_errors(v, hosts)
            for k, v in data.items()
        }
    if isinstance(data, list):
        return [_redact_errors(v, hosts) for v in data]
    return data


def usage_of(trace: SolveTrace) -> UsageInfo:
    """Tokens of the Conductor (all rounds) plus those of every worker call."""
    prompt = trace.input_tokens + sum(r.conductor_input_tokens for r in trace.rounds)
    completion = trace.output_tokens + sum(r.conductor_output_tokens for r in trace.rounds)
    return UsageInfo.of(prompt, completion)


def _failed_calls(trace: SolveTrace, *, plan_fault: bool) -> list[str]:
    """The worker calls that failed through the plan's own fault (``plan_fault=True``: a request
    the worker rejected, a context overflow, a call cut short by the request's deadline) or else
    through the infrastructure's, as ``step I on worker W (kind)``. Whose fault each was is the
    step's ``plan_fault`` (:func:`~conductor_core.workers.types.is_plan_fault` decided it)."""
    return [
        f"step {s.index} on worker {s.worker} ({s.error_kind})"
        for r in trace.rounds
        if r.workflow is not None
        for s in r.workflow.steps
        if s.error is not None and s.plan_fault == plan_fault
    ]


def ran_out_of_budget(trace: SolveTrace) -> bool:
    """True when the plan failure that left the workflow without an answer is the request's
    budget running out: a step skipped for a budget (``budget:<name>``, the ``deadline_s`` wall
    clock included) or a call cut short by the deadline (``deadline_exceeded``). That is no fault
    (200, empty content, ``finish_reason="length"``); any other plan failure is a request that a
    worker rejected (:meth:`ConductorServing._failure`)."""
    failure = trace.plan_failure
    return failure is not None and (failure.startswith("budget:") or failure == ErrorKind.DEADLINE)


def outcome_of(trace: SolveTrace) -> str:
    """The workflow's outcome label: answered, format_error, infra_error, plan_failure (a worker
    rejected a request the plan made) or no_answer (a budget, the deadline included, stopped it
    before an answer). The executor decided whose fault a failure was
    (:func:`~conductor_core.workflow.executor.failure_cause`): a deadline is the plan's, never
    the infrastructure's."""
    if trace.answer is not None:
        return "answered"
    if trace.format_error:
        return "format_error"
    if trace.infra_error:
        return "infra_error"
    if trace.plan_failure is not None and not ran_out_of_budget(trace):
        return "plan_failure"
    return "no_answer"


class _ClientGone(Exception):
    """The client disconnected before its workflow finished."""


async def _cancelled(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has stopped, so nothing of it runs afterwards."""
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)


def _sse(data: dict[str, Any] | str) -> str:
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {payload}\n\n"


def _at_most(param: str, value: int, limit: int) -> int:
    """``value`` when it does not exceed the server's ``limit``.

    Raises:
        RequestError: 400 naming ``param`` when it does.
    """
    if value > limit:
        raise RequestError(
            400,
            f"{param}: at most {limit} is allowed here, got {value}; a request may lower the "
            f"server's limits, not raise them",
            param=param,
        )
    return value


def _lowered(
    param: str,
    given: float | None,
    default: float | None,
    *,
    limit: float | None = None,
) -> Any:
    """A budget field: the request's ``given`` value when it is set, finite and at most the
    server's ``limit`` (default: the server's ``default``; None: unlimited), else ``default``.

    Raises:
        RequestError: 400 naming ``param`` when ``given`` is above the limit or not finite.
    """
    if given is None:
        return default
    limit = default if limit is None else limit
    if not math.isfinite(given) or (limit is not None and given > limit):
        bound = f"at most {limit:g}" if limit is not None else "a finite number"
        raise RequestError(
            400,
            f"{param}: {bound} is allowed here, got {given:g}; a request may lower the "
            f"server's limits, not raise them",
            param=param,
        )
    return given


class ConductorServing:
    """Answers chat completions by solving them on one pool with one plan source.

    Built once per app lifespan; :meth:`aclose` drains the workflows in flight, then closes the
    pool and the plan source.

    Args:
        config: the gateway settings (defaults of the solve options, timeouts, sampling).
        pool_config: the worker pool.
        plan_source: where plans come from (closed by :meth:`aclose`).
        metrics: where workflows are counted.
        rng: decides which requests are traced to MLflow (``config.trace_sample_rate``).
        trace_logger: logs a trace (default: :func:`conductor_core.track.traces.log_solve_trace`).
        probe_transport: the ``httpx`` transport of the readiness and health checks (tests
            pass a mock; default: the network).
        quota: charged with the cost of each workflow that ends, to its job's caller (None:
            no spend quota).
        tracer: the OpenTelemetry tracer of the workflows' spans (None: no spans); each
            workflow's calls carry its request id either way (:mod:`conductor_core.telemetry`).
    """

    def __init__(
        self,
        config: GatewayConfig,
        pool_config: PoolConfig,
        plan_source: PlanSource,
        *,
        metrics: GatewayMetrics,
        rng: random.Random | None = None,
        trace_logger: Callable[..., Any] | None = None,
        probe_transport: Any = None,
        quota: SpendQuota | None = None,
        tracer: Any = None,
    ) -> None:
        from conductor_core.workers.pool import WorkerPool

        self.config = config
        self.pool_config = pool_config
        self.plan_source = plan_source
        self.metrics = metrics
        self.quota = quota
        self.tracer = tracer
        self.pool = WorkerPool(pool_config)
        self.worker_names = [w.display_name for w in pool_config.workers]
        self.default_options = solve_options(
            pool_config,
            max_steps=config.max_steps,
            access_mode=config.access_mode,
            descriptors=config.descriptors,
            rounds=config.max_rounds,
            max_tokens=config.max_tokens,
            max_cost=config.max_cost,
            deadline=config.deadline_s,
            prompt_style=config.prompt_style,
        )
        self._rng = rng or random.Random()
        self._trace_logger = trace_logger
        # host[:port] of every upstream, scrubbed from what clients are told (see redact_urls)
        upstreams = [w.endpoint for w in pool_config.workers]
        upstreams.append(getattr(plan_source, "base_url", None))
        self.internal_hosts = tuple(
            sorted({h for h in map(_netloc, upstreams) if h}, key=len, reverse=True)
        )
        self._active: set[asyncio.Task[Any]] = set()
        self._background: set[asyncio.Task[Any]] = set()
        self.draining = False
        # readiness: a drain file older than this process is a leftover of an earlier container
        self._started_at = time.time()
        self._probe_transport = probe_transport
        self._probe_http: Any = None  # the checks' HTTP client, built on first use
        self._probe_loop: asyncio.AbstractEventLoop | None = None
        self._conductor_status: tuple[float, str] | None = None  # (monotonic time, result)
        self._conductor_check: asyncio.Task[str] | None = None
        self._health_task: asyncio.Task[None] | None = None
        self._health_targets, self._local_workers = self._health_plan()

    # -- requests ---------------------------------------------------------------------------------

    def prepare(
        self, request: ChatCompletionRequest, request_id: str, caller: str | None = None
    ) -> SolveJob:
        """Validate ``request`` against this server and map it onto solve options (``caller``:
        whose spend quota its cost is charged to).

        Raises:
            RequestError: 404 for another model; 400 ``unsupported_parameter`` for a parameter
                the gateway does not honour (``n`` > 1, tools, log probabilities, audio:
                :func:`.protocol.refuse_unsupported`); 400 for a conversation that does not end
                with a user question, a ``response_format`` schema that is not a JSON Schema,
                or invalid ``conductor`` options (naming the field).
        """
        if request.model not in (None, self.config.model_name):
            raise RequestError(
                404,
                f"model {request.model!r} does not exist; this gateway serves "
                f"{self.config.model_name!r}",
                param="model",
                code="model_not_found",
            )
        refuse_unsupported(request)
        output_format = output_format_of(request.response_format)
        question = compose_question(request.messages)
        options, return_trace = self.solve_options_for(request.conductor)
        include_usage = bool(request.stream_options and request.stream_options.include_usage)
        return SolveJob(
            request_id=request_id,
            model=self.config.model_name,
            question=question,
            options=options,
            sample_index=request.sample if request.sample_given else self.config.sample_index,
            return_trace=return_trace,
            include_usage=include_usage,
            max_answer_tokens=request.token_limit,
            stop=request.stop_sequences,
            caller=caller,
            output_format=output_format,
        )

    def solve_options_for(self, extra: ConductorOptions | None) -> tuple[SolveOptions, bool]:
        """The server's default solve options, lowered by a request's ``conductor`` options, and
        whether the trace is to be returned.

        The operator's settings are ceilings: ``max_rounds`` up to ``max_rounds_limit``,
        ``max_steps`` up to the server's ``max_steps``, each budget field up to the server's
        value (``deadline_s`` up to ``request_timeout_s`` when the server sets no deadline); a
        budget field the server leaves unlimited may be set to any finite value.

        Raises:
            RequestError: 400 naming the field (unknown or repeated worker, a value above the
                server's limit or not finite).
        """
        opts = self.default_options
        if extra is None:
            return opts, False
        changes: dict[str, Any] = {}
        if extra.max_rounds is not None:
            _at_most("conductor.max_rounds", extra.max_rounds, self.config.max_rounds_limit)
            changes["max_rounds"] = extra.max_rounds
        max_steps = opts.max_steps
        if extra.max_steps is not None:
            max_steps = _at_most("conductor.max_steps", extra.max_steps, opts.max_steps)
        changes["max_steps"] = max_steps
        budget = opts.budget
        given = extra.budget
        if given is None:
            changes["budget"] = dataclasses.replace(budget, max_steps=max_steps)
        else:
            deadline_limit = budget.deadline_s
            if deadline_limit is None:
                deadline_limit = self.config.request_timeout_s
            changes["budget"] = Budget(
                max_steps=max_steps,
                max_tokens=_lowered(
                    "conductor.budget.max_tokens", given.max_tokens, budget.max_tokens
                ),
                max_cost=_lowered("conductor.budget.max_cost", given.max_cost, budget.max_cost),
                deadline_s=_lowered(
                    "conductor.budget.deadline_s",
                    given.deadline_s,
                    budget.deadline_s,
                    limit=deadline_limit,
                ),
            )
        if extra.workers is not None:
            ids = self._worker_ids(extra.workers)
            changes["worker_ids"] = ids  # descriptions stay the pool's, indexed by pool id
        return dataclasses.replace(opts, **changes), extra.return_trace

    def redact(self, text: str) -> str:
        """``text`` fit for a client: no URL, no upstream host (:func:`redact_urls`)."""
        return redact_urls(text, self.internal_hosts)

    def _worker_ids(self, wanted: list[int | str]) -> tuple[int, ...]:
        workers = self.pool_config.workers
        n = len(workers)
        ids: list[int] = []
        for j, item in enumerate(wanted):
            param = f"conductor.workers.{j}"
            if isinstance(item, int):
                if not 0 <= item < n:
                    raise RequestError(
                        400,
                        f"{param}: unknown worker id {item}; the pool has ids 0..{n - 1}",
                        param=param,
                    )
                wid = item
            else:
                matches = [i for i, w in enumerate(workers) if item in (w.name, w.model)]
                if len(matches) != 1:
                    names = ", ".join(w.display_name for w in workers)
                    why = "matches several workers" if matches else "is no worker of the pool"
                    raise RequestError(
                        400,
                        f"{param}: {item!r} {why}; give a pool id (0..{n - 1}) or one of: {names}",
                        param=param,
                    )
                wid = matches[0]
            if wid in ids:
                raise RequestError(
                    400, f"{param}: worker {wid} is listed twice", param="conductor.workers"
                )
            ids.append(wid)
        return tuple(ids)

    async def run(
        self,
        job: SolveJob,
        on_event: Callable[[dict[str, Any]], None] | None = None,
        client_gone: Awaitable[Any] | None = None,
        on_answer_delta: Callable[[str], None] | None = None,
    ) -> SolveTrace:
        """Solve ``job`` within ``config.request_timeout_s``; counts it in the metrics.

        ``on_answer_delta`` gets the answer in pieces as the last step's worker writes it
        (:func:`~conductor_core.solve.solve`).

        ``client_gone`` completes when the client disconnects: the workflow is then cancelled
        (and awaited, so none of its worker calls starts afterwards) and counted as
        ``client_disconnected``. Cancelling the caller cancels the workflow too.

        Raises:
            RequestError: 504 on timeout; 400 when the Conductor's server refused the request
                itself (HTTP 400/413/422, e.g. a prompt longer than its context: a retry cannot
                fix it); 502 when the plan source fails otherwise (unreachable Conductor); 499
                ``client_disconnected`` when ``client_gone`` completed first (nobody reads that
                answer; it names the outcome in the access log). The messages name no upstream
                URL.
        """
        context = contextvars.copy_context()  # the workflow's: its answer's format, its calls'
        context.run(ANSWER_FORMAT.set, job.output_format)
        context.run(telemetry.bind, job.request_id, self.tracer)
        task = asyncio.create_task(
            solve(
                job.question,
                self.plan_source,
                self.pool,
                options=job.options,
                sample_index=job.sample_index,
                on_event=on_event,
                on_answer_delta=on_answer_delta,
            ),
            name=f"solve {job.request_id}",
            context=context,
        )
        self._active.add(task)
        task.add_done_callback(self._active.discard)
        self.metrics.in_flight.inc()
        watcher = asyncio.ensure_future(client_gone) if client_gone is not None else None
        try:
            async with asyncio.timeout(self.config.request_timeout_s):
                if watcher is not None:
                    await asyncio.wait((task, watcher), return_when=asyncio.FIRST_COMPLETED)
                    if not task.done():
                        raise _ClientGone
                trace = await task  # cancelling this await cancels the workflow too
        except _ClientGone:
            await _cancelled(task)
            self.metrics.observe_failure("client_disconnected")
            logger.info(
                "the client disconnected: workflow cancelled", extra={"request_id": job.request_id}
            )
            raise RequestError(
                499,
                "the client closed the connection before the answer; the workflow was cancelled",
                code="client_disconnected",
            ) from None
        except TimeoutError:
            self.metrics.observe_failure("timeout")
            raise RequestError(
                504,
                f"the workflow did not finish within {self.config.request_timeout_s:g}s",
                "timeout",
                code="request_timeout",
            ) from None
        except ConductorError as exc:
            status = _upstream_status(exc)
            logger.warning("plan source failed: %s", exc, extra={"request_id": job.request_id})
            if status in _CLIENT_FAULT_STATUSES:
                self.metrics.observe_failure("rejected")
                said = self.redact(_upstream_message(exc))[:500]
                raise RequestError(
                    400,
                    f"the Conductor's server refused this request (HTTP {status}): {said}",
                    code="conductor_rejected_request",
                ) from None
            self.metrics.observe_failure("error")
            http = f" (HTTP {status})" if status is not None else ""
            raise RequestError(
                502,
                f"the Conductor failed or could not be reached{http}; the gateway's log has "
                f"the details under request id {job.request_id}",
                "server_error",
                code="conductor_unavailable",
            ) from None
        finally:
            if watcher is not None:
                if watcher.done() and not watcher.cancelled():
                    watcher.exception()  # a failed receive() counts as gone; not worth a warning
                watcher.cancel()
            if not task.done():  # timed out while watching, or the caller was cancelled
                await _cancelled(task)
            self.metrics.in_flight.dec()
        self.metrics.observe_workflow(trace, self.worker_names, outcome_of(trace))
        if self.quota is not None and job.caller is not None:
            self.quota.charge(job.caller, trace.cost)
        self._maybe_log_trace(job, trace)
        return trace

    def _summary(self, job: SolveJob, trace: SolveTrace) -> dict[str, Any]:
        summary = TraceSummary.from_trace(trace).model_dump(
            mode="json", exclude={"answer", "raw_plan"}
        )
        summary["request_id"] = job.request_id
        summary["conductor_input_tokens"] = sum(r.conductor_input_tokens for r in trace.rounds)
        summary["conductor_output_tokens"] = sum(r.conductor_output_tokens for r in trace.rounds)
        if job.return_trace:
            summary["trace"] = _redact_errors(trace.model_dump(mode="json"), self.internal_hosts)
        return summary

    @staticmethod
    def _failure(trace: SolveTrace) -> RequestError | None:
        """The error for a workflow that produced no answer for a reason not the client's: 502
        when the plan did not parse (``plan_format_error``), when a worker failed
        (``worker_error``: infrastructure), or when a worker rejected a request that the plan
        made (``plan_failure``: a 4xx, a prompt longer than its context). The last is the
        Conductor's doing, not the client's: the plan chose the worker and what the step reads,
        and another plan may fit (a 400 would tell the client's SDK never to retry). None when
        it answered or ran out of its budget (:func:`ran_out_of_budget`)."""
        if trace.answer is not None:
            return None
        if trace.format_error:
            first = trace.rounds[0].plan_error if trace.rounds else None
            why = f": {first.get('message')}" if first else ""
            return RequestError(
                502,
                f"the Conductor's plan could not be parsed{why}",
                "server_error",
                code="plan_format_error",
            )
        if trace.infra_error:
            failed = _failed_calls(trace, plan_fault=False)
            return RequestError(
                502,
                "a worker failed: " + ("; ".join(failed) or "infrastructure error"),
                "server_error",
                code="worker_error",
            )
        if trace.plan_failure is not None and not ran_out_of_budget(trace):
            failed = _failed_calls(trace, plan_fault=True)
            return RequestError(
                502,
                f"the Conductor's plan failed ({trace.plan_failure}): a worker rejected the "
                "request it made: " + ("; ".join(failed) or trace.plan_failure),
                "server_error",
                code="plan_failure",
            )
        return None

    def _answer_text(self, job: SolveJob, trace: SolveTrace) -> str:
        """The workflow's answer as the client is to get it (before ``stop`` and ``max_tokens``):
        with a ``response_format``, without the whitespace and code fence around it."""
        answer = trace.answer or ""
        return unfenced(answer) if job.output_format is not None else answer

    def _check_format(self, job: SolveJob, trace: SolveTrace, answer: str) -> None:
        """Check ``answer`` (as sent, whole) against the job's ``response_format``.

        Raises:
            RequestError: 502 ``response_format_unmet`` naming the worker that wrote it.
        """
        if job.output_format is None:
            return
        try:
            check_answer(answer, job.output_format, self._answer_writer(trace))
        except RequestError:
            logger.warning(
                "the answer does not match the response_format",
                extra={"request_id": job.request_id},
            )
            raise

    def _answer_writer(self, trace: SolveTrace) -> str | None:
        """The name of the worker whose reply is the answer (the last round that gave it)."""
        for rnd in reversed(trace.rounds):
            wf = rnd.workflow
            if wf is not None and wf.answer == trace.answer and wf.answer_step is not None:
                step = next((s for s in wf.steps if s.index == wf.answer_step), None)
                if step is not None and 0 <= step.worker < len(self.worker_names):
                    return self.worker_names[step.worker]
        return None

    async def chat_completion(
        self, job: SolveJob, client_gone: Awaitable[Any] | None = None
    ) -> ChatCompletionResponse:
        """Solve ``job`` and answer as one ``chat.completion``.

        A workflow stopped by its budget (tokens, dollars or the ``deadline_s`` wall clock)
        before any answer gets empty content with ``finish_reason="length"``; so does an answer
        cut to the request's ``max_tokens`` (:func:`cut_to_tokens`). The id is fresh for every
        response (``conductor.request_id`` carries the request id). ``client_gone`` completes
        when the client disconnects, which cancels the workflow (see :meth:`run`).

        Raises:
            RequestError: 502 when the plan did not parse, a worker failed or a worker
                rejected a request the plan made (:meth:`_failure`), 504 on timeout, 499 when
                the client disconnected first.
        """
        trace = await self.run(job, client_gone=client_gone)
        failure = self._failure(trace)
        if failure is not None:
            raise failure
        answer, cut = final_answer(self._answer_text(job, trace), job.max_answer_tokens, job.stop)
        answered = trace.answer is not None and not cut
        if answered:
            self._check_format(job, trace, answer)
        choice = ChatCompletionChoice(
            index=0,
            message=AssistantMessage(content=answer),
            finish_reason="stop" if answered else "length",
        )
        return ChatCompletionResponse(
            id=completion_id(),
            model=job.model,
            choices=[choice],
            usage=usage_of(trace),
            conductor=self._summary(job, trace),
        )

    async def stream_chat_completion(
        self, job: SolveJob, received_at: float | None = None
    ) -> AsyncIterator[str]:
        """Solve ``job``, yielding server-sent events: a role chunk, one chunk per workflow event
        (its ``conductor`` field; empty delta), the answer as content chunks while the last
        step's worker writes it (the rest, or all of it when it was not streamed, after the
        workflow), a final chunk with the finish reason and the summary
        (``conductor.type == "done"``), the usage chunk when asked for, then ``[DONE]``. With
        ``include_usage`` every other chunk has ``"usage": null``, as OpenAI sends them. The
        content is cut to the request's ``max_tokens`` as in :meth:`chat_completion` (the
        workflow events carry the steps' full outputs). A failure after the stream started is
        sent as an OpenAI error object, then ``[DONE]``; so is an answer that is not the text
        already streamed (the streamed step failed part-way and an earlier round's answer
        stands): text sent is never sent again. With a ``response_format`` the answer is not
        streamed as it is written: it is sent in one content chunk once it passed the check
        (:meth:`_check_format`), else the stream ends with that error. The time from
        ``received_at`` (the request's arrival, ``time.perf_counter()``; None: now) to the
        first content chunk is the metric ``time_to_first_token_seconds``."""
        first_token = self.metrics.first_token_timer(received_at)
        cid = completion_id()
        created = int(time.time())

        def chunk(
            delta: DeltaMessage | None = None,
            *,
            event: ConductorEvent | None = None,
            finish: str | None = None,
            usage: UsageInfo | None = None,
            choices: bool = True,
        ) -> str:
            body = ChatCompletionChunk(
                id=cid,
                created=created,
                model=job.model,
                choices=[
                    ChatCompletionStreamChoice(delta=delta or DeltaMessage(), finish_reason=finish)
                ]
                if choices
                else [],
                usage=usage,
                conductor=event,
            ).to_json()
            if job.include_usage:
                body.setdefault("usage", None)
            return _sse(body)

        # A content chunk is the same text around each piece: built once, then filled in
        # (the answer comes in many small pieces; a model and its encoding for each would cost).
        head, _, tail = chunk(DeltaMessage(content="\x00")).partition('"content": "\\u0000"')

        def content(text: str) -> str:
            first_token()
            return f'{head}"content": {json.dumps(text, ensure_ascii=False)}{tail}'

        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        translate = _EventTranslator(self.worker_names, self.redact)
        answer_stream = AnswerStream(job.max_answer_tokens, job.stop)

        def on_answer_delta(text: str) -> None:
            queue.put_nowait({"type": _ANSWER_DELTA, "text": text})

        # an answer with a response_format is sent whole, once it has passed the check
        streamed = job.output_format is None
        runner = asyncio.create_task(
            self.run(
                job,
                on_event=queue.put_nowait,
                on_answer_delta=on_answer_delta if streamed else None,
            )
        )
        runner.add_done_callback(lambda _: queue.put_nowait(None))
        try:
            yield chunk(DeltaMessage(role="assistant"))
            while (event := await queue.get()) is not None:
                if event.get("type") == _ANSWER_DELTA:
                    if piece := answer_stream.push(event["text"]):
                        yield content(piece)
                    continue
                yield chunk(event=translate(event))
            try:
                trace = runner.result()
            except RequestError as exc:
                yield _sse(exc.body())
                yield _sse("[DONE]")
                return
            failure = self._failure(trace)
            rest, cut, continues = answer_stream.finish(self._answer_text(job, trace))
            if answer_stream.sent and (failure is not None or not continues):
                # Part of a reply went out and the answer is not its continuation (the worker
                # writing it failed part-way; maybe an earlier round's answer stands): say so.
                logger.warning(
                    "the streamed answer was broken off; the stream ends with an error",
                    extra={"request_id": job.request_id},
                )
                failure = _STREAM_BROKEN
            if failure is None and trace.answer is not None and not cut:
                try:
                    self._check_format(job, trace, rest)
                except RequestError as exc:
                    failure = exc
            if failure is not None:
                yield _sse(failure.body())
                yield _sse("[DONE]")
                return
            if rest:
                yield content(rest)
            done = ConductorEvent(
                type="done", round=len(trace.rounds) - 1, data=self._summary(job, trace)
            )
            finish = "stop" if trace.answer is not None and not cut else "length"
            yield chunk(event=done, finish=finish)
            if job.include_usage:
                yield chunk(usage=usage_of(trace), choices=False)
            yield _sse("[DONE]")
        except Exception as exc:  # never leave a stream without an end
            logger.exception("stream failed", extra={"request_id": job.request_id})
            yield _sse(error_body(f"internal error: {type(exc).__name__}", "server_error"))
            yield _sse("[DONE]")
        finally:
            if not runner.done():  # the client went away: stop the workflow
                runner.cancel()
                self.metrics.observe_failure("client_disconnected")

    # -- readiness, health, tracing, shutdown -----------------------------------------------------

    def _health_plan(self) -> tuple[dict[str, tuple[str | None, list[str]]], list[str]]:
        """The worker endpoints the health checks ask (``/models`` URL -> (key variable, the
        names of the workers behind it)) and the local workers (up by construction). Hosted
        APIs of other providers are not checked."""
        from conductor_core.policy.openai_policy import normalize_base_url

        targets: dict[str, tuple[str | None, list[str]]] = {}
        local: list[str] = []
        for w, name in zip(self.pool_config.workers, self.worker_names, strict=True):
            if w.provider == "openai" and w.endpoint:
                url = normalize_base_url(w.endpoint) + "/models"
                targets.setdefault(url, (w.api_key_env, []))[1].append(name)
            elif w.provider in ("simulated", "transformers"):
                local.append(name)
        return targets, local

    def start(self) -> None:
        """Start the background work of a running gateway (in its event loop): the worker
        health checks every ``config.worker_health_interval_s``, reported as the metric
        ``worker_up{worker}``. Local workers are reported up once."""
        for name in self._local_workers:
            self.metrics.worker_up.labels(worker=name).set(1)
        interval = self.config.worker_health_interval_s
        if interval is not None and self._health_targets and self._health_task is None:
            self._health_task = asyncio.create_task(
                self._health_loop(interval), name="worker health checks"
            )

    async def _health_loop(self, interval_s: float) -> None:
        while True:
            try:
                await self.check_workers()
            except Exception as exc:  # a failed pass must not end the checks
                logger.warning("worker health check failed: %s", type(exc).__name__)
            await asyncio.sleep(interval_s)

    async def check_workers(self) -> dict[str, str]:
        """One health check of the pool's OpenAI-compatible worker endpoints (each distinct
        endpoint asked ``/models`` once, with its key, within ``config.readiness_timeout_s``);
        sets ``worker_up{worker}``. Returns worker name -> result (``ok``, ``HTTP 503``,
        ``unreachable (ConnectError)``, ...)."""
        if not self._health_targets:
            return {}
        client = self._probe_client()
        results = await asyncio.gather(
            *(self._probe(client, url, env) for url, (env, _) in self._health_targets.items())
        )
        out: dict[str, str] = {}
        for (_, names), result in zip(self._health_targets.values(), results, strict=True):
            for name in names:
                out[name] = result
                self.metrics.worker_up.labels(worker=name).set(1 if result == "ok" else 0)
        return out

    def _probe_client(self) -> Any:
        """The HTTP client of the readiness and health checks: built once per event loop and
        kept until :meth:`aclose` (building one costs about 20 ms of CPU, its TLS context: a
        check every few seconds paid that each time)."""
        loop = asyncio.get_running_loop()
        if self._probe_http is None or self._probe_loop is not loop:
            import httpx

            self._probe_http = httpx.AsyncClient(
                timeout=self.config.readiness_timeout_s, transport=self._probe_transport
            )
            self._probe_loop = loop
        return self._probe_http

    async def _probe(self, client: Any, url: str, key_env: str | None) -> str:
        """``ok`` when ``url`` answers 200 within ``config.readiness_timeout_s``, else why not."""
        import httpx

        key = os.environ.get(key_env, "") if key_env else ""
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        timeout = self.config.readiness_timeout_s
        try:
            async with asyncio.timeout(timeout):
                response = await client.get(url, headers=headers)
        except TimeoutError:
            return f"timed out ({timeout:g}s)"
        except httpx.HTTPError as exc:
            return f"unreachable ({type(exc).__name__})"
        return "ok" if response.status_code == 200 else f"HTTP {response.status_code}"

    def is_draining(self) -> bool:
        """Whether this replica is going away: shutdown has begun, or ``config.drain_file``
        exists and is newer than the process (the chart's preStop hook)."""
        if self.draining:
            return True
        path = self.config.drain_file
        if path is None:
            return False
        try:
            return os.stat(path).st_mtime >= self._started_at
        except OSError:
            return False

    async def conductor_status(self) -> str:
        """Whether the Conductor answers: ``ok`` (or ``ok (..., local)`` for a plan source
        in this process) or why not.

        The Conductor's endpoint is asked ``/models`` with its key at most once per
        ``config.readiness_cache_s``; callers within that window get the cached result, and
        concurrent callers share one check. Sets the metric ``conductor_up``.
        """
        base = getattr(self.plan_source, "base_url", None)
        if not isinstance(base, str):
            return f"ok ({type(self.plan_source).__name__}, local)"
        cached = self._conductor_status
        if cached is not None and time.monotonic() - cached[0] < self.config.readiness_cache_s:
            return cached[1]
        if self._conductor_check is None:
            key_env = getattr(self.plan_source, "api_key_env", None)
            check = asyncio.create_task(
                self._check_conductor(base.rstrip("/") + "/models", key_env)
            )
            self._conductor_check = check
            self._background.add(check)
            check.add_done_callback(self._background.discard)
        # shielded: a probe that gives up (its client timed out) does not cancel the shared check
        return await asyncio.shield(self._conductor_check)

    async def _check_conductor(self, url: str, key_env: str | None) -> str:
        try:
            result = await self._probe(self._probe_client(), url, key_env)
            self._conductor_status = (time.monotonic(), result)
            self.metrics.conductor_up.set(1 if result == "ok" else 0)
            return result
        finally:
            self._conductor_check = None

    async def readiness(self) -> tuple[bool, dict[str, str]]:
        """Whether this replica can serve, from local facts: it is started (the caller's
        business: this object exists once the lifespan started), it is not draining
        (:meth:`is_draining`), and the Conductor answered within the cached window
        (:meth:`conductor_status`). Returns (ready, check name -> result).

        The workers are not asked: a worker down fails only the requests that use it, and its
        health is the metric ``worker_up{worker}`` (:meth:`check_workers`, in the background).
        """
        if self.is_draining():
            return False, {"gateway": "draining"}
        checks = {"gateway": "ok", "conductor": await self.conductor_status()}
        return all(v.startswith("ok") for v in checks.values()), checks

    def _maybe_log_trace(self, job: SolveJob, trace: SolveTrace) -> None:
        rate = self.config.trace_sample_rate
        if rate <= 0 or self._rng.random() >= rate:
            return
        log = self._trace_logger
        if log is None:
            from conductor_core.track.traces import log_solve_trace

            log = log_solve_trace

        async def send() -> None:
            try:
                await asyncio.to_thread(
                    log,
                    trace,
                    name=f"gateway {job.request_id}",
                    attributes={"request_id": job.request_id, "model": job.model},
                )
            except Exception as exc:  # tracing must never fail a request
                logger.warning(
                    "could not log the trace to MLflow: %s",
                    type(exc).__name__,
                    extra={"request_id": job.request_id},
                )

        task = asyncio.create_task(send())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    @property
    def in_flight(self) -> int:
        """Workflows running now."""
        return len(self._active)

    async def drain(self, timeout_s: float) -> int:
        """Let the workflows in flight (and pending trace uploads) finish for up to
        ``timeout_s``; cancel the rest. Returns how many were cancelled."""
        self.draining = True
        waiting = self._active | self._background
        if not waiting:
            return 0
        logger.info("draining %d workflow(s)", len(self._active))
        _, pending = await asyncio.wait(waiting, timeout=timeout_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
            logger.warning("cancelled %d workflow(s) still running after the drain", len(pending))
        return len(pending)

    async def aclose(self, drain_timeout_s: float | None = None) -> None:
        """Drain (``config.drain_timeout_s`` by default), then close the pool and the plan
        source."""
        timeout = self.config.drain_timeout_s if drain_timeout_s is None else drain_timeout_s
        if self._health_task is not None:
            self._health_task.cancel()
            await asyncio.gather(self._health_task, return_exceptions=True)
            self._health_task = None
        try:
            await self.drain(timeout)
        finally:
            try:
                await self.pool.aclose()
                await self.plan_source.aclose()
            finally:
                probe, self._probe_http = self._probe_http, None
                if probe is not None:
                    await probe.aclose()


_ANSWER_DELTA = "answer_delta"
"""Queue item type of a piece of the streamed answer (never sent as a workflow event)."""

_STREAM_BROKEN = RequestError(
    502,
    "the worker writing the answer failed after part of it was streamed; the text sent is not "
    "the answer and is not sent again",
    "server_error",
    code="worker_error",
)


class _EventTranslator:
    """Turns solve-loop and executor events into :class:`ConductorEvent` (pool worker ids, as
    plans are written; a step's error passed through ``redact``)."""

    def __init__(
        self,
        worker_names: list[str],
        redact: Callable[[str], str] = lambda text: text,
    ) -> None:
        self.names = worker_names
        self.redact = redact
        self.round = 0

    def _name(self, worker: int) -> str:
        return self.names[worker] if 0 <= worker < len(self.names) else str(worker)

    def __call__(self, event: dict[str, Any]) -> ConductorEvent:
        kind = event.get("type", "")
        if "round" in event:
            self.round = int(event["round"])
        data = {k: v for k, v in event.items() if k not in ("type", "round")}
        if kind == "plan_end":
            kind = "plan"
            plan = event.get("plan")
            if plan:
                data["workers"] = list(plan.get("model_id", []))
        elif kind == "step_start":
            data["worker_name"] = self._name(int(event["worker"]))
        elif kind == "step_end":
            step = dict(event.get("step") or {})
            data = {**step, "worker_name": self._name(int(step.get("worker", -1)))}
            if isinstance(data.get("error"), str):
                data["error"] = self.redact(data["error"])
        return ConductorEvent(type=kind, round=self.round, data=data)
