"""Checkpoint storage for training: a local folder, or ``s3://bucket/prefix`` through boto3.

Training always writes checkpoints locally (the trainer needs a folder); with an S3 location each
saved checkpoint is uploaded, and a run that starts without local checkpoints downloads the latest
one from S3 so that it can resume. A checkpoint counts as complete when it holds the trainer's
``trainer_state.json``. The copying is :class:`conductor_core.track.storage.Storage`; these are
the training-shaped entry points.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor_core.track.storage import Storage, is_s3, join, local_target, split_s3

TRAINER_STATE = "trainer_state.json"

__all__ = [
    "ResumePoint",
    "download_checkpoint",
    "find_resume_point",
    "is_s3",
    "last_local_checkpoint",
    "latest_remote_checkpoint",
    "s3_client",
    "split_s3",
    "upload_dir",
]


def s3_client() -> Any:
    """A boto3 S3 client honouring an S3-compatible endpoint from the environment."""
    return Storage().client


def upload_dir(local: str | Path, uri: str, client: Any = None) -> int:
    """Upload every file under ``local`` to ``uri`` (keeping relative paths), the trainer's
    state last (it marks a checkpoint complete: an upload cut short is not resumed from);
    returns the count."""
    return Storage(client).upload_dir(local, uri, mark_complete=False, last=TRAINER_STATE)


def latest_remote_checkpoint(uri: str, client: Any = None) -> str | None:
    """Name of the highest-step complete ``checkpoint-N`` folder under ``uri``."""
    found = Storage(client).latest_checkpoint(uri, marker=TRAINER_STATE)
    return None if found is None else found.rstrip("/").rsplit("/", 1)[-1]


def download_checkpoint(uri: str, name: str, local_dir: str | Path, client: Any = None) -> Path:
    """Download ``uri/name`` into ``local_dir/name``; returns that folder.

    ``name`` comes from a bucket listing: a name that leaves ``local_dir`` is a ConfigError.
    """
    return Storage(client).download_dir(join(uri, name), local_target(local_dir, name))


def last_local_checkpoint(folder: str | Path) -> Path | None:
    """The highest-step complete ``checkpoint-N`` folder in ``folder``, or None."""
    found = Storage().latest_checkpoint(str(folder), marker=TRAINER_STATE)
    return None if found is None else Path(found)


@dataclass(frozen=True)
class ResumePoint:
    """Where a stage's checkpoints go and which one it resumes from."""

    local_dir: Path
    """The folder the trainer writes checkpoints to."""
    local: Path | None = None
    """The last complete local checkpoint."""
    remote: str | None = None
    """With an S3 location and no local checkpoint: the latest complete remote one's name."""

    @property
    def exists(self) -> bool:
        """True when there is a checkpoint to resume from."""
        return self.local is not None or self.remote is not None


def find_resume_point(config: Any) -> ResumePoint:
    """The checkpoint folder of a stage config and its resume point (local first, then S3)."""
    uri = config.checkpoint_uri()
    local_dir = config.output_path() / "checkpoints" if is_s3(uri) else Path(uri)
    local = last_local_checkpoint(local_dir) if local_dir.is_dir() else None
    remote = latest_remote_checkpoint(uri) if local is None and is_s3(uri) else None
    return ResumePoint(local_dir=local_dir, local=local, remote=remote)
