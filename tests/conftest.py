"""Markers from folders, and the rules every test run enforces.

Every test is marked by the folder it lives in, so no test file marks itself for these (other
markers, such as ``slow``, stay on the tests):

* ``tests/unit/`` -> ``unit``: fast and pure; no process, network socket, SQLAlchemy database or
  ``slow`` marker (``tests/support/purity.py`` checks each unit test);
* ``tests/integration/`` -> ``integration``: starts processes, real servers on loopback, external
  binaries (helm, hadolint, bubblewrap), databases, compilers or short training runs;
* ``tests/e2e/`` -> ``e2e`` (whole commands end to end);
* ``tests/gpu/`` -> ``gpu`` (needs a CUDA device; deselected by default, see ``addopts``).

Select with ``-m``, e.g. ``-m integration`` or ``-m unit`` (``make test-fast``).

No test may leave threads, child processes, listening sockets, an open event loop, changed
environment variables or MLflow state behind (``tests/support/leaks.py``): the fixtures
``leak_baseline`` (session) and ``no_leaks`` (each test) fail the one that does.

``bundled_model`` (session, ``tests/support/bundled_model.py``): the bundled SmolLM2-135M-Instruct
converted once per session into a session folder, which is ``$CONDUCTOR_MODEL_CACHE`` from then on.
"""

from __future__ import annotations

import getpass
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import purity
from tests.support.bundled_model import bundled_model  # noqa: F401 (a session fixture)
from tests.support.leaks import Snapshot, close_process_caches, settled_leaks, snapshot

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
    slow_units = []
    for item in items:
        name = folder_marker(item.path)
        if name is not None:
            item.add_marker(getattr(pytest.mark, name))
        if name == "unit" and item.get_closest_marker("slow") is not None:
            slow_units.append(item.nodeid)
    if slow_units:
        raise pytest.UsageError(
            "unit tests are fast: move these to tests/integration/ or make them fast: "
            + ", ".join(slow_units[:10])
        )
    # Modules that take minutes run first (stable: files keep their order): with make test's
    # `--dist loadfile --no-loadscope-reorder`, xdist hands files out in this order, so the long
    # chains start at once on their own workers instead of ending the run alone.
    items.sort(key=lambda item: item.get_closest_marker("minutes") is None)


# What the library sets process-wide on first use (os.environ.setdefault), set up front so that a
# test is not blamed for it; no MLflow progress bars (their tqdm monitor thread would outlive the
# test that drew one); and one compute thread per process, inherited by the processes tests
# start: `make test` runs one worker per core, and two workers' OpenMP threads spinning on two
# cores made a tiny model's generation 9 times slower (docs/notes/testing.md).
SESSION_ENV = {
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TRL_EXPERIMENTAL_SILENCE": "1",
    "GX_ANALYTICS_ENABLED": "false",
    "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR": "false",
    # torch's own default, which its compiler writes into the environment on first use
    "TORCHINDUCTOR_CACHE_DIR": os.path.join(
        tempfile.gettempdir(), f"torchinductor_{getpass.getuser()}"
    ),
    # The tests' programs are our own fixtures: on a machine where the code sandbox gets no
    # namespaces (no bubblewrap, no user namespaces) they may run under resource limits only,
    # which the sandbox otherwise refuses (docs/sandbox.md). Where bwrap works (CI, setup.sh as
    # root on Debian) this changes nothing; the adversarial suite skips without bwrap.
    "CONDUCTOR_SANDBOX_FALLBACK": "limits-only",
}


def pytest_configure(config: pytest.Config) -> None:
    for key, value in SESSION_ENV.items():
        os.environ.setdefault(key, value)
    # The local MLflow store and runs a test falls back to (conductor_core.track: ./runs by
    # default) go to a folder of this session, never into the checkout.
    if "CONDUCTOR_RUNS_DIR" not in os.environ:
        runs = tempfile.mkdtemp(prefix="conductor-test-runs-")
        os.environ["CONDUCTOR_RUNS_DIR"] = runs
        config.add_cleanup(lambda: shutil.rmtree(runs, ignore_errors=True))
    purity.install()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Watches a unit test, from its setup to its teardown, for what unit tests may not do
    (``tests/support/purity.py``)."""
    purity.watch(item.nodeid if folder_marker(item.path) == "unit" else None)
    try:
        return (yield)
    finally:
        purity.watch(None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    try:
        return (yield)
    finally:
        found = purity.violations() if folder_marker(item.path) == "unit" else []
        if found:
            pytest.fail(
                "a unit test is fast and pure; this one "
                + "; ".join(found)
                + ". Move it to tests/integration/ (tests/support/purity.py).",
                pytrace=False,
            )


@pytest.fixture(scope="session", autouse=True)
def leak_baseline() -> Iterator[Snapshot]:
    """The process state at the start of the session; at its end (after every other fixture is
    torn down) the session must have left nothing running either."""
    before = snapshot()
    yield before
    close_process_caches()
    leaks = settled_leaks(before)
    if leaks:
        pytest.fail("the test session left behind:\n  " + "\n  ".join(leaks), pytrace=False)


@pytest.fixture(autouse=True)
def no_leaks(leak_baseline: Snapshot) -> Iterator[None]:
    """Fails a test that leaves threads, child processes, listening sockets, an open event loop,
    changed environment variables or MLflow state behind (``tests/support/leaks.py``). Set up
    before the test's other function-scoped fixtures and torn down after them; what higher-scoped
    fixtures started is already in the snapshot."""
    before = snapshot()
    yield
    close_process_caches()
    leaks = settled_leaks(before)
    if leaks:
        pytest.fail("the test left behind:\n  " + "\n  ".join(leaks), pytrace=False)
