"""Training data: the synthetic problem set, Conductor prompts per stage, adaptive subsets."""

from __future__ import annotations

from collections import Counter

from conductor_core.simulation.routing_problems import synthetic_problems
from conductor_core.tasks.problem import read_problems
from conductor_core.train.config import build_config
from conductor_core.train.data import build_dataset, build_rows, select_problems
from conductor_core.workers.bundled import bundled_train_pool_path, bundled_train_problems_path
from conductor_core.workers.config import load_pool
from conductor_core.workflow.prompts import compact_prompt


def test_bundled_problems_are_the_regenerated_set():
    bundled = read_problems(bundled_train_problems_path())
    assert bundled == synthetic_problems(200)
    assert len({p.question for p in bundled}) == len(bundled)
    splits = Counter((str(p.domain), p.metadata["split"]) for p in bundled)
    assert splits[("math", "test")] == 40 and splits[("mcq", "train")] == 160


def test_bundled_pool_has_one_best_worker_per_domain():
    from conductor_core.train.reward import best_workers

    pool = load_pool(bundled_train_pool_path())
    assert best_workers(pool) == {"math": 0, "mcq": 1, "freeform": 2}


def test_base_rows_offer_the_full_pool_in_the_compact_prompt():
    problems = select_problems(read_problems(bundled_train_problems_path()), "train", 12)
    config = build_config({}, stage="base", profile="tiny")
    rows = build_rows(problems, 4, config)
    assert len(rows) == 12
    row = rows[0]
    assert row["offered"] == [0, 1, 2, 3]
    assert row["problem_id"] == problems[0].id and row["domain"] == str(problems[0].domain)
    assert row["prompt"] == [{"role": "user", "content": compact_prompt(problems[0].question, 4)}]
    assert row["prompt"][0]["content"].startswith("Models: 0, 1, 2, 3.")


def test_full_prompt_style_uses_the_conductor_prompt():
    problems = select_problems(read_problems(bundled_train_problems_path()), "train", 2)
    config = build_config({"data": {"prompt_style": "full"}}, stage="base")
    content = build_rows(problems, 4, config)[0]["prompt"][0]["content"]
    assert problems[0].question in content
    assert "model_id" in content and "Model 3" in content


def test_adaptive_rows_offer_random_subsets_under_pool_ids_deterministically():
    problems = select_problems(read_problems(bundled_train_problems_path()), "train", 10)
    config = build_config(
        {"steps": 5, "questions_per_step": 4, "adaptive": {"k_min": 2, "k_max": 3}},
        stage="adaptive",
        profile="tiny",
    )
    rows = build_rows(problems, 4, config)
    assert len(rows) >= 20  # enough rows for every step
    sizes = Counter(len(r["offered"]) for r in rows)
    assert set(sizes) <= {2, 3} and len(sizes) == 2
    for r in rows:
        assert len(set(r["offered"])) == len(r["offered"])
        assert all(0 <= i < 4 for i in r["offered"])
        # in pool order, shown under their pool ids (never renumbered 0..k-1)
        assert r["offered"] == sorted(r["offered"])
        models = ", ".join(str(i) for i in r["offered"])
        assert f"Models: {models}." in r["prompt"][0]["content"]
    assert any(r["offered"] != list(range(len(r["offered"]))) for r in rows)
    assert rows == build_rows(problems, 4, config)
    other = build_rows(problems, 4, config.model_copy(update={"seed": 1}))
    assert [r["offered"] for r in rows] != [r["offered"] for r in other]


def test_a_two_of_four_subset_lists_its_models_under_pool_ids():
    from conductor_core.train.data import stage_prompt

    for style, listed in (("compact", "Models: 1, 3."), ("full", "Model 1\nModel 3")):
        config = build_config({"data": {"prompt_style": style}}, stage="adaptive", profile="tiny")
        content = stage_prompt(config, "What is 2+2?", 4, offered=[1, 3])[0]["content"]
        assert listed in content, style


def test_the_shuffle_option_is_gone():
    import pytest

    from conductor_core.errors import ConfigError

    with pytest.raises((ConfigError, ValueError), match="shuffle"):
        build_config({"adaptive": {"shuffle": True}}, stage="adaptive", profile="tiny")


def test_build_dataset_columns():
    problems = select_problems(read_problems(bundled_train_problems_path()), "train", 4)
    config = build_config({}, stage="base", profile="tiny")
    ds = build_dataset(problems, 4, config)
    assert set(ds.column_names) >= {"prompt", "problem_id", "domain", "offered"}
    assert ds[0]["offered"] == [0, 1, 2, 3]


def test_descriptor_mode_shows_descriptions_and_renumbering_hides_pool_ids():
    """Descriptor mode (``data.descriptors``) shows each worker's pool description; with
    ``adaptive.renumber`` the ids are random (0-9), so the description is the only identity, and
    ``workers`` maps each shown id back to its pool id."""
    pool = load_pool(bundled_train_pool_path())
    descriptions = [w.description for w in pool.workers]
    problems = select_problems(read_problems(bundled_train_problems_path()), "train", 10)
    settings = {"steps": 5, "questions_per_step": 4, "data": {"descriptors": True}}
    plain = build_rows(
        problems,
        4,
        build_config(settings, stage="adaptive", profile="tiny"),
        descriptions=descriptions,
    )
    for r in plain:  # pool ids, described
        assert r["workers"] == r["offered"]
        listed = ", ".join(f"{descriptions[i]}: {i}" for i in r["offered"])
        assert f"Models: {listed}." in r["prompt"][0]["content"]
    config = build_config(
        {**settings, "adaptive": {"renumber": True}}, stage="adaptive", profile="tiny"
    )
    rows = build_rows(problems, 4, config, descriptions=descriptions)
    assert rows == build_rows(problems, 4, config, descriptions=descriptions)  # deterministic
    for r in rows:
        assert r["offered"] == sorted(r["offered"]) and all(0 <= i < 10 for i in r["offered"])
        assert sorted(r["workers"]) == sorted(set(r["workers"])) and set(r["workers"]) <= {
            0,
            1,
            2,
            3,
        }
        listed = ", ".join(
            f"{descriptions[w]}: {s}" for s, w in zip(r["offered"], r["workers"], strict=True)
        )
        assert f"Models: {listed}." in r["prompt"][0]["content"]
    math_ids = {s for r in rows for s, w in zip(r["offered"], r["workers"], strict=True) if w == 0}
    assert len(math_ids) >= 4  # the math worker appears under many ids


def test_renumbering_needs_descriptor_mode():
    import pytest

    from conductor_core.errors import ConfigError

    with pytest.raises((ConfigError, ValueError), match=r"renumber needs data\.descriptors"):
        build_config({"adaptive": {"renumber": True}}, stage="adaptive", profile="tiny")
