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
"""

from __future__ import annotations

import os
import re
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


def default_tag() -> str:
    """The tag of this release's images: the package version with ``+`` written as ``-``."""
    return __version__.replace("+", "-")


def registry() -> str:
    """The registry (and path) images are pulled from: ``$CONDUCTOR_IMAGE_REGISTRY`` or the default.

    Raises:
        ValueError: the override is not a valid registry path (the message names the variable).
    """
    value = os.environ.get(REGISTRY_ENV, "").strip().rstrip("/")
    if not value:
        return DEFAULT_REGISTRY
    if not _REGISTRY_RE.fullmatch(value):
        raise ValueError(
            f"{REGISTRY_ENV}={value!r} is not a valid image registry path; "
            "use host[:port][/path] with a lowercase path, e.g. registry.example.com:5000/ml"
        )
    return value


def tag() -> str:
    """The image tag: ``$CONDUCTOR_IMAGE_TAG`` or :func:`default_tag`.

    Raises:
        ValueError: the override is not a valid image tag (the message names the variable).
    """
    value = os.environ.get(TAG_ENV, "").strip()
    if not value:
        return default_tag()
    if not _TAG_RE.fullmatch(value):
        raise ValueError(
            f"{TAG_ENV}={value!r} is not a valid image tag; use at most 128 of "
            "[A-Za-z0-9_.-], not starting with '.' or '-'"
        )
    return value


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
