"""A solve job answered as a stream of ``chat.completion.chunk`` server-sent events: a role chunk,
one chunk per workflow event, the answer as content chunks while the last step's worker writes
it, the final chunk with the finish reason and the summary, the usage chunk when asked for, then
``[DONE]`` (:func:`stream_chat_completion`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from conductor_core.serve.answer import AnswerStream
from conductor_core.serve.outcomes import (
    answer_text,
    check_format,
    failure_of,
    summary_of,
    usage_of,
)
from conductor_core.serve.protocol import (
    ChatCompletionChunk,
    ChatCompletionStreamChoice,
    ConductorEvent,
    DeltaMessage,
    RequestError,
    UsageInfo,
    completion_id,
    error_body,
)
from conductor_core.serve.request_mapping import SolveJob
from conductor_core.serve.sse import DONE, sse_data
from conductor_core.serve.workflow_events import EventTranslator
from conductor_core.serve.workflow_run import WorkflowRunner

__all__ = ["ChunkWriter", "stream_chat_completion"]

logger = logging.getLogger("conductor.gateway")

_ANSWER_DELTA = "answer_delta"
"""Queue item type of a piece of the streamed answer (never sent as a workflow event)."""

STREAM_BROKEN = RequestError(
    502,
    "the worker writing the answer failed after part of it was streamed; the text sent is not "
    "the answer and is not sent again",
    "server_error",
    code="worker_error",
)
"""The error that ends a stream whose text sent is not the start of the answer."""


class ChunkWriter:
    """The ``chat.completion.chunk`` events of one stream (one id, creation time and model).

    With ``include_usage`` every chunk carries ``"usage"`` (null but in the last), as OpenAI's
    do. Every event is the JSON encoding of a chunk object (:func:`~.sse.sse_data`).
    """

    def __init__(self, model: str, include_usage: bool) -> None:
        self.id = completion_id()
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        # the wire object of a content chunk, whose text each piece replaces (the answer comes
        # in many small pieces: a model and its validation for each would cost)
        self._content = self.body(DeltaMessage(content=""))

    def body(
        self,
        delta: DeltaMessage | None = None,
        *,
        event: ConductorEvent | None = None,
        finish: str | None = None,
        usage: UsageInfo | None = None,
        choices: bool = True,
    ) -> dict[str, Any]:
        """The wire object of one chunk."""
        data = ChatCompletionChunk(
            id=self.id,
            created=self.created,
            model=self.model,
            choices=[
                ChatCompletionStreamChoice(delta=delta or DeltaMessage(), finish_reason=finish)
            ]
            if choices
            else [],
            usage=usage,
            conductor=event,
        ).to_json()
        if self.include_usage:
            data.setdefault("usage", None)
        return data

    def chunk(self, delta: DeltaMessage | None = None, **fields: Any) -> str:
        """One chunk as an event (the arguments of :meth:`body`)."""
        return sse_data(self.body(delta, **fields))

    def content(self, text: str) -> str:
        """A content chunk of ``text``: a copy of the content chunk's object holding it."""
        choice = self._content["choices"][0]
        delta = {**choice["delta"], "content": text}
        return sse_data({**self._content, "choices": [{**choice, "delta": delta}]})


async def stream_chat_completion(
    runner: WorkflowRunner, job: SolveJob, received_at: float | None = None
) -> AsyncIterator[str]:
    """Solve ``job``, yielding server-sent events: a role chunk, one chunk per workflow event
    (its ``conductor`` field; empty delta), the answer as content chunks while the last step's
    worker writes it (the rest, or all of it when it was not streamed, after the workflow), a
    final chunk with the finish reason and the summary (``conductor.type == "done"``), the usage
    chunk when asked for, then ``[DONE]``.

    The content is cut to the request's ``max_tokens`` and stop sequences as a whole answer is
    (:class:`~.answer.AnswerStream`; the workflow events carry the steps' full outputs). A
    failure after the stream started is sent as an OpenAI error object, then ``[DONE]``; so is
    an answer that is not the text already streamed (the streamed step failed part-way and an
    earlier round's answer stands): text sent is never sent again. With a ``response_format``
    the answer is not streamed as it is written: it is sent in one content chunk once it passed
    the check (:func:`~.outcomes.check_format`), else the stream ends with that error. The time
    from ``received_at`` (the request's arrival, ``time.perf_counter()``; None: now) to the
    first content chunk is the metric ``time_to_first_token_seconds``. Leaving the stream before
    its end (the client went away) cancels the workflow.
    """
    metrics = runner.metrics
    first_token = metrics.first_token_timer(received_at)
    chunks = ChunkWriter(job.model, job.include_usage)

    def content(text: str) -> str:
        first_token()
        return chunks.content(text)

    queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
    translate = EventTranslator(runner.worker_names, runner.redact)
    answer_stream = AnswerStream(job.max_answer_tokens, job.stop)

    def on_answer_delta(text: str) -> None:
        queue.put_nowait({"type": _ANSWER_DELTA, "text": text})

    # an answer with a response_format is sent whole, once it has passed the check
    streamed = job.output_format is None
    solving = asyncio.create_task(
        runner.run(
            job,
            on_event=queue.put_nowait,
            on_answer_delta=on_answer_delta if streamed else None,
        )
    )
    solving.add_done_callback(lambda _: queue.put_nowait(None))
    try:
        yield chunks.chunk(DeltaMessage(role="assistant"))
        while (event := await queue.get()) is not None:
            if event.get("type") == _ANSWER_DELTA:
                if piece := answer_stream.push(event["text"]):
                    yield content(piece)
                continue
            yield chunks.chunk(event=translate(event))
        try:
            trace = solving.result()
        except RequestError as exc:
            yield sse_data(exc.body())
            yield DONE
            return
        failure = failure_of(trace)
        rest, cut, continues = answer_stream.finish(answer_text(job, trace))
        if answer_stream.sent and (failure is not None or not continues):
            # Part of a reply went out and the answer is not its continuation (the worker
            # writing it failed part-way; maybe an earlier round's answer stands): say so.
            logger.warning(
                "the streamed answer was broken off; the stream ends with an error",
                extra={"request_id": job.request_id},
            )
            failure = STREAM_BROKEN
        if failure is None and trace.answer is not None and not cut:
            try:
                check_format(job, trace, rest, runner.worker_names)
            except RequestError as exc:
                failure = exc
        if failure is not None:
            yield sse_data(failure.body())
            yield DONE
            return
        if rest:
            yield content(rest)
        summary = summary_of(job, trace, runner.internal_hosts)
        done = ConductorEvent(type="done", round=len(trace.rounds) - 1, data=summary)
        finish = "stop" if trace.answer is not None and not cut else "length"
        yield chunks.chunk(event=done, finish=finish)
        if job.include_usage:
            yield chunks.chunk(usage=usage_of(trace), choices=False)
        yield DONE
    except Exception as exc:  # never leave a stream without an end
        logger.exception("stream failed", extra={"request_id": job.request_id})
        yield sse_data(error_body(f"internal error: {type(exc).__name__}", "server_error"))
        yield DONE
    finally:
        if not solving.done():  # the client went away: stop the workflow
            solving.cancel()
            metrics.observe_failure("client_disconnected")
