"""The oldest cluster services this platform works with, declared in one place.

* **Kubeflow Pipelines backend >= 2.17.0**, the newest of the backend features the compiled
  pipelines use (:data:`BACKEND_FEATURES`, each with the release that first runs it right;
  ``tests/unit/test_cluster_versions.py`` reads the compiled YAML and checks that every feature
  it uses is in the table and within the minimum):

  - ``dsl.Collected`` out of a ``dsl.ParallelFor`` (the evaluation shards' artifacts): 2.14.0
    (``CHANGELOG.md`` of kubeflow/pipelines: "enable dsl.Collected for parameters & artifacts",
    #11725);
  - optional Secrets (``optional: true``: the API-key Secrets a run may lack): 2.15.0, whose
    driver first passes the flag on (below it a missing optional key blocks every pod);
  - ``dsl.OneOf`` over the branches' **artifacts** (each stage's model, from whichever branch
    trained it): 2.17.0. Before it the driver resolves such a OneOf to the last branch listed
    (kubeflow/pipelines#13436, fixed by #13437): the GPU branch, so a run on any other branch
    (``launcher=trainjob``, a CPU profile) fails at the adaptive stage.

  2.17.0 is declared rather than handing the weights' URI on as a string ``OneOf`` (which older
  backends resolve right), because the model is a KFP artifact on purpose: the UI's lineage, the
  artifact store and caching follow it.

  ``conductor pipeline submit`` reads the server's version from its healthz endpoint and refuses
  older servers (``conductor_pipeline_runner/submit.py``).
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class BackendFeature:
    """A feature of the compiled pipeline spec and the KFP backend release that runs it right."""

    name: str
    """Its name in :data:`BACKEND_FEATURES` and :func:`backend_features_used`."""
    since: tuple[int, int, int]
    """The oldest backend ``(major, minor, patch)`` that runs it right."""
    reason: str
    """What the pipelines use it for and what breaks below ``since`` (one clause)."""


BACKEND_FEATURES: tuple[BackendFeature, ...] = (
    BackendFeature(
        "collected-artifacts",
        (2, 14, 0),
        "the pipelines collect the evaluation shards' artifacts out of a ParallelFor "
        "(dsl.Collected), which the KFP backend runs since 2.14.0",
    ),
    BackendFeature(
        "optional-secrets",
        (2, 15, 0),
        "the pods mount the API-key Secrets as optional, which the KFP driver honours since "
        "2.15.0 (before it a missing optional key blocks every pod)",
    ),
    BackendFeature(
        "artifact-oneof",
        (2, 17, 0),
        "each stage's model comes from whichever branch trained it (dsl.OneOf over artifacts), "
        "which the KFP driver resolved to the last branch listed before 2.17.0 "
        "(kubeflow/pipelines#13436)",
    ),
)
"""Every backend feature the compiled pipelines may use, oldest first."""


def backend_features_used(documents: Sequence[Mapping[str, Any]]) -> set[str]:
    """The :data:`BACKEND_FEATURES` a compiled pipeline uses, read from its YAML documents (the
    pipeline spec, then the Kubernetes platform spec when there is one)."""
    used: set[str] = set()
    for doc in documents:
        components = [doc.get("root", {}), *doc.get("components", {}).values()]
        for comp in components:
            outputs = comp.get("dag", {}).get("outputs", {}).get("artifacts", {})
            if any(len(out.get("artifactSelectors", ())) > 1 for out in outputs.values()):
                used.add("artifact-oneof")
            defined = comp.get("outputDefinitions", {}).get("artifacts", {})
            if "dag" in comp and any(d.get("isArtifactList") for d in defined.values()):
                used.add("collected-artifacts")
        executors = (doc.get("platforms", {}).get("kubernetes", {}).get("deploymentSpec", {})).get(
            "executors", {}
        )
        for executor in executors.values():
            if any(secret.get("optional") for secret in executor.get("secretAsEnv", ())):
                used.add("optional-secrets")
    return used


_NEWEST = max(BACKEND_FEATURES, key=lambda feature: feature.since)

KFP_BACKEND = Requirement(
    service="Kubeflow Pipelines", minimum=_NEWEST.since, reason=_NEWEST.reason
)
"""The Kubeflow Pipelines backend (API server) the compiled pipelines need: the release of the
newest feature in :data:`BACKEND_FEATURES`."""

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
