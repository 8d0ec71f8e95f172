"""Loading a trained router's weights (RouterDC, MASRouter): tensors only, never code. A weights
file whose unpickling would call something is refused and what it names does not run; every
``torch.load`` of the library and its scripts says ``weights_only=True`` explicitly."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from conductor_core.errors import ConfigError
from conductor_core.evaluate.routers.base import WEIGHTS_FILE, load_router_weights

ROOT = Path(__file__).resolve().parents[2]


class _Payload:
    """Unpickles into a call of ``Path.touch`` on ``marker``: proof that loading ran code."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_router_weights_round_trip_as_tensors(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    torch.save({"head": {"w": torch.ones(2, 3)}, "keys": torch.zeros(4)}, tmp_path / WEIGHTS_FILE)
    state = load_router_weights(tmp_path)
    assert torch.equal(state["head"]["w"], torch.ones(2, 3))
    assert state["keys"].shape == (4,)


def test_a_pickle_payload_in_router_weights_is_refused_and_does_not_run(tmp_path) -> None:
    torch = pytest.importorskip("torch")
    marker = tmp_path / "code-ran"
    torch.save({"head": _Payload(marker)}, tmp_path / WEIGHTS_FILE)
    with pytest.raises(ConfigError, match="refusing to load a weights file") as info:
        load_router_weights(tmp_path)
    assert "\n" not in str(info.value)
    assert not marker.exists()


def _torch_load_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "load"
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "torch"
    ]


def test_every_torch_load_says_weights_only_true() -> None:
    # torch's default changed (False before 2.6): each call states it rather than inherit it.
    files = sorted((ROOT / "conductor_core").rglob("*.py")) + sorted(
        (ROOT / "scripts").glob("*.py")
    )
    calls = [(f, c) for f in files for c in _torch_load_calls(f)]
    assert calls, "no torch.load call found: the scan is broken"
    for file, call in calls:
        flags = {k.arg: k.value for k in call.keywords}
        value = flags.get("weights_only")
        assert isinstance(value, ast.Constant) and value.value is True, (
            f"{file.relative_to(ROOT)}:{call.lineno}: torch.load without weights_only=True"
        )
