"""Storage on local folders: copy, listing, completeness markers and latest-checkpoint ordering."""

from __future__ import annotations

import pytest

from conductor_core.errors import ConfigError
from conductor_core.track.storage import (
    COMPLETE_MARKER,
    Storage,
    endpoint_url,
    join,
    local_target,
    split_s3,
    step_of,
)


def _tree(root, files: dict[str, str]):
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_upload_download_round_trip_with_marker(tmp_path):
    src = _tree(tmp_path / "src", {"a.txt": "A", "sub/b.bin": "B"})
    storage = Storage()
    assert storage.upload_dir(src, tmp_path / "dest" / "ckpt") == 2
    dest = tmp_path / "dest" / "ckpt"
    assert (dest / "sub" / "b.bin").read_text() == "B"
    assert (dest / COMPLETE_MARKER).is_file()
    # No temporary folder is left behind.
    assert [p.name for p in (tmp_path / "dest").iterdir()] == ["ckpt"]
    out = storage.download_dir(str(dest), tmp_path / "back")
    assert (out / "a.txt").read_text() == "A"
    assert sorted(storage.list(str(out))) == sorted([COMPLETE_MARKER, "a.txt", "sub"])


def test_upload_replaces_an_existing_folder(tmp_path):
    storage = Storage()
    dest = tmp_path / "d"
    storage.upload_dir(_tree(tmp_path / "v1", {"old.txt": "1"}), dest)
    storage.upload_dir(_tree(tmp_path / "v2", {"new.txt": "2"}), dest)
    assert storage.list(str(dest)) == [COMPLETE_MARKER, "new.txt"]


def test_upload_without_marker_and_missing_source(tmp_path):
    storage = Storage()
    storage.upload_dir(_tree(tmp_path / "s", {"x": "1"}), tmp_path / "d", mark_complete=False)
    assert not (tmp_path / "d" / COMPLETE_MARKER).exists()
    with pytest.raises(ConfigError, match="not a folder"):
        storage.upload_dir(tmp_path / "missing", tmp_path / "d2")
    with pytest.raises(ConfigError, match="not a folder"):
        storage.download_dir(str(tmp_path / "missing"), tmp_path / "d3")


def test_exists_and_list_on_local_paths(tmp_path):
    storage = Storage()
    _tree(tmp_path, {"f.txt": "x"})
    assert storage.exists(str(tmp_path / "f.txt"))
    assert storage.exists(f"file://{tmp_path}")
    assert not storage.exists(str(tmp_path / "nope"))
    assert storage.list(str(tmp_path / "nope")) == []


def _checkpoint(root, name: str, *, marker: bool = True, state: bool = True):
    folder = root / name
    folder.mkdir(parents=True)
    if state:
        (folder / "trainer_state.json").write_text("{}")
    if marker:
        (folder / COMPLETE_MARKER).write_text("")
    return folder


def test_latest_checkpoint_orders_by_step_number(tmp_path):
    for step in (2, 9, 10, 100):
        _checkpoint(tmp_path, f"checkpoint-{step}")
    assert Storage().latest_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-100")


def test_latest_checkpoint_ignores_incomplete_and_unmatched(tmp_path):
    _checkpoint(tmp_path, "checkpoint-5")
    _checkpoint(tmp_path, "checkpoint-50", marker=False)
    _checkpoint(tmp_path, "other-900")
    _checkpoint(tmp_path, "checkpoint-final")
    (tmp_path / "checkpoint-999").write_text("a file, not a folder")
    storage = Storage()
    assert storage.latest_checkpoint(str(tmp_path)) == str(tmp_path / "checkpoint-5")
    # Folders written directly by a Hugging Face trainer: completeness = trainer_state.json.
    assert storage.latest_checkpoint(str(tmp_path), marker="trainer_state.json") == str(
        tmp_path / "checkpoint-50"
    )
    assert storage.latest_checkpoint(str(tmp_path), pattern="other-*") == str(
        tmp_path / "other-900"
    )


def test_latest_checkpoint_none_cases(tmp_path):
    storage = Storage()
    assert storage.latest_checkpoint(str(tmp_path / "missing")) is None
    _checkpoint(tmp_path, "checkpoint-1", marker=False, state=False)
    assert storage.latest_checkpoint(str(tmp_path)) is None
    assert storage.latest_checkpoint(str(tmp_path), marker=None) is None  # empty folder


def test_s3_uri_helpers(monkeypatch):
    assert split_s3("s3://b/a/c/") == ("b", "a/c")
    assert split_s3("s3://b") == ("b", "")
    with pytest.raises(ConfigError, match="no bucket"):
        split_s3("s3:///x")
    with pytest.raises(ConfigError, match="not an s3:// location"):
        split_s3("/tmp/x")
    assert join("s3://b/p/", "checkpoint-1", "") == "s3://b/p/checkpoint-1"
    assert join("/tmp/x", "y") == "/tmp/x/y"
    assert step_of("checkpoint-120") == 120
    assert step_of("checkpoint-final") is None
    for name in ("MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    assert endpoint_url() is None
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://b")
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", "http://a")
    assert endpoint_url() == "http://a"


@pytest.mark.parametrize(
    "name",
    ["../x", "a/../../x", "a/..", "/etc/passwd", "a//b", "./a", "a/.", "", "a/", "a\0b"],
)
def test_local_target_refuses_names_that_leave_the_folder(tmp_path, name):
    with pytest.raises(ConfigError, match="refusing the remote name"):
        local_target(tmp_path / "dest", name)


def test_local_target_keeps_nested_names_inside(tmp_path):
    assert local_target(tmp_path, "a/b/c.bin") == tmp_path / "a" / "b" / "c.bin"
    assert local_target(tmp_path, "..hidden/x..y") == tmp_path / "..hidden" / "x..y"


def test_local_target_refuses_a_symlink_out_of_the_folder(tmp_path):
    # A reused volume may already hold a link pointing elsewhere: writing through it escapes.
    dest = tmp_path / "dest"
    dest.mkdir()
    (tmp_path / "outside").mkdir()
    (dest / "link").symlink_to(tmp_path / "outside")
    with pytest.raises(ConfigError, match="resolves outside"):
        local_target(dest, "link/weights.bin")


def test_download_checkpoint_refuses_a_name_that_leaves_the_folder(tmp_path):
    from conductor_core.train.checkpoints import download_checkpoint

    _checkpoint(tmp_path / "store", "elsewhere")  # what run/../elsewhere names in the store
    (tmp_path / "store" / "run").mkdir()
    with pytest.raises(ConfigError, match="refusing the remote name"):
        download_checkpoint(str(tmp_path / "store" / "run"), "../elsewhere", tmp_path / "dl")
    assert not (tmp_path / "elsewhere").exists()
