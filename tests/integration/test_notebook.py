"""The example notebook (``notebooks/quickstart.ipynb``) runs top to bottom in a real Jupyter kernel
(nbclient, ipykernel): no cell errors, its plot renders as an image, and it solves, grades and
evaluates on the embedded default. And ``import conductor_core`` (the API's names included)
loads no heavy dependency in a fresh interpreter."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "quickstart.ipynb"
HEAVY = (
    "torch",
    "transformers",
    "trl",
    "mlflow",
    "kfp",
    "pandas",
    "matplotlib",
    "great_expectations",
    "openai",
    "httpx",
    "pydantic",
)


def test_quickstart_notebook_runs_and_renders_its_plot(tmp_path: Path) -> None:
    nbclient = pytest.importorskip("nbclient", reason="the dev extra (nbclient) is not installed")
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), (
        "commit the notebook without outputs"
    )
    started = time.monotonic()
    client = nbclient.NotebookClient(
        nb,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(tmp_path)}},  # the kernel's working directory
    )
    # raises CellExecutionError, naming the cell, when one fails; asyncio.run leaves no loop set
    asyncio.run(client.async_execute())
    seconds = time.monotonic() - started

    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1 and len(images[0]["data"]["image/png"]) > 1000
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "answer:" in text and "right: True" in text
    assert "conductor:scripted" in text and "moa:1" in text and "single:sim-generalist" in text
    assert (tmp_path / "runs" / "quickstart" / "report.md").is_file()
    assert seconds < 60, f"the notebook took {seconds:.0f} s"


def test_import_conductor_core_loads_no_heavy_dependency() -> None:
    code = (
        "import sys, json; import conductor_core; from conductor_core import Conductor; "
        "import conductor_core.api; "
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert json.loads(out.stdout) == []
