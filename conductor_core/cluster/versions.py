"""The oldest cluster services this platform works with, declared in one place.

* **Kubeflow Pipelines backend >= 2.14.0.** The training and evaluation pipelines gather the
  evaluation shards' artifacts out of a ``dsl.ParallelFor`` with ``dsl.Collected``; the backend
  only runs that since 2.14.0 (``CHANGELOG.md`` of kubeflow/pipelines: "enable dsl.Collected for
  parameters & artifacts", #11725; the release before it was 2.5.0). ``conductor pipeline
  submit`` reads the server's version from its healthz endpoint and refuses older servers
  (``pipelines/submit.py``).
* **Kubeflow Trainer >= 2.2.0.** The TrainJobs the launcher builds
  (:mod:`conductor_core.cluster.trainjob`) set ``spec.runtimePatches`` (node selector,
  tolerations, volumes of the training nodes) and ``spec.activeDeadlineSeconds``, which the
  ``TrainJob`` API has since v2.2.0 (it had ``podTemplateOverrides`` before). The launcher creates
  TrainJobs with strict field validation, so an older Trainer rejects them with a message that
  names this requirement instead of silently dropping those fields. The manifests are tested
  against the v2.2.0 CRD (``tests/fixtures/cluster/trainer-v2.2.0-trainjobs-crd.yaml``).

Versions are compared on ``(major, minor, patch)``: a pre-release or build suffix is ignored, so
``2.14.0-rc.1`` counts as 2.14.0. Text without a version (``master``, ``unknown``, a commit) is
*unknown*; what to do then is the caller's choice (``submit`` warns and goes on).

Pure Python: nothing here talks to a cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_VERSION = re.compile(r"^v?(\d+)\.(\d+)(?:\.(\d+))?(?:[-+.~][0-9A-Za-z.+~-]*)?$")


@dataclass(frozen=True)
class Requirement:
    """A minimum version of one cluster service, and why it is needed."""

    service: str
    """The service's name as messages show it."""
    minimum: tuple[int, int, int]
    """The oldest ``(major, minor, patch)`` that works."""
    reason: str
    """What breaks below it (one clause, shown in refusals)."""

    @property
    def minimum_text(self) -> str:
        """The minimum as ``major.minor.patch``."""
        return ".".join(str(part) for part in self.minimum)


KFP_BACKEND = Requirement(
    service="Kubeflow Pipelines",
    minimum=(2, 14, 0),
    reason="the pipelines collect the evaluation shards' artifacts out of a ParallelFor "
    "(dsl.Collected), which the KFP backend runs since 2.14.0",
)
"""The Kubeflow Pipelines backend (API server) the compiled pipelines need."""

TRAINER = Requirement(
    service="Kubeflow Trainer",
    minimum=(2, 2, 0),
    reason="the launcher's TrainJobs use spec.runtimePatches and spec.activeDeadlineSeconds, "
    "which the TrainJob API (trainer.kubeflow.org/v1alpha1) has since Trainer v2.2.0",
)
"""The Kubeflow Trainer that runs the launcher's TrainJobs (``launcher=trainjob``)."""


def parse_version(text: str | None) -> tuple[int, int, int] | None:
    """``(major, minor, patch)`` of a version string such as ``2.14.0``, ``v2.14.0``,
    ``2.14`` or ``2.14.0-rc.1``; None for text that is no version (``master``, ``unknown``,
    empty, a commit hash)."""
    match = _VERSION.match((text or "").strip())
    if not match:
        return None
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


@dataclass(frozen=True)
class VersionCheck:
    """A service's reported version against a :class:`Requirement`."""

    requirement: Requirement
    reported: str
    """The version text as the service reported it (may be empty)."""
    version: tuple[int, int, int] | None
    """The parsed version; None when unknown."""

    @property
    def known(self) -> bool:
        """Whether the reported text is a version."""
        return self.version is not None

    @property
    def too_old(self) -> bool:
        """A known version below the minimum."""
        return self.version is not None and self.version < self.requirement.minimum

    def message(self, where: str) -> str:
        """One line for the user: why ``where`` (e.g. ``at https://kfp``) is refused, or that
        its version is unknown; empty when the version is fine."""
        req = self.requirement
        if self.too_old:
            return (
                f"{req.service} {where} is version {self.reported}; these pipelines need "
                f"{req.minimum_text} or newer because {req.reason}; upgrade it"
            )
        if not self.known:
            shown = repr(self.reported) if self.reported else "nothing"
            return (
                f"{req.service} {where} reports no version ({shown}); these pipelines need "
                f"{req.minimum_text} or newer because {req.reason}; going on, but an older "
                "server will fail the run"
            )
        return ""


def check_version(requirement: Requirement, reported: str | None) -> VersionCheck:
    """Compare a reported version text with ``requirement``."""
    text = (reported or "").strip()
    return VersionCheck(requirement, text, parse_version(text))
