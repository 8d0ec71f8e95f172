"""Artifact storage for local folders and ``s3://bucket/prefix`` (through boto3, imported lazily).

The S3 endpoint comes from ``MLFLOW_S3_ENDPOINT_URL``, ``AWS_ENDPOINT_URL_S3`` or
``AWS_ENDPOINT_URL`` (in that order), so an S3-compatible server works; credentials come from
boto3's usual chain (environment, profiles, instance roles) and are never logged.

Atomicity: S3 has no rename, so a folder is complete only once its marker file
:data:`COMPLETE_MARKER` exists. :meth:`Storage.upload_dir` removes an old marker, uploads every
file, then writes the marker last; a local upload copies into a hidden temporary folder, writes
the marker there and renames the folder into place. :meth:`Storage.latest_checkpoint` ignores
checkpoints without the marker, so a reader never resumes from a half-written checkpoint.
"""

from __future__ import annotations

import builtins
import fnmatch
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError, require

COMPLETE_MARKER = "_COMPLETE"
"""Written last into an uploaded folder; a folder without it is incomplete."""

_ENDPOINT_ENVS = ("MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL")
_STEP = re.compile(r"(\d+)$")


def is_s3(uri: str | Path) -> bool:
    """True for an ``s3://`` location."""
    return str(uri).startswith("s3://")


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` -> ``("bucket", "a/b")``; a clear error for anything else."""
    if not is_s3(uri):
        raise ConfigError(f"'{uri}' is not an s3:// location (use s3://bucket/prefix)")
    bucket, _, prefix = str(uri)[len("s3://") :].partition("/")
    if not bucket:
        raise ConfigError(f"'{uri}' has no bucket name (use s3://bucket/prefix)")
    return bucket, prefix.strip("/")


def join(uri: str | Path, *parts: str) -> str:
    """``uri`` with ``parts`` appended by ``/`` (local paths and ``s3://`` alike)."""
    if is_s3(uri):
        base = str(uri).rstrip("/")
        return "/".join([base, *(p.strip("/") for p in parts if p.strip("/"))])
    return str(Path(str(uri).removeprefix("file://"), *parts))


def step_of(name: str) -> int | None:
    """The step number a checkpoint name ends with (``checkpoint-120`` -> 120), else None."""
    m = _STEP.search(name.rstrip("/"))
    return int(m.group(1)) if m else None


def endpoint_url() -> str | None:
    """The S3 endpoint from the environment, or None for AWS itself."""
    for name in _ENDPOINT_ENVS:
        value = os.environ.get(name)
        if value:
            return value
    return None


def _local(uri: str | Path) -> Path:
    return Path(str(uri).removeprefix("file://")).expanduser()


def local_target(dest: str | Path, relative: str) -> Path:
    """The local path of a remote key or name ``relative`` (``/``-separated) inside ``dest``.

    Every download that turns a remote key into a local path goes through here: a key is chosen
    by whoever writes the bucket, and ``dest / "../../x"`` climbs out while ``dest / "/abs"``
    replaces ``dest`` altogether (on a shared ``/models`` volume, another model's weights).
    Raises :class:`ConfigError` for an empty, ``.`` or ``..`` part (a leading ``/`` is an empty
    part) or a NUL byte, and for a path that resolves outside ``dest`` (a symlink already there).
    """
    root = Path(dest)
    parts = relative.split("/")
    if "\0" in relative or any(part in ("", ".", "..") for part in parts):
        raise ConfigError(
            f"refusing the remote name {relative!r}: empty, '.' and '..' parts and absolute "
            f"paths would leave {root}"
        )
    target = root.joinpath(*parts)
    # resolve() follows symlinks that already exist under dest (a reused volume).
    if not target.resolve().is_relative_to(root.resolve()):
        raise ConfigError(f"refusing the remote name {relative!r}: it resolves outside {root}")
    return target


class Storage:
    """Copy folders to and from a local folder or S3, and find the latest complete checkpoint.

    Args:
        client: a boto3 S3 client to use (default: one created on first S3 use).
        endpoint: S3 endpoint URL (default :func:`endpoint_url`).
    """

    def __init__(self, client: Any = None, endpoint: str | None = None) -> None:
        self._client = client
        self._endpoint = endpoint

    @property
    def client(self) -> Any:
        """The boto3 S3 client (created on first use)."""
        if self._client is None:
            boto3 = require("boto3", "train", "S3 storage")
            endpoint = self._endpoint or endpoint_url()
            self._client = (
                boto3.client("s3", endpoint_url=endpoint) if endpoint else boto3.client("s3")
            )
        return self._client

    # -- S3 helpers -------------------------------------------------------------------------

    def _s3_call(self, what: str, uri: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run a boto3 call, turning user-fixable failures into one-line :class:`ConfigError`."""
        from botocore.exceptions import (
            ClientError,
            EndpointConnectionError,
            NoCredentialsError,
            PartialCredentialsError,
        )

        try:
            return fn(*args, **kwargs)
        except (NoCredentialsError, PartialCredentialsError) as exc:
            raise ConfigError(
                f"{what} {uri}: no S3 credentials found; set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)"
            ) from exc
        except EndpointConnectionError as exc:
            raise ConfigError(
                f"{what} {uri}: cannot reach the S3 endpoint; check MLFLOW_S3_ENDPOINT_URL / "
                "AWS_ENDPOINT_URL"
            ) from exc
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            if code in ("NoSuchBucket", "404") and "bucket" in str(exc).lower():
                raise ConfigError(
                    f"{what} {uri}: bucket '{split_s3(uri)[0]}' does not exist; create it or "
                    "fix the location"
                ) from exc
            if code in ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "403"):
                raise ConfigError(
                    f"{what} {uri}: access denied ({code}); check the S3 credentials and policy"
                ) from exc
            raise

    def _keys(self, uri: str) -> list[str]:
        """Every object key under the prefix of ``uri`` (as a folder)."""
        bucket, prefix = split_s3(uri)
        base = f"{prefix}/" if prefix else ""
        keys: list[str] = []
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=base)
        for page in self._s3_call("list", uri, list, pages):
            keys.extend(obj["Key"] for obj in page.get("Contents", []))
        return keys

    # -- public API -------------------------------------------------------------------------

    def upload_dir(
        self, local: str | Path, uri: str, *, mark_complete: bool = True, last: str = ""
    ) -> int:
        """Copy every file under ``local`` to ``uri`` (a folder), then write the marker.

        ``last``: the name of a top-level file copied after all the others, for a folder whose
        readers take that file as its completeness marker (a trainer checkpoint's state): a copy
        cut short leaves the folder without it. Returns the number of files copied (the marker
        not counted). ``uri`` may be local.
        """
        src = Path(local)
        if not src.is_dir():
            raise ConfigError(f"upload_dir: {src} is not a folder")
        files = sorted(
            (p for p in src.rglob("*") if p.is_file() and p.name != COMPLETE_MARKER),
            key=lambda p: (p == src / last, p),
        )
        if not is_s3(uri):
            return self._copy_local(src, _local(uri), files, mark_complete)
        bucket, prefix = split_s3(uri)
        marker_key = "/".join(x for x in (prefix, COMPLETE_MARKER) if x)
        self._s3_call("upload to", uri, self.client.delete_object, Bucket=bucket, Key=marker_key)
        for path in files:
            key = "/".join(x for x in (prefix, path.relative_to(src).as_posix()) if x)
            self._s3_call("upload to", uri, self.client.upload_file, str(path), bucket, key)
        if mark_complete:
            self._s3_call(
                "upload to", uri, self.client.put_object, Bucket=bucket, Key=marker_key, Body=b""
            )
        return len(files)

    @staticmethod
    def _copy_local(src: Path, dest: Path, files: builtins.list[Path], mark: bool) -> int:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
        try:
            for path in files:
                target = tmp / path.relative_to(src)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
            if mark:
                (tmp / COMPLETE_MARKER).write_bytes(b"")
            if dest.exists():
                shutil.rmtree(dest)
            os.replace(tmp, dest)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return len(files)

    def download_dir(self, uri: str, local: str | Path) -> Path:
        """Copy the folder ``uri`` (local or S3, marker included) into ``local``; returns it.

        A missing source is a :class:`ConfigError`, and so is an S3 key that would land outside
        ``local`` (:func:`local_target`; nothing is downloaded then).
        """
        dest = Path(local)
        if not is_s3(uri):
            src = _local(uri)
            if not src.is_dir():
                raise ConfigError(f"download_dir: {src} is not a folder")
            shutil.copytree(src, dest, dirs_exist_ok=True)
            return dest
        bucket, prefix = split_s3(uri)
        base = f"{prefix}/" if prefix else ""
        keys = [k for k in self._keys(uri) if not k.endswith("/")]
        if not keys:
            raise ConfigError(f"download_dir: nothing stored under {uri}")
        # Check every key before writing anything: a refused listing leaves no partial copy.
        try:
            targets = {key: local_target(dest, key[len(base) :]) for key in keys}
        except ConfigError as exc:
            raise ConfigError(f"download_dir {uri}: {exc}") from exc
        for key, target in targets.items():
            target.parent.mkdir(parents=True, exist_ok=True)
            self._s3_call("download", uri, self.client.download_file, bucket, key, str(target))
        return dest

    def exists(self, uri: str) -> bool:
        """True when ``uri`` is a file, or a folder holding at least one file."""
        if not is_s3(uri):
            return _local(uri).exists()
        bucket, prefix = split_s3(uri)
        if prefix:
            from botocore.exceptions import ClientError

            try:
                self._s3_call("read", uri, self.client.head_object, Bucket=bucket, Key=prefix)
                return True
            except ClientError as exc:
                if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchKey"):
                    raise
        base = f"{prefix}/" if prefix else ""
        resp = self._s3_call(
            "list", uri, self.client.list_objects_v2, Bucket=bucket, Prefix=base, MaxKeys=1
        )
        return bool(resp.get("Contents"))

    def list(self, uri: str) -> builtins.list[str]:
        """Names of the files and folders directly inside the folder ``uri``, sorted."""
        if not is_s3(uri):
            folder = _local(uri)
            return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []
        bucket, prefix = split_s3(uri)
        base = f"{prefix}/" if prefix else ""
        names: set[str] = set()
        pages = self.client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=base, Delimiter="/"
        )
        for page in self._s3_call("list", uri, builtins.list, pages):
            names.update(
                p["Prefix"][len(base) :].rstrip("/") for p in page.get("CommonPrefixes", [])
            )
            names.update(o["Key"][len(base) :] for o in page.get("Contents", []))
        names.discard("")
        return sorted(names)

    def latest_checkpoint(
        self, uri: str, pattern: str = "checkpoint-*", marker: str | None = COMPLETE_MARKER
    ) -> str | None:
        """The location of the complete checkpoint with the highest step under ``uri``, or None.

        Checkpoints are the folders whose name matches ``pattern`` and ends with a step number
        (ordered by number: ``checkpoint-10`` is after ``checkpoint-9``). A folder counts only
        if it holds ``marker`` (``None``: any non-empty folder; ``"trainer_state.json"`` suits
        folders written directly by a Hugging Face trainer).
        """
        found: builtins.list[tuple[int, str]] = []
        if is_s3(uri):
            _, prefix = split_s3(uri)
            base = f"{prefix}/" if prefix else ""
            contents: dict[str, set[str]] = {}
            for key in self._keys(uri):
                head, _, tail = key[len(base) :].partition("/")
                if tail:
                    contents.setdefault(head, set()).add(tail)
            for name, tails in contents.items():
                step = step_of(name)
                complete = marker is None or marker in tails
                if step is not None and complete and fnmatch.fnmatchcase(name, pattern):
                    found.append((step, name))
        else:
            folder = _local(uri)
            children = folder.iterdir() if folder.is_dir() else iter(())
            for child in children:
                step = step_of(child.name)
                if (
                    step is None
                    or not child.is_dir()
                    or not fnmatch.fnmatchcase(child.name, pattern)
                ):
                    continue
                if (marker is None and any(child.iterdir())) or (
                    marker is not None and (child / marker).is_file()
                ):
                    found.append((step, child.name))
        if not found:
            return None
        return join(uri, max(found)[1])
