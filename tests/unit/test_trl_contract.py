"""The TRL and transformers versions the training code relies on (pyproject.toml pins them;
these tests fail on a version outside that window):

- the private GRPOTrainer methods the trainers (train/trainers.py) override are the ones listed
  there (``TRL_PRIVATE_OVERRIDES``), each still on GRPOTrainer with a signature the overrides
  accept; importing the rest of ``conductor_core.train`` does not import TRL;
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
# The TRL methods the trainers (train/trainers.py) override


def overridden(*, private: bool) -> dict[str, list[type]]:
    """The ``GRPOTrainer`` methods (private or public ones) that the trainer classes of
    train/trainers.py define, each with the classes that define it."""
    from trl import GRPOTrainer

    from conductor_core.train import trainers

    classes = [
        cls
        for cls in vars(trainers).values()
        if isinstance(cls, type)
        and issubclass(cls, GRPOTrainer)
        and cls.__module__ == trainers.__name__
    ]
    assert classes
    out: dict[str, list[type]] = {}
    for cls in classes:
        for name, member in vars(cls).items():
            if name.startswith("__") or not callable(member) or not hasattr(GRPOTrainer, name):
                continue
            if name.startswith("_") == private:
                out.setdefault(name, []).append(cls)
    return out


def incompatible(override, original) -> list[str]:
    """What the signature of ``override`` fails to accept of the calls ``original``'s signature
    allows: every parameter at the same position under the same name (or a ``*args`` /
    ``**kwargs`` taking it), a default where the original has one and the same default, and no
    required parameter the original does not have. Empty: compatible."""
    kinds = inspect.Parameter
    ours = inspect.signature(override).parameters
    theirs = inspect.signature(original).parameters
    positional = [
        p for p in ours.values() if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)
    ]
    var_args = any(p.kind is kinds.VAR_POSITIONAL for p in ours.values())
    var_kwargs = any(p.kind is kinds.VAR_KEYWORD for p in ours.values())
    problems = []
    for index, param in enumerate(theirs.values()):
        if param.kind is kinds.VAR_POSITIONAL:
            ok = var_args
        elif param.kind is kinds.VAR_KEYWORD:
            ok = var_kwargs
        elif param.kind is kinds.KEYWORD_ONLY:
            mine = ours.get(param.name)
            ok = var_kwargs if mine is None else mine.kind is not kinds.POSITIONAL_ONLY
            if mine is not None and mine.default is not inspect.Parameter.empty:
                ok = ok and mine.default == param.default
        elif index < len(positional):
            mine = positional[index]
            ok = mine.name == param.name
            if mine.default is not inspect.Parameter.empty:
                ok = ok and mine.default == param.default
            elif param.default is not inspect.Parameter.empty:
                ok = False  # TRL may leave it out
        else:
            ok = var_args and (var_kwargs or param.kind is kinds.POSITIONAL_ONLY)
        if not ok:
            problems.append(f"TRL's parameter {param}")
    for param in ours.values():
        required = param.default is inspect.Parameter.empty and param.kind not in (
            kinds.VAR_POSITIONAL,
            kinds.VAR_KEYWORD,
        )
        if required and param.name not in theirs:
            problems.append(f"our required parameter {param.name}")
    return problems


def test_the_private_trl_methods_overridden_are_the_listed_ones():
    """``TRL_PRIVATE_OVERRIDES`` names exactly the private ``GRPOTrainer`` methods the trainers
    override, once each, with a reason."""
    from conductor_core.train.trainers import TRL_PRIVATE_OVERRIDES

    names = [name for name, _ in TRL_PRIVATE_OVERRIDES]
    assert len(names) == len(set(names)), names
    assert all(name.startswith("_") and reason for name, reason in TRL_PRIVATE_OVERRIDES)
    assert sorted(overridden(private=True)) == sorted(names), (
        "list every private TRL method the trainers override in TRL_PRIVATE_OVERRIDES "
        "(conductor_core/train/trainers.py), and only those"
    )


def test_each_listed_private_trl_method_exists_with_a_compatible_signature():
    """Each method of ``TRL_PRIVATE_OVERRIDES`` is on the installed ``GRPOTrainer``, and every
    override of it accepts the calls TRL's signature allows (a failure names the method)."""
    from trl import GRPOTrainer

    from conductor_core.train.trainers import TRL_PRIVATE_OVERRIDES

    found = overridden(private=True)
    problems: dict[str, list[str]] = {}
    for name, _ in TRL_PRIVATE_OVERRIDES:
        original = getattr(GRPOTrainer, name, None)
        if not callable(original):
            problems[name] = ["gone from the installed TRL's GRPOTrainer"]
            continue
        for cls in found.get(name, []):
            for problem in incompatible(vars(cls)[name], original):
                problems.setdefault(name, []).append(f"{cls.__name__} does not accept {problem}")
    assert not problems, problems


def test_public_trl_methods_overridden_keep_compatible_signatures():
    from trl import GRPOTrainer

    public = overridden(private=False)
    assert "compute_loss" in public
    for name, classes in public.items():
        for cls in classes:
            problems = incompatible(vars(cls)[name], getattr(GRPOTrainer, name))
            assert not problems, f"{cls.__name__}.{name} does not accept {problems}"


def test_the_trainers_derive_from_trls_grpo_trainer():
    from trl import GRPOTrainer

    from conductor_core.train.trainers import OfferedGRPOTrainer, RecursiveGRPOTrainer

    assert issubclass(RecursiveGRPOTrainer, OfferedGRPOTrainer)
    assert issubclass(OfferedGRPOTrainer, GRPOTrainer)
