"""OpenAIPlanSource's settings, checked without a server: the base URL is normalised and bad
settings are configuration errors (against a server on loopback:
tests/integration/test_policy_openai.py)."""

from __future__ import annotations

import pytest

from conductor_core.errors import ConfigError
from conductor_core.policy.openai_policy import OpenAIPlanSource, normalize_base_url


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://host:8000", "http://host:8000/v1"),
        ("http://host:8000/", "http://host:8000/v1"),
        ("https://api.example.com/v1/", "https://api.example.com/v1"),
        ("https://example.com/openai/v1beta", "https://example.com/openai/v1beta"),
    ],
)
def test_normalize_base_url(url: str, expected: str) -> None:
    assert normalize_base_url(url) == expected


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="base_url"):
        OpenAIPlanSource("ftp://host", "m")
    with pytest.raises(ConfigError, match="max_tokens"):
        OpenAIPlanSource("http://host", "m", max_tokens=0)
