"""Checkpoint storage: a local folder, or ``s3://bucket/prefix`` through boto3.

Training always writes checkpoints locally (the trainer needs a folder); with an S3 location each
saved checkpoint is uploaded, and a run that starts without local checkpoints downloads the latest
one from S3 so that it can resume. ``AWS_*`` and ``AWS_ENDPOINT_URL_S3``/``MLFLOW_S3_ENDPOINT_URL``
configure the client (an S3-compatible server works).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError, require

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def is_s3(uri: str | None) -> bool:
    """True for an ``s3://`` location."""
    return bool(uri) and str(uri).startswith("s3://")


def split_s3(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` -> ``("bucket", "a/b")``."""
    if not is_s3(uri):
        raise ConfigError(f"checkpoint.dir: '{uri}' is not an s3:// location")
    rest = uri[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise ConfigError(f"checkpoint.dir: '{uri}' has no bucket (use s3://bucket/prefix)")
    return bucket, prefix.strip("/")


def s3_client() -> Any:
    """A boto3 S3 client honouring an S3-compatible endpoint from the environment."""
    boto3 = require("boto3", "train", "S3 checkpoints")
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("MLFLOW_S3_ENDPOINT_URL")
    return boto3.client("s3", endpoint_url=endpoint) if endpoint else boto3.client("s3")


def upload_dir(local: str | Path, uri: str, client: Any = None) -> int:
    """Upload every file under ``local`` to ``uri`` (keeping relative paths); returns the count."""
    client = client or s3_client()
    bucket, prefix = split_s3(uri)
    local = Path(local)
    count = 0
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        key = "/".join(x for x in (prefix, path.relative_to(local).as_posix()) if x)
        client.upload_file(str(path), bucket, key)
        count += 1
    return count


def latest_remote_checkpoint(uri: str, client: Any = None) -> str | None:
    """Name of the highest-step ``checkpoint-N`` folder under ``uri`` that is complete."""
    client = client or s3_client()
    bucket, prefix = split_s3(uri)
    base = f"{prefix}/" if prefix else ""
    steps: dict[int, set[str]] = {}
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=base):
        for obj in page.get("Contents", []):
            rel = obj["Key"][len(base) :]
            head, _, tail = rel.partition("/")
            m = _CHECKPOINT.match(head)
            if m:
                steps.setdefault(int(m.group(1)), set()).add(tail)
    complete = [s for s, files in steps.items() if "trainer_state.json" in files]
    return f"checkpoint-{max(complete)}" if complete else None


def download_checkpoint(uri: str, name: str, local_dir: str | Path, client: Any = None) -> Path:
    """Download ``uri/name`` into ``local_dir/name``; returns that folder."""
    client = client or s3_client()
    bucket, prefix = split_s3(uri)
    base = "/".join(x for x in (prefix, name) if x) + "/"
    target = Path(local_dir) / name
    paginator = client.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=base):
        for obj in page.get("Contents", []):
            dest = target / obj["Key"][len(base) :]
            dest.parent.mkdir(parents=True, exist_ok=True)
            client.download_file(bucket, obj["Key"], str(dest))
    return target


def last_local_checkpoint(folder: str | Path) -> Path | None:
    """The highest-step complete ``checkpoint-N`` folder in ``folder``, or None."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    found = []
    for child in folder.iterdir():
        m = _CHECKPOINT.match(child.name)
        if m and child.is_dir() and (child / "trainer_state.json").is_file():
            found.append((int(m.group(1)), child))
    return max(found)[1] if found else None
