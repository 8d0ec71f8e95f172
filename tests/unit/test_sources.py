"""Benchmark loaders on fixtures written in each dataset's published schema."""

from __future__ import annotations

import base64
import json
import pickle
import sys
import zlib
from pathlib import Path

import pytest

from conductor_core.errors import ConductorError
from conductor_core.tasks.problem import Domain, read_jsonl, write_jsonl
from conductor_core.tasks.sources import BENCHMARKS, INFO, load_benchmark
from conductor_core.tasks.sources._io import BenchmarkSourceError, pick_latest_split
from conductor_core.tasks.sources.code_sources import LCB_VERSIONS, lcb_window
from conductor_core.tasks.sources.lcb_decode import (
    TestCaseDecodeError,
    UnsafePickleError,
    decode_test_cases,
    encode_private_test_cases,
    restricted_loads,
)

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "benchmarks"


@pytest.fixture(autouse=True)
def _offline(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")


def test_registry_has_every_benchmark_of_the_issue() -> None:
    want = {
        "math",
        "math500",
        "mmlu",
        "rlpr",
        "livecodebench",
        "aime2024",
        "aime2025",
        "gpqa_diamond",
        "bigcodebench",
        "humaneval",
        "gsm8k",
    }
    assert set(BENCHMARKS) == want == set(INFO)


def test_math_reference_is_last_boxed_and_unboxed_rows_are_skipped() -> None:
    ps = load_benchmark("math", path=str(FIX / "math.jsonl"))
    assert [p.reference for p in ps] == ["55", "\\frac{3}{4}", "2"]
    assert all(p.domain == Domain.MATH and p.source == "math" for p in ps)
    assert ps[0].metadata["level"] == "Level 1" and ps[0].metadata["subject"] == "Algebra"
    # ids are content hashes: stable across loads and unique
    again = load_benchmark("math", path=str(FIX / "math.jsonl"))
    assert [p.id for p in ps] == [p.id for p in again]
    assert len({p.id for p in ps}) == 3


def test_math500_uses_unique_id_and_answer() -> None:
    ps = load_benchmark("math500", path=str(FIX / "math500.jsonl"), limit=2)
    assert len(ps) == 2
    assert ps[0].id == "math500/test/precalculus/807.json"
    assert ps[0].reference == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert ps[0].metadata["subject"] == "Precalculus" and ps[0].metadata["level"] == 2


def test_mmlu_parquet_letters_and_formatted_choices() -> None:
    ps = load_benchmark("mmlu", path=str(FIX / "mmlu.parquet"))
    assert [p.reference for p in ps] == ["B", "B", "C"]
    assert ps[0].choices == ["Berlin", "Paris", "Rome", "Madrid"]
    assert "B. Paris" in ps[0].question and ps[0].question.startswith("What is the capital")
    only = load_benchmark("mmlu", path=str(FIX / "mmlu.parquet"), subject="biology")
    assert len(only) == 1 and only[0].reference == "C"


def test_gpqa_shuffle_is_deterministic_and_reference_follows_correct_answer() -> None:
    a = load_benchmark("gpqa_diamond", path=str(FIX / "gpqa_diamond.jsonl"))
    b = load_benchmark("gpqa_diamond", path=str(FIX / "gpqa_diamond.jsonl"))
    assert [p.choices for p in a] == [p.choices for p in b]
    rows = [json.loads(line) for line in (FIX / "gpqa_diamond.jsonl").read_text().splitlines()]
    for p, row in zip(a, rows, strict=True):
        idx = "ABCD".index(p.reference)
        assert p.choices[idx] == row["Correct Answer"]
        assert sorted(p.choices) == sorted(
            [row["Correct Answer"]] + [row[f"Incorrect Answer {k}"] for k in (1, 2, 3)]
        )
    # the correct answer is not always first (the shuffle actually happens)
    assert {p.reference for p in a} != {"A"}


def test_aime_both_schemas_and_gsm8k_answer_after_hashes() -> None:
    a24 = load_benchmark("aime2024", path=str(FIX / "aime2024.jsonl"))
    assert [(p.id, p.reference) for p in a24] == [
        ("aime2024/2024-I-1", "42"),
        ("aime2024/2024-II-4", "99"),
    ]
    a25 = load_benchmark("aime2025", path=str(FIX / "aime2025.jsonl"))
    assert [p.reference for p in a25] == ["24", "27"] and a25[0].metadata["year"] == 2025
    gsm = load_benchmark("gsm8k", path=str(FIX / "gsm8k.jsonl"))
    assert [p.reference for p in gsm] == ["5", "2400", "9"]


def test_rlpr_takes_last_user_message_and_ground_truth() -> None:
    ps = load_benchmark("rlpr", path=str(FIX / "rlpr.parquet"))
    assert ps[0].question == "What is the chemical symbol of sodium?"
    assert ps[0].reference == "Na" and ps[0].id == "rlpr/17"
    assert ps[0].domain == Domain.FREEFORM


def test_livecodebench_versions_windows_and_decoded_private_tests() -> None:
    path = str(FIX / "livecodebench.jsonl")
    everything = load_benchmark("livecodebench", path=path)
    assert len(everything) == 4
    v1 = load_benchmark("livecodebench", path=path, version="v1")
    assert [p.id for p in v1] == ["livecodebench/abc300_a", "livecodebench/1"]
    stdio, call = v1
    assert stdio.tests["kind"] == "stdio"
    assert stdio.tests["cases"] == [
        {"input": "1 2\n", "output": "3\n"},
        {"input": "10 20\n", "output": "30\n"},
        {"input": "-5 5\n", "output": "0\n"},
    ]
    assert call.tests["kind"] == "call" and call.tests["func_name"] == "twoSum"
    assert len(call.tests["cases"]) == 3 and "class Solution" in call.question
    assert call.metadata["release_date"] == "2024-02-03" and call.metadata["n_public_tests"] == 1
    v5 = load_benchmark("livecodebench", path=path, version="v5")
    assert len(v5) == 3
    v6_new = load_benchmark("livecodebench", path=path, version="v6", only_new=True)
    assert [p.id for p in v6_new] == ["livecodebench/2050A"]
    window = load_benchmark("livecodebench", path=path, start="2024-01-01", end="2024-12-31")
    assert [p.id for p in window] == ["livecodebench/1", "livecodebench/abc380_b"]
    public_only = load_benchmark("livecodebench", path=path, version="v1", include_private=False)
    assert len(public_only[0].tests["cases"]) == 1


def test_lcb_version_windows_match_the_published_releases() -> None:
    assert LCB_VERSIONS["v1"] == ("2023-05-01", "2024-03-31")
    assert LCB_VERSIONS["v6"][1] == "2025-04-30"
    lo, hi = lcb_window("v6", only_new=True)
    assert (lo.isoformat(), hi.isoformat()) == ("2025-02-01", "2025-04-30")
    lo, hi = lcb_window("release_v2", only_new=True)
    assert lo.isoformat() == "2024-04-01"
    with pytest.raises(ConductorError, match="unknown version 'v9'"):
        lcb_window("v9")
    with pytest.raises(ConductorError, match="only_new needs a version"):
        lcb_window(None, only_new=True)


def test_malicious_pickle_is_refused_without_running() -> None:
    with pytest.raises(UnsafePickleError, match=r"posix\.system|os\.system"):
        load_benchmark("livecodebench", path=str(FIX / "livecodebench_malicious.jsonl"))


def test_restricted_unpickler_round_trip_and_rejections() -> None:
    cases = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert decode_test_cases(encode_private_test_cases(cases)) == cases
    assert decode_test_cases(json.dumps(cases)) == cases
    assert restricted_loads(pickle.dumps({"a": (1, 2.5, b"x", None, True)})) == {
        "a": (1, 2.5, b"x", None, True)
    }
    with pytest.raises(UnsafePickleError, match=r"builtins\.eval"):
        restricted_loads(b"cbuiltins\neval\n(S'1+1'\ntR.")
    with pytest.raises(UnsafePickleError, match="not plain data"):
        restricted_loads(pickle.dumps({1, 2}, protocol=4))
    with pytest.raises(TestCaseDecodeError):
        decode_test_cases("!!! not base64 nor json")
    blob = base64.b64encode(zlib.compress(pickle.dumps(json.dumps({"no": "list"})))).decode()
    with pytest.raises(TestCaseDecodeError, match="list of objects"):
        decode_test_cases(blob)


def test_bigcodebench_complete_and_instruct() -> None:
    path = str(FIX / "bigcodebench.jsonl")
    ps = load_benchmark("bigcodebench", path=path)
    assert ps[0].id == "bigcodebench/BigCodeBench/0" and ps[0].tests["kind"] == "unittest"
    assert "def task_func(xs):" in ps[0].question and ps[0].metadata["subset"] == "hard"
    assert ps[1].metadata["libs"] == ["collections"]
    inst = load_benchmark("bigcodebench", path=path, split="instruct", subset="full")
    assert inst[0].question.startswith("Write task_func(xs)")
    with pytest.raises(ConductorError, match="complete' or 'instruct"):
        load_benchmark("bigcodebench", path=path, split="bogus")


def test_humaneval_offline_164_problems() -> None:
    ps = load_benchmark("humaneval")
    assert len(ps) == 164
    p = ps[0]
    assert p.id == "HumanEval/0" and p.tests["entry_point"] == "has_close_elements"
    assert "def check(candidate)" in p.tests["test_code"]
    assert p.reference.startswith(p.tests["prompt"])
    assert len(load_benchmark("humaneval", limit=5)) == 5


def test_missing_source_gives_one_clear_message(tmp_path: Path) -> None:
    with pytest.raises(BenchmarkSourceError) as err:
        load_benchmark("math500", path=str(tmp_path / "nope.jsonl"))
    assert "--path" in str(err.value) and "\n" not in str(err.value)
    empty = tmp_path / "empty_dir"
    empty.mkdir()
    with pytest.raises(BenchmarkSourceError, match=r"no \.jsonl"):
        load_benchmark("math500", path=str(empty))


def test_hub_failure_names_what_is_missing_and_the_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import conductor_core.tasks.sources._io as io_mod

    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE")
    monkeypatch.setattr(io_mod, "hub_reachable", lambda timeout_s=3.0: False)
    with pytest.raises(BenchmarkSourceError) as err:
        load_benchmark("gpqa_diamond")
    msg = str(err.value)
    assert "Idavidrein/gpqa" in msg and "hub is unreachable" in msg
    assert "--path" in msg and "Correct Answer" in msg


def test_wrong_columns_are_named(tmp_path: Path) -> None:
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps({"question": "q", "answer": "1"}) + "\n")
    with pytest.raises(BenchmarkSourceError, match="lacks column 'problem'"):
        load_benchmark("math500", path=str(f))


def test_directory_with_split_files_and_unknown_options(tmp_path: Path) -> None:
    rows = (FIX / "gsm8k.jsonl").read_text().splitlines()
    (tmp_path / "train.jsonl").write_text(rows[0] + "\n")
    (tmp_path / "test.jsonl").write_text("\n".join(rows[1:]) + "\n")
    assert len(load_benchmark("gsm8k", path=str(tmp_path), split="test")) == 2
    assert len(load_benchmark("gsm8k", path=str(tmp_path))) == 3
    with pytest.raises(ConductorError, match="does not take option"):
        load_benchmark("gsm8k", path=str(tmp_path), version="v1")
    with pytest.raises(ConductorError, match="unknown benchmark"):
        load_benchmark("nope")
    assert load_benchmark("LCB", path=str(FIX / "livecodebench.jsonl"), limit=1)[0].source == (
        "livecodebench"
    )


def test_export_round_trip(tmp_path: Path) -> None:
    ps = load_benchmark("livecodebench", path=str(FIX / "livecodebench.jsonl"))
    out = tmp_path / "lcb.jsonl"
    assert write_jsonl(ps, out) == 4
    assert read_jsonl(out) == ps


def test_pick_latest_split() -> None:
    assert pick_latest_split(["v0.1.0", "v0.1.10", "v0.1.4"]) == "v0.1.10"


def test_row_that_does_not_fit_is_one_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "m.jsonl"
    row = {"problem": "", "answer": "1", "unique_id": "u1"}  # empty question
    f.write_text(json.dumps(row) + "\n")
    with pytest.raises(BenchmarkSourceError, match="does not fit the expected schema"):
        load_benchmark("math500", path=str(f))
    lcb_row = json.loads((FIX / "livecodebench.jsonl").read_text().splitlines()[0])
    lcb_row["metadata"] = "{not json"
    g = tmp_path / "l.jsonl"
    g.write_text(json.dumps(lcb_row) + "\n")
    with pytest.raises(BenchmarkSourceError, match="livecodebench"):
        load_benchmark("livecodebench", path=str(g))


class _FakeDatasets:
    """Stands in for the ``datasets`` package: records each load_dataset call, returns ``rows``."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows
        self.calls: list[tuple[tuple, dict]] = []

    def load_dataset(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        rows = self.rows

        class _Split:
            def to_list(self) -> list[dict]:
                return rows

        return _Split()


def test_hub_datasets_are_read_at_the_given_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    # hf_revision pins what is read of the hub repository (a commit, not the moving main branch).
    fake = _FakeDatasets([{"question": "1+1?", "answer": "so #### 2"}])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    (problem,) = load_benchmark("gsm8k", hf_revision="0123abcd" * 5)
    assert problem.reference == "2"
    assert fake.calls == [(("openai/gsm8k", "main"), {"split": "test", "revision": "0123abcd" * 5})]


def test_hub_raw_files_name_the_revision_in_their_path(monkeypatch: pytest.MonkeyPatch) -> None:
    from conductor_core.tasks.sources._io import HubRef, hub_override, read_hub

    fake = _FakeDatasets([{"x": 1}])
    monkeypatch.setitem(sys.modules, "datasets", fake)
    default = HubRef("org/repo", None, "train", data_files=("a.jsonl",))
    assert read_hub(hub_override(default, {"hf_revision": "abc"}), "b", None, "x") == [{"x": 1}]
    assert fake.calls[0][1]["data_files"] == ["hf://datasets/org/repo@abc/a.jsonl"]
