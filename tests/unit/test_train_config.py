"""Stage configs: paper defaults, profiles, YAML precedence, clear errors; the CLI's config path."""

from __future__ import annotations

import re
import typing

import pytest
import yaml
from click.testing import CliRunner
from pydantic import BaseModel, ValidationError

from conductor_core.configfiles import parse_sets
from conductor_core.errors import ConfigError
from conductor_core.train import bundled_config_path
from conductor_core.train import config as config_module
from conductor_core.train.config import (
    MOVED_KEYS,
    PROFILES,
    REMOVED_KEYS,
    STAGES,
    ExperimentalSpec,
    StageConfig,
    build_config,
    load_config,
    profile_values,
)


def test_defaults_are_the_papers_numbers():
    c = StageConfig()
    assert (c.questions_per_step, c.plans_per_question, c.steps) == (4, 64, 200)
    assert c.generation.max_completion_length == 1024
    assert c.generation.temperature == 1.0
    assert (c.learning_rate, c.lr_scheduler, c.warmup_ratio, c.beta) == (1e-6, "cosine", 0.03, 0.0)
    assert c.loss_type == "dapo"  # TRL's default; the paper profile selects "grpo"
    assert c.recursive.forced_fraction == 0.5 and c.recursive.first_round_discount == 0.25
    assert c.experimental == ExperimentalSpec()  # the paper has none of the experiments
    assert c.experimental.routing_floor == 0.0 and c.recursive.round2_grammar is False
    assert c.warmup.enabled is False and c.lora.enabled is False
    assert c.generation.vllm_mode == "colocate"


def test_paper_profile_selects_the_paper_loss_and_vllm():
    c = build_config({}, stage="base", profile="paper")
    assert c.loss_type == "grpo"
    assert c.generation.backend == "vllm"
    assert c.completions_per_step == 256
    assert c.accumulation_steps * c.micro_batch == 256


def test_tiny_profile_and_stage_overrides():
    base = build_config({}, stage="base", profile="tiny")
    assert base.model.path == "tiny" and base.device == "cpu"
    assert base.generation.max_completion_length == 64
    assert base.warmup.enabled and base.warmup.prompt_loss
    adaptive = build_config({}, stage="adaptive", profile="tiny")
    assert adaptive.warmup.enabled is False
    assert (adaptive.steps, base.steps) == (160, 150)  # the stage override applies


def test_yaml_overrides_profile_and_cli_overrides_yaml(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"profile": "tiny", "steps": 7, "data": {"max_steps": 3}}))
    c = load_config(path, stage="base")
    assert c.steps == 7 and c.data.max_steps == 3
    assert c.generation.max_completion_length == 64  # from the profile
    c2 = load_config(path, stage="base", overrides={"steps": 9})
    assert c2.steps == 9


def test_unknown_field_error_names_the_field(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("stepz: 3\n")
    with pytest.raises(ConfigError, match="stepz: unknown field"):
        load_config(path)


EXPERIMENT_VALUES = {
    "truncated_is_format_error": "true",
    "routing_floor": "0.25",
    "routing_coverage": "2",
    "recursion_fraction": "0.5",
    "warmup_recursion_fraction": "0.5",
}


@pytest.mark.parametrize(("old", "new"), sorted(MOVED_KEYS.items()))
def test_a_moved_key_names_its_new_home(tmp_path, old, new):
    """An old key in a YAML file, a dict or ``--set`` is refused with its new name; the new one
    takes the value."""
    section, name = old.split(".")
    value = EXPERIMENT_VALUES[name]
    moved = rf"{old} moved to {new}"
    path = tmp_path / "c.yaml"
    path.write_text(f"{section}:\n  {name}: {value}\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: {moved}$"):
        load_config(path, stage="recursive", profile="tiny")
    with pytest.raises(ConfigError, match=rf"^training config: {moved}$"):
        build_config({}, overrides=parse_sets([f"{old}={value}"]))
    sets = [f"{new}={value}"]
    built = build_config({}, overrides=parse_sets(sets)).experimental
    assert getattr(built, new.removeprefix("experimental.")) == yaml.safe_load(value)


def test_moved_and_removed_keys_are_reported_with_other_errors():
    with pytest.raises(ConfigError) as info:
        build_config(
            {
                "reward": {"truncated_is_format_error": True},
                "generation": {"importance_ratio_cap": 2.0},
                "recursive": {"discount_format_errors": False},
                "stepz": 3,
            }
        )
    message = str(info.value)
    assert "reward.truncated_is_format_error moved to experimental.truncated_is_format_error" in (
        message
    )
    assert "generation.importance_ratio_cap was removed (the cap is fixed at 3.0" in message
    assert "recursive.discount_format_errors was removed" in message
    assert "stepz: unknown field" in message
    assert set(REMOVED_KEYS).isdisjoint(StageConfig().flat())
    assert set(MOVED_KEYS).isdisjoint(StageConfig().flat())
    assert set(MOVED_KEYS.values()) <= set(StageConfig().flat())


def test_bad_values_give_one_line_errors(tmp_path):
    with pytest.raises(ConfigError, match="stage: unknown stage"):
        build_config({}, stage="final")
    with pytest.raises(ConfigError, match="profile: unknown profile"):
        build_config({}, profile="huge")
    with pytest.raises(ConfigError, match="micro_batch_size"):
        build_config({"questions_per_step": 2, "plans_per_question": 4, "micro_batch_size": 3})
    with pytest.raises(ConfigError, match="ref_sync_steps needs beta > 0"):
        build_config({"ref_sync_steps": 10})
    with pytest.raises(ConfigError, match="k_max"):
        build_config({"adaptive": {"k_min": 3, "k_max": 2}})
    with pytest.raises(ConfigError, match="file not found"):
        load_config(tmp_path / "missing.yaml")


def test_yaml_round_trip_and_flat_params(tmp_path):
    c = build_config({"steps": 5}, stage="recursive", profile="tiny")
    text = c.to_yaml(tmp_path / "out.yaml")
    again = load_config(tmp_path / "out.yaml")
    assert again == c
    flat = c.flat()
    assert flat["recursive.first_round_discount"] == 0.25
    assert flat["steps"] == 5
    assert "stage: recursive" in text


@pytest.mark.parametrize("stage", ["base", "adaptive", "recursive"])
@pytest.mark.parametrize("profile", ["tiny", "paper"])
def test_bundled_configs_load(stage, profile):
    c = load_config(bundled_config_path(stage), profile=profile)
    assert c.stage == stage
    if stage != "base":
        assert c.init_from


def test_cli_prints_resolved_config_and_reports_errors(tmp_path):
    from conductor_core.cli.train import command
    from conductor_core.configfiles import parse_sets

    assert parse_sets(("a.b=3", "c=x")) == {"a": {"b": 3}, "c": "x"}
    result = CliRunner().invoke(
        command, ["--stage", "adaptive", "--profile", "tiny", "--steps", "3", "--print-config"]
    )
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(result.output)
    assert data["stage"] == "adaptive" and data["steps"] == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text("learning_rate: -1\n")
    result = CliRunner().invoke(command, ["--config", str(bad), "--print-config"])
    assert isinstance(result.exception, ConfigError)
    assert "learning_rate" in str(result.exception)


def test_profiles_are_the_yaml_files():
    from importlib import resources

    folder = resources.files("conductor_core.resources") / "train" / "profiles"
    names = sorted(
        f.name.removesuffix(".yaml") for f in folder.iterdir() if f.name.endswith(".yaml")
    )
    assert list(PROFILES) == names
    assert {"paper", "tiny"} <= set(PROFILES)
    with pytest.raises(ValidationError, match="unknown profile 'huge'"):
        StageConfig(profile="huge")


def test_tiny_recursive_profile_values():
    # The learning test (tests/e2e/test_learning.py) was measured with these values.
    c = build_config({}, stage="recursive", profile="tiny")
    assert (c.questions_per_step, c.plans_per_question, c.steps) == (32, 2, 80)
    assert c.learning_rate == 2e-4 and c.lr_scheduler == "constant"
    assert c.ref_sync_steps == 20  # bench/bench_recursive_seeds.py was measured with it
    assert c.reward.executions_per_plan == 4  # a stage's nested override, not the other stages'
    assert c.loss_type == "grpo" and c.num_iterations == 1
    assert c.recursive.forced_fraction == 1.0 and c.recursive.round2_grammar is True
    assert c.beta == 0.05 and c.experimental.truncated_is_format_error is True
    assert c.warmup.enabled is False  # the expert start teaches both round-2 decisions
    spec = c.expert_start  # bench_recursive_seeds.py measured the stage with these
    assert spec.enabled and (spec.executions, spec.steps, spec.learning_rate) == (16, 400, 3e-4)
    with pytest.raises(ConfigError, match="warmup works in the base and adaptive stages"):
        build_config({"warmup": {"enabled": True}}, stage="recursive", profile="tiny")
    base = build_config({}, stage="base", profile="tiny")
    assert (base.questions_per_step, base.plans_per_question, base.steps) == (16, 4, 150)
    assert base.reward.executions_per_plan == 1
    assert base.learning_rate == 3e-4 and base.experimental.warmup_recursion_fraction == 0.5
    assert base.beta == 0.05 and build_config({}, stage="adaptive", profile="tiny").beta == 0.0
    assert base.loss_type == "dapo"
    # Learning on any pool (docs/training.md, "On other pools"): every base group covers every
    # worker and cut-off plans score 0; the adaptive stage trains the masked policy deployment
    # runs, with a routing floor over the offered workers, and cut-off plans score 0 there too;
    # the recursive stage samples the policy alone.
    assert base.experimental.routing_coverage == base.plans_per_question == 4
    assert base.experimental.truncated_is_format_error is True
    adaptive = build_config({}, stage="adaptive", profile="tiny")
    assert (adaptive.experimental.routing_coverage, adaptive.experimental.routing_floor) == (0, 0.3)
    assert adaptive.adaptive.mask_unoffered is True
    assert adaptive.experimental.truncated_is_format_error is True
    recursive = build_config({}, stage="recursive", profile="tiny")
    exp = recursive.experimental
    assert (exp.routing_coverage, exp.routing_floor) == (0, 0.0)
    assert exp.truncated_is_format_error is True
    for c in (adaptive, recursive):
        assert c.experimental.warmup_recursion_fraction == 0.5
    assert build_config({}, stage="adaptive", profile="paper").adaptive.mask_unoffered is False


@pytest.mark.parametrize("stage", STAGES)
@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_and_stage_validates_and_round_trips(tmp_path, profile, stage):
    values = profile_values(profile, stage)
    assert "stages" not in values
    c = build_config(stage=stage, profile=profile)
    assert (c.stage, c.profile) == (stage, profile)
    c.to_yaml(tmp_path / "out.yaml")
    assert load_config(tmp_path / "out.yaml") == c


def _models(annotation) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models(arg)]


def test_every_config_field_has_a_description():
    models = {
        obj
        for obj in vars(config_module).values()
        if isinstance(obj, type)
        and issubclass(obj, BaseModel)
        and obj.__module__ == config_module.__name__
    }
    todo, seen = [StageConfig, *models], set()
    missing = []
    while todo:
        model = todo.pop()
        if model in seen:
            continue
        seen.add(model)
        for name, info in model.model_fields.items():
            if not (info.description or "").strip():
                missing.append(f"{model.__name__}.{name}")
            todo.extend(_models(info.annotation))
    assert StageConfig in seen and len(seen) > 5
    assert not missing, f"fields without a description: {', '.join(missing)}"


def test_removed_optimizer_field_is_rejected():
    with pytest.raises(ConfigError, match="optimizer: unknown field"):
        build_config({"optimizer": "sgd"})


def test_a_hub_model_id_is_loaded_at_model_revision(tmp_path, monkeypatch) -> None:
    # A model id's weights and tokenizer come from one revision (a commit pins them); a local
    # folder is read as it is.
    import sys
    import types

    from conductor_core.train.grpo import load_model

    calls: list[tuple[str, dict]] = []

    class _Loaded:
        pad_token_id = 0
        chat_template = "{{ messages }}"

        def to(self, device: str) -> None:
            pass

    class _Auto:
        @staticmethod
        def from_pretrained(path: str, **kwargs) -> _Loaded:
            calls.append((path, kwargs))
            return _Loaded()

    fake = types.SimpleNamespace(AutoTokenizer=_Auto, AutoModelForCausalLM=_Auto)
    monkeypatch.setitem(sys.modules, "transformers", fake)
    config = build_config({"model": {"path": "org/model", "revision": "c0ffee" * 6}})
    load_model("org/model", config, "cpu")
    assert [kw.get("revision") for _, kw in calls] == ["c0ffee" * 6] * 2
    calls.clear()
    load_model(str(tmp_path), config, "cpu")
    assert all("revision" not in kw for _, kw in calls) and len(calls) == 2
    with pytest.raises(ConfigError, match=r"model\.revision"):
        build_config({"model": {"revision": ""}})


def test_plan_grammar_sampling_refuses_what_it_cannot_combine_with() -> None:
    base = {"generation": {"plan_grammar": True}}
    assert StageConfig.model_validate(base).generation.plan_grammar
    for extra, named in (
        ({"experimental": {"routing_coverage": 4}}, "routing_coverage"),
        ({"adaptive": {"mask_unoffered": True}}, "mask_unoffered"),
        ({"stage": "recursive"}, "the recursive stage"),
    ):
        with pytest.raises(ValueError, match=named):
            StageConfig.model_validate({**base, **extra})
