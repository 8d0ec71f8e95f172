"""A registered tiny Conductor loads back as an MLflow pyfunc and generates (local SQLite store),
from a user message or a whole chat given as JSON (a recursion round)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.slow


def test_registered_tiny_model_predicts_and_downloads(tmp_path, monkeypatch):
    import mlflow

    from conductor_core.policy.tiny import build_tiny_conductor
    from conductor_core.track import load_model_dir, log_and_register_model
    from conductor_core.track.mlflow_run import tracking_at

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_RUN_ID", raising=False)
    monkeypatch.setenv("CONDUCTOR_RUNS_DIR", str(tmp_path / "runs"))
    model_dir = build_tiny_conductor(
        tmp_path / "tiny", corpus=["model_id = [0, 1]\nsubtasks = ['a', 'b']"] * 40
    )
    uri = log_and_register_model(model_dir, "unit-tiny", alias="candidate")
    assert uri == "models:/unit-tiny@candidate"
    with tracking_at():  # the local store under CONDUCTOR_RUNS_DIR
        model = mlflow.pyfunc.load_model(uri)
    out = model.predict(["What is 2+2?", "Name a colour."], params={"max_new_tokens": 3})
    chat = [{"role": "user", "content": "What is 2+2?"}]
    again = model.predict([json.dumps(chat)], params={"max_new_tokens": 3})
    assert again == out[:1]  # a one-message chat is asked as the plain message is
    longer = [*chat, {"role": "assistant", "content": "4"}, {"role": "user", "content": "Sure?"}]
    assert len(model.predict([json.dumps(longer)], params={"max_new_tokens": 3})) == 1
    local = load_model_dir(uri, tmp_path / "back")
    assert isinstance(out, list) and len(out) == 2
    assert all(isinstance(text, str) for text in out)
    assert (local / "model.safetensors").read_bytes() == (
        model_dir / "model.safetensors"
    ).read_bytes()


def test_pyfunc_inputs_are_a_user_message_or_a_json_chat():
    from conductor_core.track.pyfunc_model import conversation

    chat = [
        {"role": "user", "content": "Models: 0, 1. Question: 2+2?"},
        {"role": "assistant", "content": "model_id = [0]"},
        {"role": "user", "content": "The answer was 4. Keep it or plan again."},
    ]
    assert conversation(json.dumps(chat)) == chat
    assert conversation("What is 2+2?") == [{"role": "user", "content": "What is 2+2?"}]
    for text in (
        "[1, 2, 3]",  # a JSON list, not of messages: a question
        '[{"role": "tool", "content": "x"}]',  # a role the chat template is not given
        '[{"role": "user", "content": 3}]',
        '[{"role": "user", "content": "a", "name": "b"}]',
        "[not json",
        "[]",
    ):
        assert conversation(text) == [{"role": "user", "content": text}], text
