"""A solve job answered whole, as one ``chat.completion`` object."""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from conductor_core.serve.answer import final_answer
from conductor_core.serve.outcomes import (
    answer_text,
    check_format,
    failure_of,
    summary_of,
    usage_of,
)
from conductor_core.serve.protocol import (
    AssistantMessage,
    ChatCompletionChoice,
    ChatCompletionResponse,
    completion_id,
)
from conductor_core.serve.request_mapping import SolveJob
from conductor_core.serve.workflow_run import WorkflowRunner

__all__ = ["chat_completion"]


async def chat_completion(
    runner: WorkflowRunner, job: SolveJob, client_gone: Awaitable[Any] | None = None
) -> ChatCompletionResponse:
    """Solve ``job`` and answer as one ``chat.completion``.

    A workflow stopped by its budget (tokens, dollars or the ``deadline_s`` wall clock) before
    any answer gets empty content with ``finish_reason="length"``; so does an answer cut to the
    request's ``max_tokens`` (:func:`~.answer.cut_to_tokens`). The id is fresh for every
    response (``conductor.request_id`` carries the request id). ``client_gone`` completes when
    the client disconnects, which cancels the workflow (:meth:`WorkflowRunner.run`).

    Raises:
        RequestError: 502 when the plan did not parse, a worker failed or a worker rejected a
            request the plan made (:func:`~.outcomes.failure_of`), 502
            ``response_format_unmet`` when the answer is not in the requested form, 504 on
            timeout, 499 when the client disconnected first.
    """
    trace = await runner.run(job, client_gone=client_gone)
    failure = failure_of(trace)
    if failure is not None:
        raise failure
    answer, cut = final_answer(answer_text(job, trace), job.max_answer_tokens, job.stop)
    answered = trace.answer is not None and not cut
    if answered:
        check_format(job, trace, answer, runner.worker_names)
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
        conductor=summary_of(job, trace, runner.internal_hosts),
    )
