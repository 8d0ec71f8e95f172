"""Images in a registry (conductor_core.cluster.images): the commit tag, the digest a push returns,
the push record, and what a compile names from it: every task's image and its pull policy
(compiling against a real push: tests/e2e/test_pipeline_registry.py)."""

from __future__ import annotations

import json

import pytest

from conductor_core.cluster import images

DIGEST = "sha256:" + "0c6d" * 16
OTHER = "sha256:" + "1a2b" * 16


def test_references_by_tag_or_digest_and_their_pull_policy() -> None:
    by_tag = images.reference("base", "127.0.0.1:5000/", tag="0bf1c021ffbb-dirty")
    by_digest = images.reference("train", "registry.example.com/ml", digest=DIGEST)
    assert by_tag == "127.0.0.1:5000/conductor-base:0bf1c021ffbb-dirty"
    assert by_digest == f"registry.example.com/ml/conductor-train@{DIGEST}"
    assert images.pull_policy(by_tag) == "Always"  # a tag may be pushed again
    assert images.pull_policy(by_digest) == "IfNotPresent"  # a digest cannot change
    assert images.kind_of(by_digest) == "train"
    assert images.kind_of("ghcr.io/conductor-platform/conductor-serve:0.1.0") == "serve"
    with pytest.raises(ValueError, match="not one of"):
        images.kind_of("ghcr.io/conductor-platform/other:0.1.0")
    with pytest.raises(ValueError, match="sha256"):
        images.reference("base", "r.example.com", digest="sha256:short")
    with pytest.raises(ValueError, match="not a valid image tag"):
        images.reference("base", "r.example.com", tag="-dirty")


@pytest.mark.parametrize(
    ("ref", "loopback"),
    [
        ("127.0.0.1:5000/conductor-base@" + DIGEST, True),
        ("localhost:5000/conductor-base:abc", True),
        ("127.0.0.2:80/conductor-base:abc", True),
        ("ghcr.io/conductor-platform/conductor-base:0.1.0", False),
        ("registry.example.com:5000/conductor-base:abc", False),
        ("conductor-base:0.1.0", False),  # Docker Hub
        ("localhost.example.com/conductor-base:abc", False),
    ],
)
def test_loopback_registries(ref: str, loopback: bool) -> None:
    assert images.is_loopback(ref) is loopback


def test_the_digest_comes_from_the_push_output() -> None:
    output = (
        "The push refers to repository [127.0.0.1:5000/conductor-base]\n"
        "23daebc37bc1: Pushed\n"
        f"0bf1c021ffbb-dirty: digest: {DIGEST} size: 1375\n"
    )
    assert images.push_digest(output) == DIGEST
    with pytest.raises(ValueError, match="no 'digest"):
        images.push_digest("denied: requested access to the resource is denied\n")


def test_a_push_record_holds_one_registry_and_tag(tmp_path) -> None:
    path = tmp_path / ".images" / images.PUSH_RECORD
    images.record_push(path, "base", "127.0.0.1:5000", "abc123", DIGEST)
    record = images.record_push(path, "serve", "127.0.0.1:5000", "abc123", OTHER)
    assert set(record["images"]) == {"base", "serve"}
    assert json.loads(path.read_text()) == record
    assert record["images"]["base"] == {
        "tag": "127.0.0.1:5000/conductor-base:abc123",
        "digest": DIGEST,
        "reference": f"127.0.0.1:5000/conductor-base@{DIGEST}",
    }
    # another commit: a new record
    record = images.record_push(path, "base", "127.0.0.1:5000", "def456", OTHER)
    assert set(record["images"]) == {"base"} and record["tag"] == "def456"
    assert images.read_push_record(path) == record
    path.write_text('{"registry": "127.0.0.1:5000", "tag": "x", "images": {"gpu": {}}}')
    with pytest.raises(ValueError, match="not a push record"):
        images.read_push_record(path)


def test_pins_name_pushed_kinds_by_digest_and_the_others_by_tag(tmp_path) -> None:
    path = tmp_path / images.PUSH_RECORD
    images.record_push(path, "base", "127.0.0.1:5000", "abc123", DIGEST)
    pins = images.pins(record=path)
    assert pins.references == {
        "base": f"127.0.0.1:5000/conductor-base@{DIGEST}",
        "train": "127.0.0.1:5000/conductor-train:abc123",  # pushed from a GPU host
        "serve": "127.0.0.1:5000/conductor-serve:abc123",
    }
    assert pins.resolve("ghcr.io/conductor-platform/conductor-base:0.1.0").endswith(DIGEST)
    assert pins.policy("ghcr.io/conductor-platform/conductor-train:0.1.0") == "Always"
    tagged = images.pins("registry.example.com/ml", "v1", None)
    assert set(tagged.references.values()) == {
        f"registry.example.com/ml/conductor-{k}:v1" for k in images.KINDS
    }
    assert all(line.endswith("(Always)") for line in tagged.describe())
    with pytest.raises(ValueError, match="registry"):
        images.pins("Bad/UPPER", "v1")


def test_the_rehearsal_pulls_only_from_a_loopback_registry_unless_asked() -> None:
    from conductor_pipeline_runner.containers import pullable

    assert pullable(f"127.0.0.1:5000/conductor-base@{DIGEST}", pull=False)
    assert pullable("localhost:5000/conductor-base:abc", pull=False)
    assert not pullable("ghcr.io/conductor-platform/conductor-base:0.1.0", pull=False)
    assert pullable("ghcr.io/conductor-platform/conductor-base:0.1.0", pull=True)
