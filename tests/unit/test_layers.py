"""Layering of the project's packages, read from source (nothing is imported):

* the installed top-level packages are the layers :data:`LAYERS`, each named ``conductor_*``, and
  each imports only the layers below it (anywhere, functions included): ``conductor_core``
  imports none of the KFP side, the components do not import the pipelines, the pipelines do not
  import their runners;
* a component module imports only ``kfp`` (with ``__future__``, ``typing`` and its own package)
  when it is imported, so compiling a pipeline loads neither torch nor MLflow;
* no import cycle among the modules of ``conductor_core``, counting the imports that run when a
  module is imported (module level, class bodies, module-level ``if``/``try``), not those inside
  functions nor in ``if TYPE_CHECKING:`` blocks;
* Kubernetes and Kubeflow (``kubernetes``, ``kfp``) imported only under ``conductor_core/cluster/``;
* TRL imported at import time by ``conductor_core.train.trainers`` only, which no module imports at
  import time (its callers import it inside functions).

These are the rules of the shared ``tools/check_layers.py`` too, which reads the folders
``components/`` and ``pipelines/`` by those names; here they hold for the packages' own names.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE = "conductor_core"
ROOT = Path(__file__).resolve().parents[2]
CLUSTER_ONLY = ("kubernetes", "kfp")
TRAINERS = f"{PACKAGE}.train.trainers"
LAYERS = (PACKAGE, "conductor_components", "conductor_pipelines", "conductor_pipeline_runner")
"""The installed top-level packages, lowest first: each imports only the ones before it."""
COMPONENT_IMPORT_TIME = ("kfp", "__future__", "typing", "conductor_components")
"""What a module of ``conductor_components`` may import when it is imported."""

Edge = tuple[str, str, int]  # (target module, file, line)


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_time_nodes(body: list[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """Import statements that run when the module is imported (not in functions, not under
    ``if TYPE_CHECKING:``)."""
    for node in body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            yield from _import_time_nodes(node.orelse)
        else:
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                children = getattr(node, field, None)
                if isinstance(children, list):
                    stmts = [c for c in children if isinstance(c, ast.stmt)]
                    nested = [c for c in children if not isinstance(c, ast.stmt)]
                    yield from _import_time_nodes(stmts)
                    for child in nested:  # except handlers, match cases
                        yield from _import_time_nodes(getattr(child, "body", []))


def _imported_names(node: ast.Import | ast.ImportFrom, module: str, is_pkg: bool) -> list[str]:
    """Dotted names a statement may load: ``from a import b`` may load ``a`` and ``a.b``."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = module if is_pkg else module.rpartition(".")[0]
        parts = package.split(".")
        head = ".".join(parts[: len(parts) - node.level + 1])
        base = f"{head}.{node.module}" if node.module else head
    else:
        base = node.module or ""
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The deepest module of the package that ``name`` names (``a.b.func`` -> ``a.b``)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> dict[str, dict[str, Edge]]:
    """module -> {imported module: (imported module, file, line)}, import-time edges only.

    An import of one's own ancestor package is left out: that package is always initialised
    first, so it is no cycle of its own."""
    modules = _modules()
    graph: dict[str, dict[str, Edge]] = {m: {} for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        is_pkg = path.name == "__init__.py"
        for node in _import_time_nodes(tree.body):
            for name in _imported_names(node, module, is_pkg):
                target = _resolve(name, modules)
                if target is None or target == module or module.startswith(target + "."):
                    continue
                rel = str(path.relative_to(ROOT))
                graph[module].setdefault(target, (target, rel, node.lineno))
    return graph


def _strongly_connected(graph: dict[str, dict[str, Edge]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components of more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph[child])))
                elif child in on_stack:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return found


def _one_cycle(graph: dict[str, dict[str, Edge]], comp: list[str]) -> list[Edge]:
    """A shortest cycle through ``comp[0]`` inside the component, as edges with file:line."""
    members = set(comp)
    start = comp[0]
    parent: dict[str, tuple[str, Edge]] = {}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w, edge in graph[v].items():
            if w not in members:
                continue
            if w == start:
                path = [edge]
                while v != start:
                    v, e = parent[v]
                    path.append(e)
                return [*reversed(path)]
            if w not in parent:
                parent[w] = (v, edge)
                queue.append(w)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def describe_cycle(graph: dict[str, dict[str, Edge]], comp: list[str]) -> str:
    edges = _one_cycle(graph, comp)
    steps = [f"{comp[0]}"] + [f"  -> {target}  ({file}:{line})" for target, file, line in edges]
    return "import cycle among " + ", ".join(comp) + ":\n" + "\n".join(steps)


def test_no_import_cycle_in_the_package() -> None:
    graph = import_graph()
    assert len(graph) > 50  # the scan found the package
    cycles = [describe_cycle(graph, comp) for comp in _strongly_connected(graph)]
    print("\n\n".join(cycles))
    assert not cycles, "\n\n".join(cycles)


def test_cycle_detection_finds_a_planted_cycle() -> None:
    graph: dict[str, dict[str, Edge]] = {
        "a": {"b": ("b", "a.py", 1)},
        "b": {"c": ("c", "b.py", 2)},
        "c": {"a": ("a", "c.py", 3), "d": ("d", "c.py", 4)},
        "d": {},
    }
    assert _strongly_connected(graph) == [["a", "b", "c"]]
    text = describe_cycle(graph, ["a", "b", "c"])
    assert "-> b  (a.py:1)" in text and "-> a  (c.py:3)" in text
    assert _strongly_connected({"a": {"b": ("b", "a.py", 1)}, "b": {}}) == []


def test_import_time_scan_skips_functions_and_type_checking() -> None:
    tree = ast.parse(
        "import os\n"
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    import hidden\nelse:\n    import shown_else\n"
        "try:\n    import in_try\nexcept ImportError:\n    import in_handler\n"
        "def f():\n    import in_function\n"
        "class C:\n    import in_class\n"
    )
    names = [
        a.name for n in _import_time_nodes(tree.body) if isinstance(n, ast.Import) for a in n.names
    ]
    assert names == ["os", "shown_else", "in_try", "in_handler", "in_class"]


def test_relative_imports_resolve() -> None:
    node = ast.parse("from ..types import X").body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _imported_names(node, "pkg.sub.mod", False) == ["pkg.types", "pkg.types.X"]
    node = ast.parse("from . import mod").body[0]
    assert isinstance(node, ast.ImportFrom)
    assert _imported_names(node, "pkg.sub", True) == ["pkg.sub", "pkg.sub.mod"]


def test_cluster_libraries_only_under_cluster() -> None:
    offenders = []
    for module, path in _modules().items():
        if module == f"{PACKAGE}.cluster" or module.startswith(f"{PACKAGE}.cluster."):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):  # anywhere, functions included
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            for name in names:
                if name.split(".")[0] in CLUSTER_ONLY:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}: imports {name}")
    assert not offenders, "only conductor_core/cluster/ may import these:\n" + "\n".join(offenders)


def test_trl_loads_only_with_the_trainers_module() -> None:
    """Importing any module of the package but train/trainers.py leaves TRL unloaded: only that
    module imports TRL at import time, and no module imports it at import time."""
    importers = set()
    for module, path in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _import_time_nodes(tree.body):
            names = _imported_names(node, module, path.name == "__init__.py")
            if any(name.split(".")[0] == "trl" for name in names):
                importers.add(f"{module} ({path.relative_to(ROOT)}:{node.lineno})")
    assert [i.split(" ")[0] for i in importers] == [TRAINERS], sorted(importers)
    through = [edge for edges in import_graph().values() for edge in edges.values()]
    at_import = [f"{file}:{line}" for target, file, line in through if target == TRAINERS]
    assert not at_import, f"import {TRAINERS} inside functions (it imports TRL): {at_import}"


def _absolute_imports(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """(module, line) of every absolute import in ``tree``, inside functions too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, node.lineno) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            yield node.module, node.lineno


def _layer_imports() -> dict[str, set[str]]:
    """layer -> the other layers its modules import; asserts that each layer's folder exists."""
    found: dict[str, set[str]] = {layer: set() for layer in LAYERS}
    for layer in LAYERS:
        paths = sorted((ROOT / layer).rglob("*.py"))
        assert paths, f"no {layer}/ under {ROOT}"
        for path in paths:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for name, _ in _absolute_imports(tree):
                top = name.split(".")[0]
                if top in LAYERS and top != layer:
                    found[layer].add(top)
    return found


def test_the_layers_are_the_installed_packages_and_their_names_are_the_projects() -> None:
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    assert {pattern.rstrip("*") for pattern in include} == set(LAYERS)
    assert all(layer.startswith("conductor_") for layer in LAYERS)  # no generic top-level name


def test_each_layer_imports_only_the_layers_below_it() -> None:
    offenders = []
    for i, layer in enumerate(LAYERS):
        above = set(LAYERS[i + 1 :])
        for path in sorted((ROOT / layer).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for name, line in _absolute_imports(tree):
                if name.split(".")[0] in above:
                    offenders.append(f"{path.relative_to(ROOT)}:{line}: imports {name}")
    assert not offenders, (
        "imports point down only (" + " <- ".join(LAYERS) + "):\n" + ("\n".join(offenders))
    )
    seen = _layer_imports()  # the scan sees the downward imports that do exist
    assert PACKAGE in seen["conductor_components"]
    assert "conductor_components" in seen["conductor_pipelines"]
    assert "conductor_pipelines" in seen["conductor_pipeline_runner"]


def test_component_modules_import_only_kfp_when_imported() -> None:
    offenders = []
    for path in sorted((ROOT / "conductor_components").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in _import_time_nodes(tree.body):
            if isinstance(node, ast.ImportFrom) and node.level:
                continue  # within the package
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
            )
            for name in names:
                if name.split(".")[0] not in COMPONENT_IMPORT_TIME:
                    rel = path.relative_to(ROOT)
                    offenders.append(f"{rel}:{node.lineno}: imports {name} (import it in the body)")
    assert not offenders, "\n".join(offenders)


def test_no_class_of_train_is_built_inside_a_function() -> None:
    """Trainers and callbacks live at module level, where a reader finds them by name (issue 47)."""
    found = []
    for path in sorted((ROOT / PACKAGE / "train").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = [n.name for n in ast.walk(node) if isinstance(n, ast.ClassDef)]
                found += [f"{path.relative_to(ROOT)}: {node.name} builds {c}" for c in inner]
    assert not found, found
