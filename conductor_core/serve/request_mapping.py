"""A chat-completions request mapped onto a solve job: the question (:func:`compose_question`),
and the ``conductor`` extension onto :class:`~conductor_core.solve.SolveOptions`, which may only
lower the server's limits (:meth:`RequestMapper.solve_options_for`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.protocol import (
    ChatCompletionRequest,
    ChatMessage,
    ConductorOptions,
    RequestError,
    refuse_unsupported,
)
from conductor_core.serve.structured import output_format_of
from conductor_core.solve import SolveOptions, solve_options
from conductor_core.workers.config import PoolConfig
from conductor_core.workers.types import OutputFormat
from conductor_core.workflow.executor import Budget

__all__ = ["RequestMapper", "SolveJob", "compose_question"]


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


def at_most(param: str, value: int, limit: int) -> int:
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


def lowered(
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


class RequestMapper:
    """Validates requests against one gateway's settings and pool, and maps them onto solve jobs.

    Args:
        config: the gateway settings (the model id, the defaults and ceilings of the solve
            options).
        pool_config: the worker pool (the workers a request may name).
    """

    def __init__(self, config: GatewayConfig, pool_config: PoolConfig) -> None:
        self.config = config
        self.pool_config = pool_config
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
            at_most("conductor.max_rounds", extra.max_rounds, self.config.max_rounds_limit)
            changes["max_rounds"] = extra.max_rounds
        max_steps = opts.max_steps
        if extra.max_steps is not None:
            max_steps = at_most("conductor.max_steps", extra.max_steps, opts.max_steps)
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
                max_tokens=lowered(
                    "conductor.budget.max_tokens", given.max_tokens, budget.max_tokens
                ),
                max_cost=lowered("conductor.budget.max_cost", given.max_cost, budget.max_cost),
                deadline_s=lowered(
                    "conductor.budget.deadline_s",
                    given.deadline_s,
                    budget.deadline_s,
                    limit=deadline_limit,
                ),
            )
        if extra.workers is not None:
            ids = self.worker_ids(extra.workers)
            changes["worker_ids"] = ids  # descriptions stay the pool's, indexed by pool id
        return dataclasses.replace(opts, **changes), extra.return_trace

    def worker_ids(self, wanted: list[int | str]) -> tuple[int, ...]:
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
