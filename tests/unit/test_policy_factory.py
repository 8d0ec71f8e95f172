"""load_plan_source: dispatch on the --conductor value, and its errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from conductor_core.errors import ConductorError
from conductor_core.policy import factory
from conductor_core.policy.factory import load_plan_source
from conductor_core.policy.local import TransformersPlanSource
from conductor_core.policy.openai_policy import OpenAIPlanSource
from conductor_core.policy.scripted import ScriptedPlanSource


def test_scripted_with_options() -> None:
    source = load_plan_source("scripted", routes={"math": 1}, verify=False)
    assert isinstance(source, ScriptedPlanSource)
    assert source.routes == {"math": 1}
    assert source.verify is False
    assert isinstance(load_plan_source("  Scripted "), ScriptedPlanSource)


def test_url_gives_an_openai_source_without_touching_the_network() -> None:
    source = load_plan_source(
        "http://127.0.0.1:9/", model="conductor", api_key_env="X_KEY", temperature=0.5
    )
    assert isinstance(source, OpenAIPlanSource)
    assert source.base_url == "http://127.0.0.1:9/v1"
    assert source.model == "conductor"
    assert source.api_key_env == "X_KEY"
    assert source.temperature == 0.5
    unresolved = load_plan_source("https://conductor.example.com/v1")
    assert isinstance(unresolved, OpenAIPlanSource)
    assert unresolved.model is None


def test_model_directory_gives_a_transformers_source(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    source = load_plan_source(str(tmp_path), max_new_tokens=64, seed=1)
    assert isinstance(source, TransformersPlanSource)
    assert source.model_dir == tmp_path
    assert source.max_new_tokens == 64
    assert source._model is None  # loaded lazily, on first plan


def test_tiny_uses_the_default_tiny_dir(monkeypatch, tmp_path: Path) -> None:
    calls = []

    def fake_default_tiny_dir(*, build: bool = True) -> Path:
        calls.append(build)
        return tmp_path

    monkeypatch.setattr(factory, "default_tiny_dir", fake_default_tiny_dir)
    source = load_plan_source("tiny", temperature=0.0)
    assert isinstance(source, TransformersPlanSource)
    assert source.model_dir == tmp_path
    assert source.temperature == 0.0
    assert calls == [True]


def test_directory_without_config_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ConductorError, match=r"no config\.json"):
        load_plan_source(str(tmp_path))


def test_file_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    path.write_text("x")
    with pytest.raises(ConductorError, match="is a file, not a model directory"):
        load_plan_source(str(path))


@pytest.mark.parametrize("spec", ["", "gpt-5", "/no/such/dir", "ftp://host/v1"])
def test_unknown_spec_names_the_accepted_forms(spec: str) -> None:
    with pytest.raises(ConductorError) as info:
        load_plan_source(spec)
    message = str(info.value)
    assert message.startswith("--conductor: cannot use")
    for form in ("'scripted'", "'tiny'", "http(s) URL", "model directory"):
        assert form in message
