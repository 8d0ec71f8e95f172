"""The wheel others depend on: built from a copy of the source tree with the project's own build
backend, it carries the version from its one source (``conductor_core.__version__``), the
Apache-2.0 licence text and the ``py.typed`` marker (issue 45 §4)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import conductor_core

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _packages() -> list[str]:
    """The top-level packages pyproject.toml installs (its ``packages.find`` include)."""
    import tomllib

    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return [p.rstrip("*") for p in include["packages"]["find"]["include"]]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    for package in _packages():
        shutil.copytree(ROOT / package, src / package, ignore=skip)
    out = tmp_path_factory.mktemp("dist")
    build = "import sys, setuptools.build_meta as b; print(b.build_wheel(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", build, str(out)],
        cwd=src,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    name = done.stdout.strip().splitlines()[-1]
    with zipfile.ZipFile(out / name) as archive:
        yield archive


def _metadata(wheel: zipfile.ZipFile) -> str:
    (path,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return wheel.read(path).decode()


def test_the_version_comes_from_the_package(wheel) -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and project["dynamic"] == ["version"]  # no second source
    assert f"\nVersion: {conductor_core.__version__}\n" in _metadata(wheel)


def test_the_licence_and_the_type_marker_ship(wheel) -> None:
    names = wheel.namelist()
    assert "License-Expression: Apache-2.0" in _metadata(wheel)
    (licence,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
    assert "Apache License" in wheel.read(licence).decode()
    assert "conductor_core/py.typed" in names
