"""The TRL and transformers versions the training code relies on (pyproject.toml pins them;
these tests fail on a version outside that window):

- the private GRPOTrainer methods the recursive trainer and the offered-workers recorder
  (train/trainers.py) override keep their signatures;
- the installed versions lie inside the pins, and the ``vllm`` pin inside TRL's vLLM window.

What a real GRPOTrainer does with them: tests/integration/test_trl_trainer_contract.py.
"""

from __future__ import annotations

import inspect
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
GROUP = 4
SCORES = [None, 1.0, 2.0, 4.0, 5.0, None, 1.0, None]
"""Rewards of two groups of GROUP plans (None: the plan could not be scored)."""


# --------------------------------------------------------------------------------------------
# Versions


def extras() -> dict[str, list[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return data["project"]["optional-dependencies"]


def pins(*names: str) -> dict[str, list[Requirement]]:
    """The requirements of the given extras by canonical package name (self-references left out)."""
    out: dict[str, list[Requirement]] = {}
    for extra in names:
        for spec in extras()[extra]:
            req = Requirement(spec)
            if canonicalize_name(req.name) != "conductor-core":
                out.setdefault(canonicalize_name(req.name), []).append(req)
    return out


@pytest.mark.parametrize("package", ["trl", "transformers", "torch"])
def test_installed_versions_are_inside_the_pins(package):
    reqs = pins("local", "train")[package]
    installed = Version(metadata.version(package))
    for req in reqs:
        assert req.specifier, f"{package} is not pinned in pyproject.toml"
        assert req.specifier.contains(installed, prereleases=True), (
            f"{package} {installed} is outside the pin '{req}' in pyproject.toml"
        )


def test_trl_is_pinned_to_one_minor_release():
    """Private methods change within TRL's 1.x (``num_generations`` came in 1.14.1)."""
    (req,) = pins("train")["trl"]
    bounds = {s.operator: Version(s.version) for s in req.specifier}
    assert set(bounds) == {">=", "<"}, req
    low, high = bounds[">="], bounds["<"]
    assert high.release[:2] == (low.major, low.minor + 1), req


def test_vllm_extras_are_inside_trl_window_and_not_in_all():
    window = None
    for spec in metadata.requires("trl") or []:
        req = Requirement(spec)
        if req.name == "vllm" and req.marker and req.marker.evaluate({"extra": "vllm"}):
            window = req.specifier
    assert window is not None, "trl declares no vllm extra"
    (ours,) = pins("vllm")["vllm"]
    bounds = {s.operator: Version(s.version) for s in ours.specifier}
    assert set(bounds) == {">=", "<="}, ours
    assert window.contains(bounds[">="]) and window.contains(bounds["<="]), (
        f"'{ours}' is not inside TRL's supported vLLM window '{window}'"
    )
    assert extras()["gpu"] == ["conductor-core[train,vllm]"]
    everything = " ".join(extras()["all"])
    assert "vllm" not in everything and "gpu" not in everything


# --------------------------------------------------------------------------------------------
# Private methods the recursive trainer overrides


def parameters(func) -> list[tuple[str, object]]:
    return [(p.name, p.default) for p in inspect.signature(func).parameters.values()]


def test_overridden_private_methods_keep_their_signatures():
    from trl import GRPOTrainer

    from conductor_core.train.trainers import OfferedGRPOTrainer, RecursiveGRPOTrainer

    empty = inspect.Parameter.empty
    expected = {
        "_generate_and_score_completions": [("self", empty), ("inputs", empty)],
        "_generate_single_turn": [
            ("self", empty),
            ("prompt_ids", empty),
            ("images", empty),
            ("multimodal_fields", empty),
            ("num_generations", empty),
            ("has_tool_images", False),
        ],
    }
    recursive = RecursiveGRPOTrainer
    for name, params in expected.items():
        assert parameters(getattr(GRPOTrainer, name)) == params, name
        assert parameters(getattr(recursive, name)) == params, name
    # the trainer that records each prompt's offered workers (routing exploration)
    offered = OfferedGRPOTrainer
    assert issubclass(recursive, offered) and issubclass(offered, GRPOTrainer)
    # the offered mask: the log-probabilities it masks and the loss hook that scopes it
    logps = parameters(GRPOTrainer._get_per_token_logps_and_entropies)[:5]
    assert [name for name, _ in logps] == [
        "self",
        "model",
        "input_ids",
        "attention_mask",
        "logits_to_keep",
    ]
    loss = [("self", empty), ("model", empty), ("inputs", empty), ("return_outputs", False)]
    assert parameters(GRPOTrainer.compute_loss)[:4] == loss
    tokenize = [("self", empty), ("prompts", empty)]
    assert parameters(GRPOTrainer._tokenize_prompts) == tokenize
    assert parameters(offered._tokenize_prompts) == tokenize
    assert (
        parameters(offered._generate_and_score_completions)
        == (expected["_generate_and_score_completions"])
    )
