"""Code grading without running code: extracting the program from an answer, LiveCodeBench's
comparison rules, the shape of ``tests``, calibration against the prompt, and a failing sandbox
as an infrastructure error (grading in the sandbox: tests/integration/test_grading_code.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conductor_core.tasks.answers import extract_code
from conductor_core.tasks.grading import code as gcode
from conductor_core.tasks.grading import grade, reward
from conductor_core.tasks.grading._driver import call_equal, decode, encode, stdio_equal
from conductor_core.tasks.problem import Problem
from conductor_core.tasks.sandbox import SandboxResult
from conductor_core.tasks.sources import load_benchmark

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks"


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def lcb() -> dict[str, Problem]:
    ps = load_benchmark("livecodebench", path=str(FIX / "livecodebench.jsonl"))
    return {p.id.split("/")[1]: p for p in ps}


# ---------------------------------------------------------------- extraction (no sandbox)


def test_extract_code_prefers_last_python_fence() -> None:
    text = (
        "```text\nnot code\n```\n```python\nx = 1\n```\nthen\n```py\nx = 2\n```\n```bash\nls\n```"
    )
    assert extract_code(text) == "x = 2\n"
    assert extract_code("```\nprint(3)\n```") == "print(3)\n"
    assert extract_code("def f():\n    return 1") == "def f():\n    return 1"
    assert extract_code("```python\ndef f():\n    return 1") == "def f():\n    return 1"
    assert extract_code("I cannot solve this.") is None


def test_lcb_comparison_rules() -> None:
    assert stdio_equal("3\n", "3")[0]
    assert stdio_equal("  1 2 \n3\n\n", "1 2\n3")[0]
    assert stdio_equal("1.50\n", "1.5\n")[0]  # equal as decimals
    assert not stdio_equal("1.5000001\n", "1.5\n")[0]  # LCB has no float tolerance
    assert not stdio_equal("1\n2\n", "1\n")[0]
    assert "line 1" in stdio_equal("yes", "YES")[1]
    assert call_equal((0, 1), [0, 1])
    assert not call_equal([1, 0], [0, 1])


def _across(value: object) -> object:
    """``value`` as the driver gets it from the program process (JSON over a pipe)."""
    return decode(json.loads(json.dumps(encode(value))))


def test_results_cross_to_the_driver_as_plain_values() -> None:
    value = {"a": (1, 2.5, None), 3: [True, b"\x00\xff", {7}], "z": 1 + 2j, "f": frozenset("x")}
    back = _across([value, float("inf"), "text"])
    assert back == [value, float("inf"), "text"]
    assert type(back[0]["a"]) is tuple and type(back[0][3][2]) is set
    assert type(back[0]["f"]) is frozenset and type(back[0][3][1]) is bytes


def test_an_object_equal_to_everything_arrives_as_the_value_it_holds() -> None:
    class Everything(int):
        def __eq__(self, other: object) -> bool:
            return True

        __hash__ = int.__hash__

    class Listy(list):
        def __eq__(self, other: object) -> bool:
            return True

    got = _across([Everything(0), Listy([1])])
    assert got == [0, [1]] and got != [1, [2]]
    assert [type(v) for v in got] == [int, list]
    assert not call_equal(_across(Listy()), [0, 1])
    with pytest.raises(TypeError, match="not plain data"):
        encode(object())


@pytest.mark.parametrize("tree", [{"eval": "1"}, {"tuple": 1}, {"a": 1, "b": 2}, {"set": [[1]]}])
def test_only_encoded_trees_decode(tree: object) -> None:
    with pytest.raises((ValueError, TypeError)):
        decode(tree)


def test_bad_tests_shape_is_named() -> None:
    p = Problem(id="c", source="t", domain="code", question="q", tests={"kind": "stdio"})
    with pytest.raises(gcode.CodeTestsError, match=r"tests\.cases"):
        grade(p, fenced("print(1)"))
    p2 = Problem(id="c", source="t", domain="code", question="q", tests={"kind": "magic"})
    with pytest.raises(gcode.CodeTestsError, match=r"tests\.kind"):
        grade(p2, fenced("print(1)"))


def test_calibration() -> None:
    prompt = "import math\n\ndef f(x):\n    '''doc'''\n"
    assert gcode.calibrate("    return x\n", prompt, "f") == prompt + "    return x\n"
    full = "def f(x):\n    return math.sqrt(x)\n"
    combined = gcode.calibrate(full, prompt, "f")
    assert combined.startswith(prompt.rstrip("\n") + "\n    pass\n") and combined.endswith(full)
    assert gcode.calibrate(full, None, "f") == full


def test_sandbox_failure_is_infra_error(
    monkeypatch: pytest.MonkeyPatch, lcb: dict[str, Problem]
) -> None:
    def broken(code: str, **kwargs: object) -> SandboxResult:
        return SandboxResult("sandbox_error", None, "", "", 0.0, "bwrap failed", ("bwrap",))

    monkeypatch.setattr(gcode, "run_python", broken)
    v = grade(lcb["abc300_a"], fenced("print(3)"))
    assert v.infra_error and not v.correct and "bwrap failed" in v.reason
    assert reward(plan_ok=True, verdict=v) is None
