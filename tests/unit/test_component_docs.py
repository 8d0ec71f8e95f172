"""Every component folder is documented as kubeflow/pipelines-components keeps them: a README
(what it does, its inputs and outputs, the library call it makes, its tests) and a metadata.yaml
in that repository's schema (``scripts/validate_metadata/validate_metadata.py`` there). The
README's tables are checked against the component's signature, so the docs cannot drift."""

from __future__ import annotations

import importlib
import inspect
import re
import tomllib
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from conductor_core.cluster.versions import KFP_BACKEND, TRAINER

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = sorted(p.parent for p in (ROOT / "conductor_components").glob("*/component.py"))
REQUIRED_FIELDS = ["name", "stability", "dependencies", "lastVerified"]
OPTIONAL_FIELDS = ["tags", "ci", "links"]
STABILITY = ("experimental", "alpha", "beta", "stable")
VERSION = re.compile(r"^(>=|<=|==)?\d+\.\d+\.\d+$")
ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| `[^`]+`(?: \(returned\))? \|(?P<rest>.*)$")


def _components(folder: Path) -> list:
    """The components a folder's package exports (the one named like the folder first)."""
    module = importlib.import_module(f"conductor_components.{folder.name}")
    names = sorted(module.__all__, key=lambda n: n != folder.name)
    return [getattr(module, n) for n in names]


def _section(text: str, title: str) -> str:
    match = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no '## {title}' section"
    return match.group(1)


def _rows(text: str, title: str) -> dict[str, str]:
    return {
        m["name"]: m["rest"]
        for line in _section(text, title).splitlines()
        if (m := ROW.match(line))
    }


def _image_repo(component) -> str:
    return component.component_spec.implementation.container.image.rsplit(":", 1)[0]


def test_every_component_is_covered():
    assert {f.name for f in FOLDERS} >= {"check_params", "validate", "gate", "resolve_model"}


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_the_folder_has_a_readme_and_a_metadata_file(folder):
    assert (folder / "README.md").is_file(), f"{folder.name}: README.md missing"
    assert (folder / "metadata.yaml").is_file(), f"{folder.name}: metadata.yaml missing"
    # pipelines-components' validator requires an OWNERS file with approvers in each folder
    owners = yaml.safe_load((folder / "OWNERS").read_text())
    aliases = yaml.safe_load((folder.parents[1] / "OWNERS_ALIASES").read_text())["aliases"]
    assert owners["approvers"] and set(owners["approvers"]) <= set(aliases)


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_metadata_follows_the_pipelines_components_schema(folder):
    meta = yaml.safe_load((folder / "metadata.yaml").read_text())
    keys = [k for k in meta if k not in OPTIONAL_FIELDS]
    assert keys == REQUIRED_FIELDS, f"required fields, in this order: {REQUIRED_FIELDS}"
    assert set(meta) <= {*REQUIRED_FIELDS, *OPTIONAL_FIELDS}
    components = _components(folder)
    assert meta["name"] == folder.name == components[0].python_func.__name__
    assert meta["stability"] in STABILITY
    assert isinstance(meta["lastVerified"], datetime)  # RFC 3339, e.g. 2026-12-03T00:00:00Z

    deps = meta["dependencies"]
    assert set(deps) in ({"kubeflow"}, {"kubeflow", "external_services"})
    every = [*deps["kubeflow"], *(deps.get("external_services") or [])]
    assert all(set(d) == {"name", "version"} and VERSION.match(d["version"]) for d in every)
    kubeflow = {d["name"]: d["version"] for d in deps["kubeflow"]}
    assert kubeflow["Pipelines"] == f">={KFP_BACKEND.minimum_text}"
    inputs = components[0].component_spec.inputs or {}
    if "cluster_settings" in inputs:  # builds a TrainJob from the compile-time settings
        assert kubeflow["Trainer"] == f">={TRAINER.minimum_text}"
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    kfp_pin = next(
        p for p in pyproject["project"]["optional-dependencies"]["pipelines"] if "kfp==" in p
    )
    services = {d["name"]: d["version"] for d in deps.get("external_services") or []}
    assert services["kfp"] == kfp_pin.removeprefix("kfp")

    assert set(meta.get("ci", {})) <= {"skip_dependency_probe"}
    assert all(isinstance(t, str) for t in meta.get("tags", []))
    links = meta["links"]
    assert links["image"] == _image_repo(components[0])
    for variant in components[1:]:
        key = "image_" + variant.component_spec.name.replace("-", "_")
        assert links[key] == _image_repo(variant), key
    for key in ("documentation", "source"):
        assert (ROOT / links[key]).is_file(), links[key]


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_the_readme_lists_every_input_and_output_of_the_signature(folder):
    text = (folder / "README.md").read_text()
    inputs, outputs = _rows(text, "Inputs"), _rows(text, "Outputs")
    for component in _components(folder):
        spec = component.component_spec
        assert set(inputs) == set(spec.inputs or {}), f"{spec.name}: the Inputs table"
        assert set(outputs) == set(spec.outputs or {}), f"{spec.name}: the Outputs table"
        assert f"`{spec.name}`" in text or spec.name == folder.name.replace("_", "-")
    signature = inspect.signature(_components(folder)[0].python_func).parameters
    for name in inputs:
        required = inputs[name].lstrip().startswith("required |")
        assert required == (signature[name].default is inspect.Parameter.empty), name


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: p.name)
def test_the_readme_names_the_library_call_and_the_tests(folder):
    text = (folder / "README.md").read_text()
    call = re.search(r"^\*\*Library call:\*\* `([\w.]+)`", text, re.M)
    assert call, "no '**Library call:** `module.function`' line"
    module, _, func = call.group(1).rpartition(".")
    assert callable(getattr(importlib.import_module(module), func))
    assert func in (folder / "component.py").read_text(), "the component does not call it"
    tests = re.findall(r"`(tests/[\w/]+\.py)`", _section(text, "Tests"))
    own = [t for t in tests if not t.endswith(("test_components.py", "test_component_docs.py"))]
    assert own, "name the tests of this component"
    for path in tests:
        assert (ROOT / path).is_file(), path
