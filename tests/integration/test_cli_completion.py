"""The completion scripts ``conductor completion SHELL`` prints work in the shell: bash sources
the script and completes through the installed ``conductor`` command, as a user's shell does."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent
CONDUCTOR = BIN / "conductor"


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def _bash_complete(words: list[str]) -> list[str]:
    """COMPREPLY after bash sourced the script and completed ``words`` (the last being typed)."""
    array = " ".join(f"'{w}'" for w in words)
    script = (
        'eval "$(conductor completion bash)"\n'
        f"COMP_WORDS=({array}); COMP_CWORD={len(words) - 1}; COMPREPLY=()\n"
        "_conductor_completion conductor\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )
    out = subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
        check=True,
    )
    return [line for line in out.stdout.splitlines() if line]


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_bash_completes_through_the_installed_command() -> None:
    assert CONDUCTOR.is_file(), "the project is installed into this venv (pip install -e .)"
    assert _bash_complete(["conductor", "ev"]) == ["eval"]
    stages = _bash_complete(["conductor", "train", "--stage", ""])
    assert stages == ["base", "adaptive", "recursive"]
    assert _bash_complete(["conductor", "pipeline", "run", "cu"]) == ["curation"]


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_every_shell_gets_a_script_that_calls_conductor_back(shell: str) -> None:
    out = subprocess.run(
        [str(CONDUCTOR), "completion", shell],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=True,
    )
    assert f"_CONDUCTOR_COMPLETE={shell}_complete" in out.stdout
    assert "conductor" in out.stdout and out.stderr == ""


def test_zsh_is_answered_with_descriptions() -> None:
    """What the zsh script reads back: value, then description, per completion."""
    out = subprocess.run(
        [str(CONDUCTOR)],
        capture_output=True,
        text=True,
        env={
            **_env(),
            "_CONDUCTOR_COMPLETE": "zsh_complete",
            "COMP_WORDS": "conductor ev",
            "COMP_CWORD": "1",
        },
        timeout=60,
    )
    assert out.returncode == 0
    lines = out.stdout.splitlines()
    assert lines[:3] == ["plain", "eval", "Evaluate on benchmarks with baselines; reports."]
