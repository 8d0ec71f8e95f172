"""Curation steps on small lists: config, normalise, dedup, decontamination, mixture, split."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from conductor_core.data.config import (
    CurationConfig,
    DecontaminationConfig,
    DedupConfig,
    MixtureConfig,
    SourceSpec,
    SplitConfig,
    example_config_path,
    load_config,
    parse_config,
)
from conductor_core.data.frame import count_tests, reference_in_choices
from conductor_core.data.mixture import apportion, mix, split
from conductor_core.data.records import SOURCE_KEY
from conductor_core.data.steps import decontaminate, deduplicate, load_sources, normalise
from conductor_core.data.text import clean_text, lsh_bands
from conductor_core.errors import ConfigError
from conductor_core.tasks.problem import Problem, write_jsonl

LONG = (
    "A train leaves the station at nine in the morning travelling at sixty miles per hour "
    "towards a city that lies one hundred and eighty miles away. When does it arrive?"
)


def prob(pid: str, question: str, domain: str = "math", source: str = "s", **kw) -> Problem:
    return Problem(id=pid, source=source, domain=domain, question=question, **kw)


# -- config --------------------------------------------------------------------------------------


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError, match=r"sources\.0.*exactly one of 'benchmark'"):
        parse_config({"sources": [{"benchmark": "math500", "file": "x.jsonl"}]})
    with pytest.raises(ConfigError, match=r"mixture\.target_size"):
        parse_config({"sources": [{"file": "a.jsonl"}], "mixture": {"target_size": 0}})
    with pytest.raises(ConfigError, match="source names must be unique"):
        parse_config({"sources": [{"file": "a/x.jsonl"}, {"file": "b/x.jsonl"}]})
    with pytest.raises(ConfigError, match=r"difficulty.*min_rate must be below max_rate"):
        parse_config(
            {"sources": [{"file": "a.jsonl"}], "difficulty": {"pool": "p.yaml", "min_rate": 1.0}}
        )
    with pytest.raises(ConfigError, match="not found"):
        load_config("/nonexistent/curation.yaml")


def test_config_defaults_resolution_and_yaml_round_trip(tmp_path: Path) -> None:
    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text("sources:\n  - file: data/p.jsonl\n    quota: 3\n", encoding="utf-8")
    cfg = load_config(cfg_file)
    assert cfg.sources[0].name == "p"
    assert cfg.sources[0].file == str(tmp_path / "data" / "p.jsonl")
    assert cfg.output_dir == str(tmp_path / "curated")
    assert cfg.mixture.target_size == 960
    assert cfg.decontamination.n == 13
    again = parse_config(__import__("yaml").safe_load(cfg.to_yaml()))
    assert again == cfg


def test_example_shortcut_loads_bundled_config() -> None:
    cfg = load_config("example")
    assert example_config_path().exists()
    assert all(Path(s.file).exists() for s in cfg.sources if s.file)
    assert {s.name for s in cfg.sources} == {"math", "mcq", "code", "freeform"}


# -- load + normalise ----------------------------------------------------------------------------


def test_load_sources_tags_source_name_and_limit(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    write_jsonl([prob(f"p{i}", f"question number {i}") for i in range(5)], path)
    loaded = load_sources([SourceSpec(name="mine", file=str(path), limit=3)])
    assert [p.id for p in loaded] == ["p0", "p1", "p2"]
    assert all(p.metadata[SOURCE_KEY] == "mine" for p in loaded)


def test_clean_text_nfkc_whitespace_and_superscripts() -> None:
    assert clean_text("  Let  x² = 49\r\n\r\n\r\n\r\nWhat is ｘ?  ") == "Let x^2 = 49\n\nWhat is x?"
    code = "def f():\n    return 1   \n"
    assert clean_text(code, keep_indentation=True) == "def f():\n    return 1"


def test_normalise_strips_and_drops_empty_questions() -> None:
    problems = [
        prob("a", "  What   is\t2+2?  ", reference=" 4 "),
        prob("b", "\u200b \u200b", domain="freeform"),
        prob("c", "mcq?", domain="mcq", choices=[" Yes ", "No"], reference="A"),
    ]
    kept, removed = normalise(problems)
    assert [p.id for p in kept] == ["a", "c"]
    assert kept[0].question == "What is 2+2?" and kept[0].reference == "4"
    assert kept[1].choices == ["Yes", "No"]
    assert [r.id for r in removed] == ["b"]


# -- dedup ---------------------------------------------------------------------------------------


def test_exact_duplicates_ignore_case_punctuation_and_spacing() -> None:
    problems = [
        prob("a", "What is the capital of France?"),
        prob("b", "what is the CAPITAL of  france"),
        prob("c", "What is the capital of France?", domain="freeform"),  # other domain: kept
    ]
    kept, removed = deduplicate(problems, DedupConfig(near=False))
    assert [p.id for p in kept] == ["a", "c"]
    assert removed[0].id == "b" and "exact duplicate of a" in removed[0].reason


def test_mcq_with_same_stem_but_other_choices_is_not_a_duplicate() -> None:
    a = prob("a", "Which is largest?", domain="mcq", choices=["1", "2"], reference="B")
    b = prob("b", "Which is largest?", domain="mcq", choices=["7", "3"], reference="A")
    kept, _ = deduplicate([a, b], DedupConfig(near=False))
    assert len(kept) == 2


def test_near_duplicates_by_jaccard_threshold() -> None:
    near = LONG.replace("When does it arrive?", "At what time does it arrive?")
    other = "Compute the derivative of the function sin(x) times cos(x) with respect to x."
    problems = [prob("a", LONG), prob("b", near), prob("c", other)]
    kept, removed = deduplicate(problems, DedupConfig(exact=False, threshold=0.7))
    assert [p.id for p in kept] == ["a", "c"]
    assert removed[0].id == "b" and "near duplicate of a" in removed[0].reason
    # a stricter threshold keeps both
    kept, removed = deduplicate(problems, DedupConfig(exact=False, threshold=0.99))
    assert len(kept) == 3 and not removed


def test_near_dedup_is_deterministic_and_finds_all_pairs_on_many_items() -> None:
    base = [f"{LONG} Variant number {i} uses the word item{i} only." for i in range(40)]
    problems = [prob(f"p{i}", q) for i, q in enumerate(base)]
    copies = [prob(f"q{i}", q + " Please.") for i, q in enumerate(base)]
    kept1, removed1 = deduplicate(problems + copies, DedupConfig(exact=False, threshold=0.95))
    kept2, _ = deduplicate(problems + copies, DedupConfig(exact=False, threshold=0.95))
    assert {p.id for p in kept1} == {p.id for p in problems}
    assert [p.id for p in kept1] == [p.id for p in kept2]
    assert all(r.id.startswith("q") for r in removed1)


def test_lsh_bands_err_on_recall() -> None:
    bands, rows = lsh_bands(128, 0.8)
    assert bands * rows <= 128
    assert (1 / bands) ** (1 / rows) <= 0.6


# -- decontamination -----------------------------------------------------------------------------


def test_decontaminate_on_13_gram_overlap() -> None:
    eval_q = prob("e1", "Preamble words here. " + LONG, source="evalset")
    # 13 consecutive words of LONG, embedded in another question
    words = LONG.split()
    overlap = " ".join(words[3:16])
    dirty = prob("d", f"Something else entirely, then: {overlap.upper()}!")
    shorter = " ".join(words[3:15])  # only 12 words in common
    clean = prob("c", f"Something else entirely, then: {shorter} and more text after")
    kept, removed = decontaminate([dirty, clean], [eval_q])
    assert [p.id for p in kept] == ["c"]
    assert (
        removed[0].id == "d"
        and "13-gram" in removed[0].reason
        and "evalset:e1" in removed[0].reason
    )


def test_decontaminate_n_is_configurable_and_can_be_disabled() -> None:
    eval_q = prob("e1", "alpha beta gamma delta epsilon zeta eta theta")
    train = prob("t", "one two alpha beta gamma delta three four")
    kept, removed = decontaminate([train], [eval_q], DecontaminationConfig(n=4))
    assert not kept and removed[0].id == "t"
    kept, _ = decontaminate([train], [eval_q], DecontaminationConfig(n=5))
    assert [p.id for p in kept] == ["t"]
    kept, _ = decontaminate([train], [eval_q], DecontaminationConfig(n=4, enabled=False))
    assert [p.id for p in kept] == ["t"]


def test_short_question_contaminated_only_when_equal() -> None:
    eval_q = prob("e1", "What is 2 + 2?")
    kept, removed = decontaminate(
        [prob("same", "what is 2+2"), prob("part", "What is 2?")], [eval_q]
    )
    assert [p.id for p in kept] == ["part"]
    assert removed[0].id == "same"


# -- mixture and split ---------------------------------------------------------------------------


def _pool(counts: dict[str, dict[str, int]]) -> list[Problem]:
    out = []
    for source, by_domain in counts.items():
        for domain, n in by_domain.items():
            for i in range(n):
                p = prob(f"{source}-{domain}-{i:03d}", f"question {source} {domain} {i}", domain)
                out.append(p.model_copy(update={"metadata": {SOURCE_KEY: source}}))
    return out


def test_apportion_respects_caps_and_redistributes() -> None:
    shares = apportion(10, {"a": 1.0, "b": 1.0, "c": 2.0}, {"a": 1, "b": 100, "c": 100})
    assert shares["a"] == 1 and sum(shares.values()) == 10
    assert shares["c"] >= shares["b"]


def test_mix_quotas_weights_and_domain_stratification() -> None:
    problems = _pool({"A": {"math": 50, "code": 50}, "B": {"mcq": 100}, "C": {"freeform": 100}})
    sources = [
        SourceSpec(name="A", file="a.jsonl", quota=20),
        SourceSpec(name="B", file="b.jsonl", weight=3.0),
        SourceSpec(name="C", file="c.jsonl", weight=1.0),
    ]
    kept, removed = mix(problems, MixtureConfig(target_size=60, seed=1), sources)
    assert len(kept) == 60 and len(removed) == len(problems) - 60
    by_source = Counter(p.metadata[SOURCE_KEY] for p in kept)
    assert by_source == {"A": 20, "B": 30, "C": 10}
    by_domain_a = Counter(p.domain.value for p in kept if p.metadata[SOURCE_KEY] == "A")
    assert by_domain_a == {"math": 10, "code": 10}


def test_mix_is_deterministic_for_a_seed_and_varies_with_it() -> None:
    problems = _pool({"A": {"math": 80}, "B": {"mcq": 80}})
    first = [p.id for p in mix(problems, MixtureConfig(target_size=30, seed=7)).kept]
    again = [
        p.id for p in mix(list(reversed(problems)), MixtureConfig(target_size=30, seed=7)).kept
    ]
    other = [p.id for p in mix(problems, MixtureConfig(target_size=30, seed=8)).kept]
    assert first == again
    assert set(first) != set(other)


def test_mix_short_supply_takes_everything_and_quota_caps_at_availability() -> None:
    problems = _pool({"A": {"math": 5}, "B": {"mcq": 3}})
    sources = [SourceSpec(name="A", file="a.jsonl", quota=50)]
    kept, removed = mix(problems, MixtureConfig(target_size=960), sources)
    assert len(kept) == 8 and not removed


def test_split_fraction_stratified_and_tagged() -> None:
    problems = _pool({"A": {"math": 30, "code": 10}})
    train, val = split(problems, SplitConfig(validation_fraction=0.1, seed=3))
    assert len(val) == 4 and len(train) == 36
    assert Counter(p.domain.value for p in val) == {"math": 3, "code": 1}
    assert {p.metadata["split"] for p in val} == {"validation"}
    assert {p.metadata["split"] for p in train} == {"train"}
    _, again_val = split(problems, SplitConfig(validation_fraction=0.1, seed=3))
    assert [p.id for p in again_val] == [p.id for p in val]
    _, none = split(problems, SplitConfig(validation_fraction=0.0))
    assert none == []


# -- derived columns -----------------------------------------------------------------------------


def test_count_tests_shapes() -> None:
    assert count_tests({}) == 0
    assert count_tests({"kind": "stdio", "cases": [{"input": "1", "output": "1"}] * 3}) == 3
    assert count_tests({"kind": "functional", "entry_point": "f", "test_code": "def check"}) == 1
    assert count_tests({"kind": "unittest", "test_code": "", "prompt": "def f():"}) == 0
    assert count_tests({"inputs": ["1", "2"], "outputs": ["1", "2"], "fn_name": "f"}) == 2


def test_reference_in_choices() -> None:
    ok = prob("a", "Pick one", domain="mcq", choices=["x", "y", "z"], reference="c")
    bad = prob("b", "Pick one", domain="mcq", choices=["x", "y"], reference="C")
    assert reference_in_choices(ok) and not reference_in_choices(bad)


def test_curation_config_requires_a_source() -> None:
    with pytest.raises(ConfigError, match="sources"):
        parse_config({"sources": []})
    assert CurationConfig(sources=[SourceSpec(file="x.jsonl")]).split.validation_fraction == 0.1


def test_example_output_goes_to_current_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config("example").output_dir == str(tmp_path / "curated-example")
