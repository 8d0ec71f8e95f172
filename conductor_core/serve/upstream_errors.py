"""The client's error when the Conductor's server (the plan source) fails: a 400 when it refused
the request itself (a retry cannot fix it), else a 502; neither names an upstream URL."""

from __future__ import annotations

from collections.abc import Callable

from conductor_core.serve.protocol import RequestError

__all__ = ["CLIENT_FAULT_STATUSES", "plan_source_error"]

CLIENT_FAULT_STATUSES = frozenset({400, 413, 422})
"""Upstream statuses that blame the request itself (e.g. a prompt longer than the Conductor's
context): the client's error, which a retry cannot fix. Others (401, 404, 429, 5xx, no answer)
are the deployment's fault: 502."""


def upstream_status(exc: BaseException) -> int | None:
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


def upstream_message(exc: BaseException) -> str:
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


def plan_source_error(
    exc: BaseException, request_id: str, redact: Callable[[str], str]
) -> tuple[RequestError, str]:
    """The error for the client of a request whose plan source failed with ``exc``, and the
    outcome it is counted under (``rejected`` or ``error``).

    A refusal of the request itself (HTTP 400/413/422) is a 400 ``conductor_rejected_request``
    quoting the upstream's message through ``redact``; anything else is a 502
    ``conductor_unavailable`` that points to the log under ``request_id``.
    """
    status = upstream_status(exc)
    if status in CLIENT_FAULT_STATUSES:
        said = redact(upstream_message(exc))[:500]
        error = RequestError(
            400,
            f"the Conductor's server refused this request (HTTP {status}): {said}",
            code="conductor_rejected_request",
        )
        return error, "rejected"
    http = f" (HTTP {status})" if status is not None else ""
    error = RequestError(
        502,
        f"the Conductor failed or could not be reached{http}; the gateway's log has "
        f"the details under request id {request_id}",
        "server_error",
        code="conductor_unavailable",
    )
    return error, "error"
