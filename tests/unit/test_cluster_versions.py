"""The minimum versions of the cluster services, parsed and compared in one place
(``conductor_core/cluster/versions.py``); ``submit`` against a server: test_pipeline_submit.py."""

from __future__ import annotations

import pytest

from conductor_core.cluster.versions import (
    KFP_BACKEND,
    TRAINER,
    check_version,
    parse_version,
)


def test_declared_minimums() -> None:
    assert KFP_BACKEND.minimum == (2, 17, 0)
    assert KFP_BACKEND.minimum_text == "2.17.0"
    assert "OneOf" in KFP_BACKEND.reason
    assert TRAINER.minimum == (2, 2, 0)
    assert "runtimePatches" in TRAINER.reason


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2.14.0", (2, 14, 0)),
        ("v2.14.0", (2, 14, 0)),
        ("2.14", (2, 14, 0)),
        (" 2.16.1\n", (2, 16, 1)),
        ("2.14.0-rc.1", (2, 14, 0)),
        ("2.15.0+build.7", (2, 15, 0)),
        ("1.8.22", (1, 8, 22)),
        ("unknown", None),
        ("master", None),
        ("", None),
        (None, None),
        ("0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c", None),
        ("2", None),
        ("release-2.14", None),
    ],
)
def test_parse_version(text: str | None, expected: tuple[int, int, int] | None) -> None:
    assert parse_version(text) == expected


def test_check_version_outcomes() -> None:
    ok = check_version(KFP_BACKEND, "2.17.0")
    assert ok.known and not ok.too_old and ok.message("at h") == ""
    assert check_version(KFP_BACKEND, "2.16.1").too_old  # resolves a OneOf to its last branch
    assert not check_version(KFP_BACKEND, "2.17.2").too_old

    old = check_version(KFP_BACKEND, "2.5.0")
    assert old.too_old
    message = old.message("at https://kfp.example.com")
    assert message.startswith("Kubeflow Pipelines at https://kfp.example.com is version 2.5.0")
    assert "2.17.0 or newer" in message and "OneOf" in message and "\n" not in message

    unknown = check_version(KFP_BACKEND, "unknown")
    assert not unknown.known and not unknown.too_old
    assert "reports no version ('unknown')" in unknown.message("at h")
    assert "reports no version (nothing)" in check_version(KFP_BACKEND, None).message("at h")


def _compiled(name: str) -> list[dict]:
    import yaml

    from conductor_pipelines.registry import COMPILED_DIR

    return list(yaml.safe_load_all((COMPILED_DIR / f"{name}.yaml").read_text()))


@pytest.mark.parametrize("name", ["training", "evaluation", "curation"])
def test_the_declared_minimum_covers_every_feature_the_compiled_yaml_uses(name) -> None:
    from conductor_core.cluster.versions import BACKEND_FEATURES, backend_features_used

    since = {feature.name: feature.since for feature in BACKEND_FEATURES}
    used = backend_features_used(_compiled(name))
    assert used <= since.keys()
    assert all(since[feature] <= KFP_BACKEND.minimum for feature in used), used


def test_the_feature_reader_finds_what_the_training_pipeline_uses() -> None:
    """Not vacuous: the training pipeline hands models on through an artifact OneOf, collects
    the shards' reports and mounts optional Secrets; a spec without them uses none."""
    from conductor_core.cluster.versions import backend_features_used

    assert backend_features_used(_compiled("training")) == {
        "artifact-oneof",
        "collected-artifacts",
        "optional-secrets",
    }
    single = {"root": {"dag": {"outputs": {"artifacts": {"m": {"artifactSelectors": [{}]}}}}}}
    assert backend_features_used([single]) == set()
