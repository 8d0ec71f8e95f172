"""The shared SDK-error mapping (``workers/providers/errors.py``), with stand-in exception classes
named like the SDKs' own, so no SDK is needed."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx

from conductor_core.workers.providers.errors import (
    MAX_ERROR_CHARS,
    clean_message,
    map_sdk_error,
    map_transport_error,
)
from conductor_core.workers.types import ErrorKind

SECRET = "sk-test-MAPPER-0123456789abcdef"


class APIError(Exception):
    def __init__(self, message: str, **attrs: object) -> None:
        super().__init__(message)
        self.message = message
        self.__dict__.update(attrs)


class APIConnectionError(APIError):
    pass


class APITimeoutError(APIConnectionError):
    pass


class APIResponseValidationError(APIError):
    pass


class APIStatusError(APIError):
    pass


def status_error(code: int, headers: dict[str, str] | None = None) -> APIStatusError:
    response = SimpleNamespace(headers=httpx.Headers(headers or {}))
    return APIStatusError(f"failed, key {SECRET}", status_code=code, response=response)


def test_sdk_family_by_class_name() -> None:
    e = map_sdk_error(APITimeoutError("slow"))
    assert (e.kind, e.retryable, str(e)) == (ErrorKind.TIMEOUT, True, "request timed out: slow")
    e = map_sdk_error(APIConnectionError("refused"))
    assert (e.kind, e.retryable, str(e)) == (
        ErrorKind.CONNECTION,
        True,
        "connection failed: refused",
    )
    e = map_sdk_error(APIConnectionError("refused"), where="http://h:1/v1")
    assert str(e) == "cannot reach http://h:1/v1: refused"
    e = map_sdk_error(APIResponseValidationError("no id"))
    assert e.kind == ErrorKind.MALFORMED and e.retryable and "API schema" in str(e)
    e = map_sdk_error(APIError("odd"))
    assert e.kind == ErrorKind.MALFORMED and str(e) == "unusable response: odd"


def test_status_errors_use_the_status_table_and_retry_after() -> None:
    e = map_sdk_error(status_error(429, {"retry-after": "4"}), [SECRET])
    assert (e.kind, e.retryable, e.status, e.retry_after) == (ErrorKind.RATE_LIMIT, True, 429, 4.0)
    assert SECRET not in str(e) and str(e).startswith("HTTP 429: ")
    e = map_sdk_error(status_error(401), [SECRET])
    assert (e.kind, e.retryable) == (ErrorKind.AUTH, False) and SECRET not in str(e)
    e = map_sdk_error(status_error(503))
    assert (e.kind, e.retryable, e.retry_after) == (ErrorKind.SERVER, True, None)


def test_status_passed_by_the_provider() -> None:
    # an SDK without an APIStatusError class (google-genai) passes its code
    exc = APIError("quota", response=SimpleNamespace(headers={"retry-after": "2"}))
    e = map_sdk_error(exc, status=429)
    assert (e.kind, e.status, e.retry_after) == (ErrorKind.RATE_LIMIT, 429, 2.0)
    assert map_sdk_error(exc, status=None).kind == ErrorKind.MALFORMED


def test_json_decode_error_is_malformed() -> None:
    exc = json.JSONDecodeError("Expecting value", "{x", 1)
    e = map_sdk_error(exc)
    assert e.kind == ErrorKind.MALFORMED and str(e).startswith("response is not JSON: ")


def test_transport_errors_by_type_and_name() -> None:
    cases = [
        (httpx.ReadTimeout("slow"), ErrorKind.TIMEOUT, True, "request timed out: ReadTimeout"),
        (TimeoutError("t"), ErrorKind.TIMEOUT, True, "request timed out: "),
        (ValueError("bad body"), ErrorKind.MALFORMED, True, "unreadable response: ValueError"),
        (KeyError("k"), ErrorKind.MALFORMED, True, "unreadable response: "),
        (ConnectionResetError("reset"), ErrorKind.CONNECTION, True, "connection failed: "),
        (httpx.ConnectError("refused"), ErrorKind.CONNECTION, True, "connection failed: "),
        (httpx.RemoteProtocolError("eof"), ErrorKind.CONNECTION, True, "connection failed: "),
        (RuntimeError("boom"), ErrorKind.SERVER, False, "unexpected error: RuntimeError: boom"),
    ]
    for exc, kind, retryable, prefix in cases:
        e = map_transport_error(exc)
        assert (e.kind, e.retryable) == (kind, retryable), exc
        assert str(e).startswith(prefix), (exc, str(e))


def test_clean_message_one_line_bounded_redacted() -> None:
    text = f"line one\n  line two {SECRET} " + "x" * 1000
    out = clean_message(text, [SECRET, None])
    assert "\n" not in out and SECRET not in out
    assert len(out) == MAX_ERROR_CHARS and out.endswith("...")
