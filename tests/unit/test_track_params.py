"""Flattening and secret scrubbing of MLflow params (no server), and the local tracking default."""

from __future__ import annotations

import os

import pytest

from conductor_core.errors import ConfigError
from conductor_core.track.mlflow_run import MAX_PARAM_CHARS, flatten_params, tracking_uri
from conductor_core.track.scrub import (
    REDACTED,
    is_secret_key,
    looks_like_secret,
    scrub_obj,
    scrub_text,
    secret_values,
)
from conductor_core.workers.config import PoolConfig

KEY = "sk-proj-" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2"
AWS_ID = "AKIA" + "ABCDEFGHIJKLMNOP"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch):
    for name in list(os.environ):
        if is_secret_key(name):
            monkeypatch.delenv(name)


def _pool(**worker) -> PoolConfig:
    base = {"provider": "openai", "model": "m", "endpoint": "http://h/v1"}
    return PoolConfig.model_validate({"workers": [{**base, **worker}]})


def test_nested_dicts_flatten_to_dotted_keys():
    flat = flatten_params({"a": {"b": {"c": 1}, "d": [1, 2]}, "e": None, "f": True, "g": 0.5})
    assert flat == {"a.b.c": "1", "a.d": "[1, 2]", "e": "None", "f": "True", "g": "0.5"}


def test_lists_of_mappings_are_indexed_and_prefix_applies():
    flat = flatten_params({"workers": [{"m": "x"}, {"m": "y"}]}, prefix="cfg")
    assert flat == {"cfg.workers.0.m": "x", "cfg.workers.1.m": "y"}


def test_pydantic_pool_keeps_key_env_name(monkeypatch):
    monkeypatch.setenv("MY_WORKER_KEY", KEY)
    flat = flatten_params({"pool": _pool(api_key_env="MY_WORKER_KEY")})
    assert flat["pool.workers.0.api_key_env"] == "MY_WORKER_KEY"
    assert flat["pool.workers.0.params.max_tokens"] == "4096"
    assert flat["pool.workers.0.model"] == "m"
    assert KEY not in "".join(flat.values())


def test_value_equal_to_env_named_by_env_field_is_redacted(monkeypatch):
    # Not key-shaped, so only the *_env reference can catch it.
    monkeypatch.setenv("CUSTOM_CRED", "plain-looking-value-123")
    flat = flatten_params({"worker": {"key_env": "CUSTOM_CRED"}, "note": "plain-looking-value-123"})
    assert flat == {"worker.key_env": "CUSTOM_CRED", "note": REDACTED}


def test_value_of_secret_named_env_var_is_redacted(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "abcdefghijkl")
    assert flatten_params({"header": "abcdefghijkl"}) == {"header": REDACTED}


def test_secret_keys_are_dropped():
    config = {
        "api_key": KEY,
        "hf_token": "x",
        "db": {"password": "p", "user": "u"},
        "aws_secret_access_key": "s",
        "AWS_ACCESS_KEY_ID": "i",
        "headers": {"Authorization": "Bearer abc"},
        "max_tokens": 10,
        "input_tokens": 3,
    }
    flat = flatten_params(config)
    assert flat == {"db.user": "u", "max_tokens": "10", "input_tokens": "3"}


def test_key_shaped_values_are_redacted_anywhere():
    flat = flatten_params({"a": f"use {KEY}", "b": AWS_ID, "c": "sk-short", "d": ["x", KEY]})
    assert flat == {"a": REDACTED, "b": REDACTED, "c": "sk-short", "d": REDACTED}


def test_long_values_are_truncated_and_bad_key_chars_replaced():
    flat = flatten_params({"long": "x" * 10_000, "we!rd key": 1})
    assert len(flat["long"]) == MAX_PARAM_CHARS
    assert flat["long"].endswith("...")
    assert flat["we_rd key"] == "1"


def test_non_mapping_is_a_clear_error():
    with pytest.raises(ConfigError, match="expected a mapping"):
        flatten_params([1, 2])


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("api_key", True),
        ("OPENAI_API_KEY", True),
        ("apiKey", True),
        ("apikey", True),
        ("token", True),
        ("access_token", True),
        ("client_secret", True),
        ("AWS_SECRET_ACCESS_KEY", True),
        ("AWS_SESSION_TOKEN", True),
        ("MLFLOW_TRACKING_PASSWORD", True),
        ("authorization", True),
        ("api_key_env", False),
        ("token_env_var", False),
        ("max_tokens", False),
        ("output_tokens", False),
        ("tokenizer", False),
        ("model", False),
        ("key", False),
    ],
)
def test_is_secret_key(key, secret):
    assert is_secret_key(key) is secret


def test_looks_like_secret_patterns():
    assert looks_like_secret(KEY)
    assert looks_like_secret(AWS_ID)
    assert looks_like_secret("Authorization: Bearer abcdefghijklmnopqrstu")
    assert looks_like_secret("hf_" + "a" * 34)
    assert not looks_like_secret("the answer is 42")
    assert not looks_like_secret("task-1234")


def test_scrub_text_keeps_the_rest(monkeypatch):
    monkeypatch.setenv("SERVICE_PASSWORD", "hunter2hunter2")
    secrets = secret_values()
    text = scrub_text(f"pw hunter2hunter2 and key {KEY}.", secrets)
    assert text == "pw *** and key ***."


def test_scrub_obj_drops_secret_keys_and_scrubs_nested_strings():
    out = scrub_obj({"a": [KEY, 1], "token": "t", "b": {"c": "ok"}})
    assert out == {"a": [REDACTED, 1], "b": {"c": "ok"}}


def test_short_env_values_are_not_secrets(monkeypatch):
    monkeypatch.setenv("X_TOKEN", "1")
    assert "1" not in secret_values()


def test_tracking_uri_default_is_sqlite_in_runs_dir(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("CONDUCTOR_RUNS_DIR", str(tmp_path / "r"))
    assert tracking_uri() == f"sqlite:///{tmp_path / 'r' / 'mlflow.db'}"
    assert (tmp_path / "r").is_dir()
    assert tracking_uri(tmp_path / "other") == f"sqlite:///{tmp_path / 'other' / 'mlflow.db'}"


def test_tracking_uri_env_wins_and_file_store_is_refused(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow:5000")
    assert tracking_uri() == "http://mlflow:5000"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:///tmp/mlruns")
    with pytest.raises(ConfigError, match="MLFLOW_TRACKING_URI"):
        tracking_uri()
