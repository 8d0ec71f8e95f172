"""Container image references for the three images built from ``images/`` (one place for all).

Every KFP component (``base_image=``), every TrainJob manifest and the Helm chart take their image
reference from here, so that one release of the library always runs on the images built from the
same source:

* ``base``: CPU image, the library with the ``pipelines``, ``data``, ``train`` (CPU torch) and
  ``providers`` extras: every CPU stage of the pipelines.
* ``train``: CUDA image, the ``gpu`` extra (TRL + vLLM in TRL's window): GPU training.
* ``serve``: the gateway, ``serve`` + ``providers`` extras, no torch.

A reference is ``{registry}/conductor-{kind}:{tag}``. The registry defaults to
:data:`DEFAULT_REGISTRY` and the tag to the package version (``conductor_core.__version__``, with a
PEP 440 local label's ``+`` written as ``-``, since ``+`` is not allowed in an image tag). The
environment overrides both: ``CONDUCTOR_IMAGE_REGISTRY`` (for example a private mirror) and
``CONDUCTOR_IMAGE_TAG`` (for example a CI build's commit). Standard library only: importing this
module never pulls in KFP or Kubernetes.

Images in a registry (``make images REGISTRY=host:port``, docs/pipelines.md): each push is tagged by
the git commit (:func:`commit_tag`) and recorded with the digest the registry returned in a push
record (:func:`record_push`, ``.images/pushed.json``); :class:`ImagePins` (:func:`pins`) is what a
compile takes from it, one reference per kind, by digest where the record has one, and the pull
policy each reference needs (:func:`pull_policy`).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, get_args

from conductor_core import __version__

ImageKind = Literal["base", "train", "serve"]
"""The images built from ``images/<kind>/Dockerfile``."""

KINDS: Final[tuple[str, ...]] = get_args(ImageKind)
DEFAULT_REGISTRY: Final = "ghcr.io/conductor-platform"
REGISTRY_ENV: Final = "CONDUCTOR_IMAGE_REGISTRY"
TAG_ENV: Final = "CONDUCTOR_IMAGE_TAG"
NAME_PREFIX: Final = "conductor-"

# OCI distribution spec: a tag is at most 128 characters of [A-Za-z0-9_.-], not starting with . or -
_TAG_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
# host[:port] then lowercase path components (the grammar of image references, simplified)
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_REGISTRY_RE = re.compile(
    rf"[A-Za-z0-9](?:[A-Za-z0-9.-]*[A-Za-z0-9])?(?::[0-9]+)?(?:/{_PATH_COMPONENT})*"
)


def check_registry(value: str, what: str = "registry") -> str:
    """``value`` without a trailing ``/``, if it is a registry path (host[:port][/path]).

    Raises:
        ValueError: it is not one (the message names ``what``).
    """
    value = value.strip().rstrip("/")
    if not _REGISTRY_RE.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} is not a valid image registry path; use host[:port][/path] with a "
            "lowercase path, e.g. registry.example.com:5000/ml"
        )
    return value


def check_tag(value: str, what: str = "tag") -> str:
    """``value``, if it is a valid image tag.

    Raises:
        ValueError: it is not one (the message names ``what``).
    """
    if not _TAG_RE.fullmatch(value):
        raise ValueError(
            f"{what} {value!r} is not a valid image tag; use at most 128 of [A-Za-z0-9_.-], "
            "not starting with '.' or '-'"
        )
    return value


def default_tag() -> str:
    """The tag of this release's images: the package version with ``+`` written as ``-``."""
    return __version__.replace("+", "-")


def registry() -> str:
    """The registry (and path) images are pulled from: ``$CONDUCTOR_IMAGE_REGISTRY`` or the default.

    Raises:
        ValueError: the override is not a valid registry path (the message names the variable).
    """
    value = os.environ.get(REGISTRY_ENV, "").strip().rstrip("/")
    return check_registry(value, REGISTRY_ENV) if value else DEFAULT_REGISTRY


def tag() -> str:
    """The image tag: ``$CONDUCTOR_IMAGE_TAG`` or :func:`default_tag`.

    Raises:
        ValueError: the override is not a valid image tag (the message names the variable).
    """
    value = os.environ.get(TAG_ENV, "").strip()
    return check_tag(value, TAG_ENV) if value else default_tag()


def image_name(kind: ImageKind) -> str:
    """The repository name of one image, without registry or tag (``conductor-<kind>``)."""
    if kind not in KINDS:
        raise ValueError(f"unknown image kind {kind!r}; expected one of {', '.join(KINDS)}")
    return f"{NAME_PREFIX}{kind}"


def image(kind: ImageKind) -> str:
    """The full reference of one image, read from the environment now.

    >>> image("base")  # doctest: +SKIP
    'ghcr.io/conductor-platform/conductor-base:0.1.0'
    """
    return f"{registry()}/{image_name(kind)}:{tag()}"


# Resolved once, when this module is first imported (component decorators run at import time,
# so this is what compiled pipelines record). Call image() to read the environment again.
BASE_IMAGE: Final[str] = image("base")
TRAIN_IMAGE: Final[str] = image("train")
SERVE_IMAGE: Final[str] = image("serve")


# ---- images in a registry: commit tags, digests, pins --------------------------------------------

DIGEST_RE: Final = re.compile(r"sha256:[0-9a-f]{64}")
PUSH_RECORD: Final = "pushed.json"
"""File name of the push record ``scripts/images.sh --push`` writes under ``.images/``."""
LOOPBACK_HOSTS: Final = frozenset({"127.0.0.1", "localhost", "[::1]"})
PullPolicy = Literal["Always", "IfNotPresent"]
_KIND_RE = re.compile(rf"(?:^|/){re.escape(NAME_PREFIX)}([a-z]+)(?:[:@]|$)")


def reference(kind: ImageKind, registry_path: str, *, tag: str = "", digest: str = "") -> str:
    """``registry/conductor-<kind>`` with ``@digest`` when one is given, else ``:tag``."""
    repository = f"{check_registry(registry_path)}/{image_name(kind)}"
    if digest:
        if not DIGEST_RE.fullmatch(digest):
            raise ValueError(f"{digest!r} is not a sha256 digest (sha256:<64 hex>)")
        return f"{repository}@{digest}"
    return f"{repository}:{check_tag(tag)}"


def kind_of(ref: str) -> ImageKind:
    """The kind of an image reference of this project (``.../conductor-<kind>[:tag|@digest]``).

    Raises:
        ValueError: the reference names no image built from ``images/``.
    """
    match = _KIND_RE.search(ref)
    if not match or match.group(1) not in KINDS:
        raise ValueError(f"{ref!r} is not one of the {', '.join(map(image_name, KINDS))} images")
    return match.group(1)  # type: ignore[return-value]


def registry_host(ref: str) -> str:
    """The registry host[:port] a reference is pulled from (``docker.io`` when it names none:
    the first component is a host only if it has a ``.`` or ``:`` or is ``localhost``)."""
    first, sep, _ = ref.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "docker.io"


def is_loopback(ref: str) -> bool:
    """Whether a reference names a registry on this machine's loopback (127.0.0.1, localhost)."""
    host = registry_host(ref)
    host = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def pull_policy(ref: str) -> PullPolicy:
    """The pull policy a pod needs for ``ref``: ``IfNotPresent`` for a digest (the content
    cannot change under it, so a node's copy is the image), ``Always`` for a tag (a tag may be
    pushed again: without it a node keeps the copy it pulled first)."""
    return "IfNotPresent" if "@sha256:" in ref else "Always"


def commit_tag(root: str | os.PathLike[str] = ".") -> str:
    """The image tag of the source tree at ``root``: its git commit's short sha, with
    ``-dirty`` when the tree has uncommitted changes (tracked or untracked files)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(root), *args], capture_output=True, text=True, check=True
        ).stdout.strip()

    try:
        sha = git("rev-parse", "--short=12", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=normal"))
    except (OSError, subprocess.CalledProcessError) as exc:
        raise ValueError(f"{root}: not a git checkout with a commit ({exc})") from exc
    return f"{sha}-dirty" if dirty else sha


def push_digest(output: str) -> str:
    """The digest ``docker push`` printed for the pushed tag (its ``<tag>: digest: sha256:...
    size: N`` line).

    Raises:
        ValueError: the output has no such line.
    """
    found = re.findall(r"digest: (sha256:[0-9a-f]{64})", output)
    if not found:
        raise ValueError("no 'digest: sha256:...' line in the push output")
    return found[-1]


def record_push(
    path: str | os.PathLike[str], kind: ImageKind, registry_path: str, tag: str, digest: str
) -> dict:
    """Write one pushed image into the push record at ``path`` (JSON) and return the record.

    A record describes one push: one registry and one tag (the commit) for every kind in it. A
    push to another registry or with another tag starts a new record.
    """
    registry_path, tag = check_registry(registry_path), check_tag(tag)
    file = Path(path)
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    if record.get("registry") != registry_path or record.get("tag") != tag:
        record = {"registry": registry_path, "tag": tag, "images": {}}
    record["images"][kind] = {
        "tag": reference(kind, registry_path, tag=tag),
        "digest": digest,
        "reference": reference(kind, registry_path, digest=digest),
    }
    file.parent.mkdir(parents=True, exist_ok=True)
    file.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    return record


def read_push_record(path: str | os.PathLike[str]) -> dict:
    """The push record at ``path``, checked.

    Raises:
        ValueError: no such file, or it is not a push record (the message names the file).
    """
    try:
        record = json.loads(Path(path).read_text(encoding="utf-8"))
        check_registry(record["registry"])
        check_tag(record["tag"])
        for kind, entry in record["images"].items():
            image_name(kind)
            if not DIGEST_RE.fullmatch(entry["digest"]):
                raise ValueError(f"{kind}: {entry['digest']!r} is not a sha256 digest")
    except (OSError, KeyError, TypeError, AttributeError, ValueError) as exc:
        raise ValueError(
            f"{path}: not a push record of `make images REGISTRY=...` ({exc})"
        ) from exc
    return record


@dataclass(frozen=True)
class ImagePins:
    """The image reference of each kind a compile names instead of this release's, with the
    pull policy each needs (:func:`pull_policy`)."""

    references: Mapping[str, str]

    def resolve(self, ref: str) -> str:
        """The pinned reference for a component's image ``ref`` (one of this project's)."""
        return self.references[kind_of(ref)]

    def policy(self, ref: str) -> PullPolicy:
        """The pull policy of the pinned reference for ``ref``."""
        return pull_policy(self.resolve(ref))

    def describe(self) -> list[str]:
        """One line per kind: its reference and pull policy."""
        return [f"{k}: {r} ({pull_policy(r)})" for k, r in sorted(self.references.items())]


def pins(
    registry_path: str | None = None,
    tag_value: str | None = None,
    record: str | os.PathLike[str] | None = None,
) -> ImagePins:
    """What a compile names: every kind in the push record ``record`` by its digest; the other
    kinds (and all of them without a record) as ``registry/conductor-<kind>:tag``, with the
    registry and tag given here, else the record's, else :func:`registry` and :func:`tag`.

    Raises:
        ValueError: an invalid registry, tag or record.
    """
    pushed = read_push_record(record) if record is not None else None
    reg = check_registry(registry_path) if registry_path else None
    tg = check_tag(tag_value) if tag_value else None
    if pushed is not None:
        reg, tg = reg or pushed["registry"], tg or pushed["tag"]
    reg, tg = reg or registry(), tg or tag()
    refs = {kind: reference(kind, reg, tag=tg) for kind in KINDS}  # type: ignore[arg-type]
    if pushed is not None:
        refs.update({kind: entry["reference"] for kind, entry in pushed["images"].items()})
    return ImagePins(refs)


def _main(argv: list[str] | None = None) -> int:
    """``python -m conductor_core.cluster.images commit-tag [ROOT]`` prints the tree's tag;
    ``... record FILE KIND REGISTRY TAG < push-output`` records a push's digest and prints it."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    try:
        if args[:1] == ["commit-tag"] and len(args) <= 2:
            print(commit_tag(args[1] if len(args) == 2 else "."))
            return 0
        if args[:1] == ["record"] and len(args) == 5:
            path, kind, reg, tg = args[1:]
            digest = push_digest(sys.stdin.read())
            entry = record_push(path, kind, reg, tg, digest)["images"][kind]  # type: ignore[arg-type]
            print(entry["reference"])
            return 0
    except ValueError as exc:
        print(f"images: {exc}", file=sys.stderr)
        return 2
    print(_main.__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(_main())
