"""Checks of a pipeline run's parameters, run by its first task.

The Kubeflow UI's run form takes free text; a typo in an enum-like parameter (a profile, the
launcher, a baseline spec) should stop the run in its first seconds with one line naming the
parameter and the accepted values, not hours later in a training pod. The same goes for an
artifact root the run's pods cannot share (:func:`check_artifact_root`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from conductor_core.cluster.launcher import ClusterError, load_api_client, resolve_namespace
from conductor_core.cluster.runtime import check_runtime
from conductor_core.cluster.settings import (
    ARTIFACT_ROOT_ENV,
    S3_CREDENTIAL_ENVS,
    ClusterSettings,
    shared_path_of,
)
from conductor_core.data.config import load_config
from conductor_core.errors import ConductorError, ConfigError
from conductor_core.evaluate.specs import build_baselines
from conductor_core.pipeline_steps.context import DEFAULT_ARTIFACT_ROOT, pool_path
from conductor_core.tasks.sandbox import isolation_report
from conductor_core.tasks.sources import INFO
from conductor_core.track.storage import is_s3, split_s3
from conductor_core.train.config import PROFILES, STAGES, build_config
from conductor_core.workers.config import load_pool

Placement = Literal["cpu", "gpu"]
"""Where a profile's model trains, is evaluated and is registered when ``launcher=pod``:
``cpu`` pods on the base image, or ``gpu`` pods on the train image."""
LAUNCHERS = ("pod", "trainjob")
METRICS = ("accuracy", "cost_per_question", "calls_per_question")


def profile_placement(profile: str) -> Placement:
    """Where ``profile``'s model trains, is evaluated and is registered: ``cpu`` when its
    resolved base-stage training config says ``device: cpu``, else ``gpu`` (``cuda``, or
    ``auto``, which takes a GPU where there is one). The pipeline branches on this, not on the
    profile's name, so a profile YAML added to ``resources/train/profiles`` is placed by its
    own ``device``. Raises :class:`ConfigError` for a profile that is not one of
    :data:`PROFILES`, or whose config does not build."""
    if profile not in PROFILES:
        raise ConfigError(f"profile: {profile!r} is not one of {', '.join(PROFILES)}")
    device = build_config({}, stage="base", profile=profile).device
    return "cpu" if device == "cpu" else "gpu"


def _one_of(name: str, value: str, allowed: Sequence[str]) -> list[str]:
    if value in allowed:
        return []
    return [f"{name}: {value!r} is not one of {', '.join(allowed)}"]


def check_training_params(
    *,
    profile: str,
    launcher: str,
    metric: str,
    baselines: str,
    pool: str = "bundled",
    eval_shards: int = 1,
    eval_parallelism: int = 1,
    steps: dict[str, int] | None = None,
    seed: int = -1,
    curation_config: str = "pipeline",
    artifact_root: str | None = None,
    default_artifact_root: str = "",
    shared_paths: Sequence[str] = (),
    s3_secret: str = "",
    trainjob_runtime: str = "",
    namespace: str = "",
    eval_benchmark: str = "",
    log: Callable[[str], None] = print,
) -> dict[str, str]:
    """Check the training pipeline's parameters; raise one :class:`ConfigError` listing every
    bad one. Returns the normalised values that later tasks may print, among them
    ``placement``: :func:`profile_placement` of the profile (``cpu`` or ``gpu``), which the
    pipeline's branches follow.

    ``artifact_root`` (None: not checked) is checked by :func:`check_artifact_root` against
    what the cluster settings the pipeline was compiled with allow (``default_artifact_root``,
    ``shared_paths``, ``s3_secret``). With ``launcher=trainjob`` and ``trainjob_runtime``
    (``Kind/name`` from the same settings) the Kubeflow Trainer runtime is looked up in the
    cluster (:func:`~conductor_core.cluster.runtime.check_runtime`; a TrainingRuntime in
    ``namespace``, else the pod's own): a missing one stops the run before any GPU node is
    asked for; one the service account may not read is ``log``-ged as a warning. A run that
    grades generated code (:func:`grades_code`, with ``eval_benchmark``) runs the code sandbox's
    isolation check here, in this pod, which carries the graders' sandbox settings: a sandbox
    that would refuse the code (no namespaces under KFP's seccomp profile and dropped
    capabilities, and no admission policy) stops the run now, not hours in."""
    problems = [
        *_one_of("profile", profile, PROFILES),
        *_one_of("launcher", launcher, LAUNCHERS),
        *_one_of("register_metric", metric, METRICS),
    ]
    if eval_shards < 1:
        problems.append(f"eval_shards: {eval_shards}; give at least 1")
    if eval_parallelism < 1:
        problems.append(f"eval_parallelism: {eval_parallelism}; give at least 1")
    for stage, n in (steps or {}).items():
        if n < 0:
            problems.append(f"{stage}_steps: {n}; give 0 (the profile's) or a positive count")
    if seed < -1:
        problems.append(f"seed: {seed}; give -1 (the profile's) or a seed of 0 or more")
    problems += _check_pool_and_baselines(pool, baselines)
    profile_problems = check_profile_pool(profile, pool)
    problems += profile_problems
    problems += _check_curation(curation_config)
    checked = {"profile": profile, "launcher": launcher, "metric": metric, "baselines": baselines}
    if profile in PROFILES and not profile_problems:  # else the problem is named already
        try:
            checked["placement"] = profile_placement(profile)
        except ConfigError as exc:
            problems.append(str(exc))
        if launcher == "trainjob" and checked.get("placement") == "cpu":
            # the TrainJob asks for the cluster settings' GPU nodes: a CPU profile would hold
            # them for a job that never touches a GPU
            problems.append(
                f"launcher: trainjob runs on the cluster's GPU nodes, and profile {profile!r} "
                "trains on CPU; use launcher=pod"
            )
    if artifact_root is not None:
        root, found = check_artifact_root(
            artifact_root,
            default=default_artifact_root,
            shared_paths=shared_paths,
            s3_secret=s3_secret,
            launcher=launcher,
        )
        problems += found
        checked["artifact_root"] = root
    if launcher == "trainjob" and trainjob_runtime and not problems:
        problems += _runtime_problems(trainjob_runtime, namespace, log)
    if not problems and grades_code(curation_config, eval_benchmark):
        problems += _sandbox_problems()
    if problems:
        raise ConfigError("pipeline parameters: " + "; ".join(problems))
    return checked


def grades_code(curation_config: str, eval_benchmark: str) -> bool:
    """Whether a run grades generated code: a code benchmark among the sources of its curation
    config, or as its evaluation set. (A problem file's domains are not read here.)"""

    def is_code(name: str | None) -> bool:
        return name in INFO and INFO[name].domain == "code"

    if is_code(eval_benchmark):
        return True
    try:
        sources = load_config(curation_config).sources
    except ConfigError:  # named by the curation check
        return False
    return any(is_code(source.benchmark) for source in sources)


def _sandbox_problems() -> list[str]:
    """The code sandbox's isolation check in this pod: why it would refuse generated code."""
    try:
        report = isolation_report()
    except ConfigError as exc:
        return [f"this run grades generated code, and {exc}"]
    if report.get("mode") == "refused":
        return [f"this run grades generated code, and {report.get('refusal')}"]
    return []


def _runtime_problems(reference: str, namespace: str, log: Callable[[str], None]) -> list[str]:
    """:func:`~conductor_core.cluster.runtime.check_runtime` from this pod: its problem (also
    when no Kubernetes API is reachable: a TrainJob needs one), its warning logged."""
    try:
        api = load_api_client()
    except ClusterError as exc:
        return [f"launcher: trainjob needs the Kubernetes API: {exc}"]
    with api:
        ns = resolve_namespace(ClusterSettings(), namespace or None)
        result = check_runtime(reference, api, ns)
    if result.warning:
        log(f"warning: {result.warning}")
    return [result.problem] if result.problem else []


def check_artifact_root(
    root: str,
    *,
    default: str = "",
    shared_paths: Sequence[str] = (),
    s3_secret: str = "",
    launcher: str = "pod",
    environ: Mapping[str, str] | None = None,
) -> tuple[str, list[str]]:
    """Whether a run's tasks can share ``root``, the artifact root they hand checkpoints and
    models on through: returns the root they will use and the problems found (none: it is fine).

    The root is ``root``, else the cluster settings' ``default``, else
    ``$CONDUCTOR_ARTIFACT_ROOT``, else ``./runs/pipelines`` (what every task resolves). Tasks
    run in separate pods that share no disk, so it must be ``s3://bucket/prefix`` or a folder
    under one of ``shared_paths`` (volumes the settings declare mounted on every pod; ``/``:
    every folder, the local run where all tasks share one machine). With ``s3://`` the S3
    credentials must be in the environment (``AWS_ACCESS_KEY_ID`` and
    ``AWS_SECRET_ACCESS_KEY``, filled from the Secret ``s3_secret``; or a web-identity or
    container-credentials role), and ``launcher=trainjob`` needs ``s3://`` (its nodes hand the
    model on through S3).
    """
    env = os.environ if environ is None else environ
    if root:
        chosen, said = root, repr(root)
    elif default:
        chosen, said = default, f"empty, so the cluster settings' {default!r}"
    elif env.get(ARTIFACT_ROOT_ENV):
        chosen = env[ARTIFACT_ROOT_ENV]
        said = f"empty, so ${ARTIFACT_ROOT_ENV} ({chosen!r})"
    else:
        chosen, said = DEFAULT_ARTIFACT_ROOT, f"empty, so ./{DEFAULT_ARTIFACT_ROOT}"
    if not is_s3(chosen):
        chosen = str(Path(chosen).expanduser().resolve())
        if shared_path_of(chosen, tuple(shared_paths)):
            if launcher == "trainjob":
                return chosen, [
                    f"artifact_root: {said}: launcher=trainjob needs s3://bucket/prefix (the "
                    "TrainJob's nodes hand the model on through S3)"
                ]
            return chosen, []
        where = " or a folder under " + ", ".join(shared_paths) if shared_paths else ""
        return chosen, [
            f"artifact_root: {said} is a folder on this pod's own disk, which the run's other "
            f"tasks never see; give s3://bucket/prefix{where} (or set artifact_root in the "
            "cluster settings)"
        ]
    try:
        split_s3(chosen)
    except ConfigError as exc:
        return chosen, [f"artifact_root: {exc}"]
    missing = [name for name in S3_CREDENTIAL_ENVS if not env.get(name)]
    role = (env.get("AWS_WEB_IDENTITY_TOKEN_FILE") and env.get("AWS_ROLE_ARN")) or any(
        env.get(n)
        for n in ("AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI")
    )
    if missing and not role:
        fix = (
            f"create the Secret '{s3_secret}' with the keys {', '.join(S3_CREDENTIAL_ENVS)} in "
            "the run's namespace"
            if s3_secret
            else "the cluster settings name no Secret for them (gpu/cpu secret_env)"
        )
        return chosen, [
            f"artifact_root {chosen}: no S3 credentials in the task's environment "
            f"({', '.join(missing)} unset); {fix}"
        ]
    return chosen, []


def check_profile_pool(profile: str, pool: str) -> list[str]:
    """The training config's own check of ``profile`` with ``pool`` (each stage's): a profile
    that trains a real model (paper) refuses a simulated pool, on which it would learn a toy
    routing, unless its ``data.allow_simulated_pool`` says so (small). Run here, by the
    parameter check, it stops the run before any training pod is scheduled, instead of in the
    first training task."""
    if profile not in PROFILES:
        return []

    for stage in STAGES:
        try:
            build_config({"data": {"pool": pool_path(pool)}}, stage=stage, profile=profile)
        except ConfigError as exc:
            if "simulated pool" in str(exc):
                try:
                    where = " on GPUs" if profile_placement(profile) == "gpu" else " on CPUs"
                except ConfigError:
                    where = ""
                return [
                    f"pool: {pool!r} is a simulated pool, and the {profile} profile trains a "
                    f"real model{where} (it would learn a toy routing); give a pool YAML of "
                    "real workers"
                ]
            return [f"profile {profile!r} with pool {pool!r}: {exc}"]
    return []


def _check_pool_and_baselines(pool: str, baselines: str) -> list[str]:
    try:
        pool_config = load_pool(pool_path(pool))
    except ConductorError as exc:
        return [f"pool: {exc}"]
    try:
        build_baselines([s for s in baselines.split(",") if s.strip()], pool_config)
    except ConductorError as exc:
        return [f"baselines: {str(exc).splitlines()[0]}"]
    return []


def _check_curation(config: str) -> list[str]:
    try:
        load_config(config)
    except ConfigError as exc:
        return [f"curation_config: {exc}"]
    return []
