"""Decoding LiveCodeBench test cases without executing pickle content.

``private_test_cases`` in ``livecodebench/code_generation_lite`` is either a JSON string or
``base64(zlib(pickle(json_string)))``. Pickle can call arbitrary callables while loading, so the
blob is read with :class:`PlainDataUnpickler`, which refuses every global reference except a few
builtin container/scalar types, and the result is checked to be plain data before use.
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import pickle
import zlib
from typing import Any

from conductor_core.errors import ConductorError

#: Cap on the decompressed size of one blob (the largest real LCB blobs are a few hundred MB).
MAX_DECOMPRESSED_BYTES = 1 << 30

_PLAIN_TYPES = (str, bytes, int, float, bool, type(None), list, dict, tuple)
_ALLOWED_GLOBALS = {
    ("builtins", "str"),
    ("builtins", "bytes"),
    ("builtins", "int"),
    ("builtins", "float"),
    ("builtins", "bool"),
    ("builtins", "list"),
    ("builtins", "dict"),
    ("builtins", "tuple"),
}


class UnsafePickleError(ConductorError):
    """A pickle blob references something other than plain data."""


class TestCaseDecodeError(ConductorError):
    """A LiveCodeBench test-case field cannot be decoded."""

    __test__ = False  # not a pytest test class


class PlainDataUnpickler(pickle.Unpickler):
    """An unpickler that admits only str/bytes/int/float/bool/None/list/dict/tuple."""

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in _ALLOWED_GLOBALS:
            return super().find_class(module, name)
        raise UnsafePickleError(
            f"refusing to unpickle the global '{module}.{name}': only plain data "
            "(str, bytes, int, float, bool, None, list, dict, tuple) is allowed"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError("refusing a pickle persistent id: only plain data is allowed")


def _check_plain(value: Any, depth: int = 0) -> None:
    if depth > 100:
        raise UnsafePickleError("pickled data nests deeper than 100 levels")
    if not isinstance(value, _PLAIN_TYPES):
        raise UnsafePickleError(f"pickled data contains a {type(value).__name__} (not plain data)")
    if isinstance(value, (list, tuple)):
        for v in value:
            _check_plain(v, depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_plain(k, depth + 1)
            _check_plain(v, depth + 1)


def restricted_loads(data: bytes) -> Any:
    """Unpickle ``data`` admitting only plain data; anything else raises UnsafePickleError."""
    try:
        value = PlainDataUnpickler(io.BytesIO(data)).load()
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as exc:
        raise TestCaseDecodeError(f"not a valid pickle: {exc}") from exc
    _check_plain(value)
    return value


def _inflate(data: bytes) -> bytes:
    d = zlib.decompressobj()
    out = d.decompress(data, MAX_DECOMPRESSED_BYTES)
    if d.unconsumed_tail:
        raise TestCaseDecodeError(
            f"decompressed test cases exceed {MAX_DECOMPRESSED_BYTES} bytes; refusing"
        )
    return out


def decode_test_cases(field: Any) -> list[dict[str, Any]]:
    """Decode a public or private LiveCodeBench test-case field into a list of case dicts.

    Accepts an already-decoded list, a JSON string, or base64(zlib(pickle(JSON string))).
    Each case has at least ``input`` and ``output`` (strings) and usually ``testtype``.
    """
    if field is None or field == "":
        return []
    if isinstance(field, list):
        value: Any = field
    elif isinstance(field, (str, bytes)):
        text = field.decode("utf-8") if isinstance(field, bytes) else field
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            try:
                raw = base64.b64decode(text.encode("ascii"), validate=False)
                inflated = _inflate(raw)
            except (binascii.Error, zlib.error, UnicodeEncodeError) as exc:
                raise TestCaseDecodeError(
                    f"test cases are neither JSON nor base64(zlib(pickle)): {exc}"
                ) from exc
            value = restricted_loads(inflated)
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            if isinstance(value, str):
                try:
                    value = json.loads(value)
                except json.JSONDecodeError as exc:
                    raise TestCaseDecodeError(f"unpickled test cases are not JSON: {exc}") from exc
    else:
        raise TestCaseDecodeError(f"unexpected test-case field type {type(field).__name__}")
    if not isinstance(value, list) or not all(
        isinstance(c, dict) and "input" in c and "output" in c for c in value
    ):
        raise TestCaseDecodeError("test cases must be a list of objects with 'input' and 'output'")
    return value


def encode_private_test_cases(cases: list[dict[str, Any]]) -> str:
    """Encode cases the way LiveCodeBench publishes them (base64 of zlib of pickle of JSON)."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode("ascii")
