"""Modules moved to clearer names (``conductor_core._deprecated.MOVED``, listed in the CHANGELOG):
each old import path still works for one release, as an alias that re-exports the new module's
public names and warns where it is imported; nothing in the project imports an old path."""

from __future__ import annotations

import ast
import importlib
import sys
import warnings
from pathlib import Path

import pytest

from conductor_core._deprecated import MOVED

ROOT = Path(__file__).resolve().parents[2]
SCANNED = (
    "conductor_core",
    "conductor_components",
    "conductor_pipelines",
    "conductor_pipeline_runner",
    "tests",
    "bench",
    "scripts",
)


def _source(module: str) -> Path:
    path = ROOT.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def _public_names(module: str) -> set[str]:
    """``__all__`` of ``module``, else the public names its source defines at top level."""
    tree = ast.parse(_source(module).read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = [t.id for t in node.targets if isinstance(t, ast.Name)]
            if "__all__" in targets:
                return set(ast.literal_eval(node.value))
            names.update(targets)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_warns_at_the_import_and_re_exports_the_new_module(old, monkeypatch) -> None:
    new = MOVED[old]
    for name in [m for m in sys.modules if m == old or m.startswith(old + ".")]:
        monkeypatch.delitem(sys.modules, name)
    parent = old.rpartition(".")[0]
    if parent in MOVED:  # an alias package: it is imported afresh too
        monkeypatch.delitem(sys.modules, parent, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(f"import {old}", __file__, "exec"), {})
    ours = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    messages = [str(w.message) for w in ours]
    assert any(f"{old} moved to {new}" in m for m in messages), messages
    assert all(w.filename == __file__ for w in ours), [w.filename for w in ours]  # the importer
    alias, moved = sys.modules[old], importlib.import_module(new)
    for name in _public_names(new):
        assert getattr(alias, name) is getattr(moved, name), name


def test_no_project_module_imports_an_old_path() -> None:
    aliases = {_source(old) for old in MOVED}
    found = []
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path in aliases:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
                else:
                    continue
                if any(n in MOVED for n in names):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, "import the new paths (conductor_core._deprecated.MOVED): " + ", ".join(found)
