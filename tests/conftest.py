"""Markers from folders: every test is marked by the folder it lives in, so no test file marks
itself for these (other markers, such as ``slow``, stay on the tests):

* ``tests/unit/`` -> ``unit``;
* ``tests/integration/`` -> ``integration`` (starts real servers on loopback);
* ``tests/e2e/`` -> ``e2e`` (whole commands end to end);
* ``tests/gpu/`` -> ``gpu`` (needs a CUDA device; deselected by default, see ``addopts``).

Select with ``-m``, e.g. ``-m integration`` or ``-m "unit and not slow"`` (``make test-fast``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
FOLDER_MARKERS = {"unit": "unit", "integration": "integration", "e2e": "e2e", "gpu": "gpu"}


def folder_marker(path: Path) -> str | None:
    """The marker of a test file at ``path`` (``None`` outside the known folders)."""
    try:
        folder = Path(path).resolve().relative_to(TESTS_DIR).parts[0]
    except (ValueError, IndexError):
        return None
    return FOLDER_MARKERS.get(folder)


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        name = folder_marker(item.path)
        if name is not None:
            item.add_marker(getattr(pytest.mark, name))
