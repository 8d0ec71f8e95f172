"""Fixtures shared by unit tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple:
    """A freshly built random tiny Conductor: ``(tokenizer, model)`` (transformers)."""
    transformers = pytest.importorskip("transformers")
    from conductor_core.policy import tiny as factory

    path = factory.build_tiny_conductor(Path(tmp_path_factory.mktemp("tiny")) / "m")
    tok = transformers.AutoTokenizer.from_pretrained(path)
    model = transformers.AutoModelForCausalLM.from_pretrained(path)
    return tok, model
