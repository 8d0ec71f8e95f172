"""Print one requirement of a pyproject extra, so that Dockerfiles never repeat a version pin.

Usage (in a Dockerfile, from the build context root)::

    python images/requirement.py local torch      # -> torch==2.13.0

The images install torch on its own first (from PyTorch's CPU or CUDA index, which is the only
way to choose the build), then the library with its extras; this script reads the torch pin from
``pyproject.toml`` so that the two installs cannot disagree. Standard library only (runs before
anything is installed).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement(pyproject: Path, extra: str, package: str) -> str:
    """The requirement string for ``package`` in ``[project.optional-dependencies].<extra>``.

    Raises:
        ValueError: the extra does not exist, or does not list the package (exactly once).
    """
    data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    extras = data.get("project", {}).get("optional-dependencies", {})
    if extra not in extras:
        raise ValueError(f"{pyproject}: no optional-dependencies extra named {extra!r}")
    found = []
    for req in extras[extra]:
        match = _NAME_RE.match(req.strip())
        if match and _canonical(match.group(0)) == _canonical(package):
            found.append(req.strip())
    if len(found) != 1:
        raise ValueError(
            f"{pyproject}: extra {extra!r} lists {package!r} {len(found)} times (expected once)"
        )
    return found[0]


def main(argv: list[str] | None = None) -> int:
    """Command line: ``requirement.py EXTRA PACKAGE [PYPROJECT]``; prints the requirement."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) not in (2, 3):
        print("usage: requirement.py EXTRA PACKAGE [PYPROJECT]", file=sys.stderr)
        return 2
    pyproject = Path(args[2]) if len(args) == 3 else Path("pyproject.toml")
    try:
        print(requirement(pyproject, args[0], args[1]))
    except (ValueError, OSError) as exc:  # TOMLDecodeError is a ValueError
        print(f"requirement.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
