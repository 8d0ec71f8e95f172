"""One MLflow run per pipeline run, with one nested run per stage (and per evaluated method).

Kubeflow runs each task of a pipeline in its own process (its own pod on a cluster); all the tasks
of one pipeline run share only the KFP run id. So every task finds its runs by tags rather than by
handing run ids around:

- :func:`pipeline_run` gets or creates the *parent* run of a pipeline run, found by the tag
  ``conductor.kfp_run_id``; it is tagged with the pipeline name and the git commit (when known).
  Calling it again (a retried task, the next task) returns the same run id.
- :func:`stage_run` opens the nested run of one stage (``curate``, ``validate``, ``base``,
  ``adaptive``, ``recursive``, ``aggregate``, ``register``) under a parent, found by the tags
  ``mlflow.parentRunId`` and ``conductor.stage``: a retried stage logs into the run it started.
- :func:`nested_run` is the general form (any identifying tags); evaluation uses it for one run
  per evaluated method.
- :func:`close_pipeline_run` ends the parent and whatever of it still runs with the pipeline's
  final state (the pipeline's exit handler); until then it shows RUNNING.

Nested runs live in their parent's experiment and inherit its ``conductor.kfp_run_id``,
``conductor.pipeline`` and git commit tags, plus ``conductor.pipeline_run_id`` (the root run), so
``tags.`conductor.kfp_run_id` = '...'`` finds every run of a pipeline run in a search.

Two tasks that create the same run at the same moment both look again after creating theirs; the
earlier run wins and the later one is deleted (best effort across clocks).

A component, for example::

    parent = pipeline_run("conductor-train", kfp_run_id, experiment="conductor")
    with stage_run(parent, "curate", params={"mixture": "default"}):
        log_metrics({"problems": 1200})

``mlflow`` is imported on first use; an ``MLFLOW_RUN_ID`` in the environment does not redirect
these runs (they are identified by their tags).
"""

from __future__ import annotations

import logging
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from conductor_core.errors import ConfigError
from conductor_core.track.mlflow_run import (
    PARAMS_PER_BATCH,
    _run_block,
    configure,
    ensure_experiment,
    flatten_params,
    mlflow_module,
    restores_tracking_uri,
)
from conductor_core.track.scrub import is_secret_key, scrub_value, secret_values

_LOG = logging.getLogger(__name__)

PIPELINE_EXPERIMENT = "conductor"
"""The MLflow experiment of the pipelines: each pipeline run is a parent run in it."""

GIT_COMMIT_ENV = "CONDUCTOR_GIT_COMMIT"
"""Environment variable with the git commit of the code (set in images built by CI)."""

TAG_KFP_RUN_ID = "conductor.kfp_run_id"
TAG_KFP_RUN_NAME = "conductor.kfp_run_name"
"""On a parent run, where known: the KFP run's name (a local run's folder ``<pipeline>-<time>``)."""
TAG_PIPELINE = "conductor.pipeline"
TAG_PIPELINE_RUN = "conductor.pipeline_run_id"
"""On nested runs: the run id of the pipeline's parent run (the root)."""
TAG_GIT_COMMIT = "conductor.git_commit"
TAG_ROLE = "conductor.role"
"""``pipeline`` (a parent run), ``stage``, ``evaluation`` or ``method``."""
TAG_STAGE = "conductor.stage"
TAG_METHOD = "conductor.method"
TAG_PARENT = "mlflow.parentRunId"
TAG_RUN_NAME = "mlflow.runName"
TAG_SOURCE_COMMIT = "mlflow.source.git.commit"

STAGES = ("curate", "validate", "base", "adaptive", "recursive", "aggregate", "register")
"""The stages of the Conductor pipelines (other names are accepted)."""

INHERITED_TAGS = (TAG_KFP_RUN_ID, TAG_PIPELINE, TAG_PIPELINE_RUN, TAG_GIT_COMMIT, TAG_SOURCE_COMMIT)
"""Tags a nested run copies from its parent."""


def git_commit(cwd: str | None = None) -> str | None:
    """The git commit of the code: ``$CONDUCTOR_GIT_COMMIT``, else ``git rev-parse HEAD`` in
    ``cwd`` (the working directory by default) when git and a repository are there, else None."""
    env = (os.environ.get(GIT_COMMIT_ENV) or "").strip()
    if env:
        return env
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = done.stdout.strip()
    return commit if done.returncode == 0 and commit else None


def _quoted(value: str, what: str) -> str:
    """``value`` as a quoted MLflow search literal; a quote in it is a clear error."""
    if "'" in value or "\\" in value or not value:
        raise ConfigError(f"{what} {value!r}: must be non-empty, without quotes or backslashes")
    return f"'{value}'"


def tag_filter(tags: Mapping[str, str]) -> str:
    """An MLflow search filter matching every tag of ``tags`` (values without quotes)."""
    return " and ".join(f"tags.`{k}` = {_quoted(v, k)}" for k, v in tags.items())


def _clean_tags(tags: Mapping[str, Any] | None) -> dict[str, str]:
    """Tags stringified and scrubbed; keys that look like secrets dropped."""
    if not tags:
        return {}
    secrets = secret_values()
    return {
        str(k): scrub_value(str(v), secrets) for k, v in tags.items() if not is_secret_key(str(k))
    }


def _find(client: Any, experiment_ids: list[str], tags: Mapping[str, str]) -> list[Any]:
    """Active runs with all of ``tags``, oldest first (ties by run id)."""
    runs = client.search_runs(experiment_ids, filter_string=tag_filter(tags), max_results=1000)
    return sorted(runs, key=lambda r: (r.info.start_time or 0, r.info.run_id))


def _get_or_create(
    client: Any,
    experiment_id: str,
    match: Mapping[str, str],
    *,
    run_name: str,
    tags: Mapping[str, str],
) -> tuple[str, bool]:
    """The oldest active run of ``experiment_id`` tagged ``match``, else a new one with
    ``match`` and ``tags``. Returns ``(run_id, created)``.

    After creating, it looks again: when another process created one at the same time, the older
    run is kept and this one is deleted.
    """
    found = _find(client, [experiment_id], match)
    if found:
        return found[0].info.run_id, False
    run = client.create_run(
        experiment_id, run_name=run_name, tags={**tags, **match, TAG_RUN_NAME: run_name}
    )
    mine = run.info.run_id
    found = _find(client, [experiment_id], match)
    winner = found[0].info.run_id if found else mine
    if winner != mine:
        _LOG.info("run %s was created concurrently with %s; keeping the older", mine, winner)
        client.delete_run(mine)
        return winner, False
    return mine, True


@restores_tracking_uri
def pipeline_run(
    pipeline: str,
    kfp_run_id: str,
    *,
    experiment: str,
    tracking_uri: str | None = None,
    tags: dict[str, str] | None = None,
) -> str:
    """Get or create the parent MLflow run of a pipeline run; returns its run id.

    The run is found by its ``conductor.kfp_run_id`` tag in ``experiment``, so every task of the
    pipeline run (and every retry) gets the same run. A new run is named
    ``<pipeline>-<kfp_run_id>`` and tagged ``conductor.pipeline``, ``conductor.kfp_run_id``,
    ``conductor.role=pipeline`` and, when known (see :func:`git_commit`), ``conductor.git_commit``
    and ``mlflow.source.git.commit``. It stays RUNNING until :func:`close_pipeline_run`.

    Args:
        pipeline: the pipeline's name.
        kfp_run_id: the KFP run id (``dsl.PIPELINE_JOB_ID_PLACEHOLDER`` in a component).
        experiment: experiment name (created if missing).
        tracking_uri: tracking URI (default: ``$MLFLOW_TRACKING_URI``, else the local store).
        tags: more tags for a new run (stringified, scrubbed of secrets); on a found run they
            are set too.
    """
    if not pipeline:
        raise ConfigError("pipeline_run: the pipeline name is empty")
    _quoted(kfp_run_id, "kfp_run_id")
    mlflow = configure(tracking_uri)
    client = mlflow.MlflowClient()
    experiment_id = ensure_experiment(experiment)
    extra = _clean_tags(tags)
    base = {TAG_PIPELINE: pipeline, TAG_ROLE: "pipeline"}
    commit = git_commit()
    if commit:
        base |= {TAG_GIT_COMMIT: commit, TAG_SOURCE_COMMIT: commit}
    run_id, created = _get_or_create(
        client,
        experiment_id,
        {TAG_KFP_RUN_ID: kfp_run_id},
        run_name=f"{pipeline}-{kfp_run_id}",
        tags={**extra, **base},
    )
    if not created:
        for key, value in extra.items():
            client.set_tag(run_id, key, value)
    return run_id


@restores_tracking_uri
def close_pipeline_run(
    kfp_run_id: str,
    status: str,
    *,
    experiment: str = PIPELINE_EXPERIMENT,
    tracking_uri: str | None = None,
) -> tuple[str, int] | None:
    """End the parent run of KFP run ``kfp_run_id`` with ``status`` (``FINISHED``, ``FAILED`` or
    ``KILLED``), and every run of it still RUNNING (a stage whose pod was killed) likewise.

    Returns ``(parent run id, nested runs ended)``, or None when no task opened a parent run
    (nothing is created then). A second call ends it again with the new status.
    """
    if status not in ("FINISHED", "FAILED", "KILLED"):
        raise ConfigError(f"close_pipeline_run: {status!r} is not FINISHED, FAILED or KILLED")
    _quoted(kfp_run_id, "kfp_run_id")
    mlflow = configure(tracking_uri)
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    parents = _find(client, [exp.experiment_id], {TAG_KFP_RUN_ID: kfp_run_id, TAG_ROLE: "pipeline"})
    if not parents:
        return None
    parent = parents[0].info.run_id
    return parent, _terminate(client, exp.experiment_id, parent, status)


def _terminate(client: Any, experiment_id: str, parent: str, status: str) -> int:
    """End the parent run ``parent`` and every run of it still RUNNING with ``status``; returns
    how many of its runs were ended."""
    running = client.search_runs(
        [experiment_id],
        filter_string=f"{tag_filter({TAG_PIPELINE_RUN: parent})} and attributes.status = 'RUNNING'",
        max_results=1000,
    )
    for run in running:
        client.set_terminated(run.info.run_id, status=status)
    client.set_terminated(parent, status=status)
    return len(running)


@restores_tracking_uri
def close_stale_pipeline_runs(
    ended: Callable[[str], str | None],
    *,
    experiment: str = PIPELINE_EXPERIMENT,
    tracking_uri: str | None = None,
) -> list[tuple[str, str]]:
    """Close the parent runs left RUNNING by pipeline runs that ended without their exit handler
    (a killed local run, a run terminated on a cluster), with every run of theirs still RUNNING.

    ``ended(kfp_run_id)`` says how each ended: the MLflow status to close it with (``FINISHED``,
    ``FAILED`` or ``KILLED``), or None for a run that is still going or cannot be told, which
    stays open. Returns ``(kfp run id, status)`` of every run closed."""
    mlflow = configure(tracking_uri)
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return []
    running = client.search_runs(
        [exp.experiment_id],
        filter_string=f"{tag_filter({TAG_ROLE: 'pipeline'})} and attributes.status = 'RUNNING'",
        max_results=1000,
    )
    closed = []
    for run in running:
        kfp_run_id = run.data.tags.get(TAG_KFP_RUN_ID)
        status = ended(kfp_run_id) if kfp_run_id else None
        if status is not None:
            _terminate(client, exp.experiment_id, run.info.run_id, status)
            closed.append((kfp_run_id, status))
    return closed


@restores_tracking_uri
def find_nested_run(
    parent_run_id: str, match: Mapping[str, str], *, tracking_uri: str | None = None
) -> str | None:
    """The id of the oldest active run under ``parent_run_id`` tagged ``match``, else None."""
    mlflow = configure(tracking_uri)
    client = mlflow.MlflowClient()
    parent = client.get_run(parent_run_id)
    found = _find(client, [parent.info.experiment_id], {TAG_PARENT: parent_run_id, **match})
    return found[0].info.run_id if found else None


def _log_params_once(run_id: str, params: Mapping[str, Any] | Any) -> dict[str, str]:
    """Log :func:`flatten_params` of ``params`` to the active run, skipping those the run already
    has (a param cannot change in MLflow: a different value is skipped with a warning)."""
    mlflow = mlflow_module()
    have = dict(mlflow.MlflowClient().get_run(run_id).data.params)
    new: dict[str, str] = {}
    for key, value in flatten_params(params).items():
        if key not in have:
            new[key] = value
        elif have[key] != value:
            _LOG.warning(
                "run %s: param %s stays %r (MLflow params cannot change; got %r)",
                run_id,
                key,
                have[key],
                value,
            )
    items = list(new.items())
    for i in range(0, len(items), PARAMS_PER_BATCH):
        mlflow.log_params(dict(items[i : i + PARAMS_PER_BATCH]))
    return new


@dataclass(frozen=True)
class PipelineRun:
    """A pipeline's parent run, as :func:`find_pipeline_run` finds it."""

    run_id: str
    run_name: str
    kfp_run_id: str


@restores_tracking_uri
def find_pipeline_run(
    kfp_run_id: str,
    *,
    experiment: str = PIPELINE_EXPERIMENT,
    tracking_uri: str | None = None,
) -> PipelineRun | None:
    """The parent run of KFP run ``kfp_run_id`` in ``experiment``, else None (no task of the
    run opened one)."""
    _quoted(kfp_run_id, "kfp_run_id")
    mlflow = configure(tracking_uri)
    exp = mlflow.get_experiment_by_name(experiment)
    if exp is None:
        return None
    found = _find(
        mlflow.MlflowClient(),
        [exp.experiment_id],
        {TAG_ROLE: "pipeline", TAG_KFP_RUN_ID: kfp_run_id},
    )
    if not found:
        return None
    run = found[0]
    return PipelineRun(run.info.run_id, run.info.run_name or "", kfp_run_id)


@restores_tracking_uri
def name_pipeline_run(run_id: str, kfp_run_name: str, *, tracking_uri: str | None = None) -> None:
    """Tag the parent run ``run_id`` with the KFP run's name (:data:`TAG_KFP_RUN_NAME`), so that
    :func:`kfp_run_ids` finds it by that name too."""
    configure(tracking_uri).MlflowClient().set_tag(run_id, TAG_KFP_RUN_NAME, kfp_run_name)


@restores_tracking_uri
def kfp_run_ids(
    ref: str, *, experiment_ids: list[str] | None = None, tracking_uri: str | None = None
) -> list[str]:
    """The KFP run ids that ``ref`` names: ``ref`` itself (a KFP run id), and those of the parent
    runs named ``ref`` (``<pipeline>-<kfp run id>``, the run's name in MLflow) or tagged with it
    as their KFP run name (a local run's folder; a path to it counts by its last part).
    ``experiment_ids`` narrows the search (None: every experiment)."""
    mlflow = configure(tracking_uri)
    ref = ref.strip().rstrip("/")
    name = ref.rsplit("/", 1)[-1]
    ids = [name]
    for key in (TAG_RUN_NAME, TAG_KFP_RUN_NAME):
        search = {"filter_string": tag_filter({TAG_ROLE: "pipeline", key: name})}
        if experiment_ids is None:
            runs = mlflow.search_runs(search_all_experiments=True, output_format="list", **search)
        else:
            runs = mlflow.search_runs(experiment_ids, output_format="list", **search)
        ids += [r.data.tags[TAG_KFP_RUN_ID] for r in runs if TAG_KFP_RUN_ID in r.data.tags]
    return list(dict.fromkeys(ids))


@contextmanager
@restores_tracking_uri
def nested_run(
    parent_run_id: str,
    match: Mapping[str, str],
    *,
    run_name: str,
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, Any] | None = None,
    tracking_uri: str | None = None,
    log_system_metrics: bool | None = None,
) -> Iterator[Any]:
    """Open the nested run under ``parent_run_id`` identified by the tags ``match`` (created if
    missing, re-opened if it exists); yields the ``mlflow.ActiveRun``.

    A new run gets ``match``, ``tags`` and the parent's :data:`INHERITED_TAGS`. ``params`` are
    logged flattened and scrubbed (those already on a reused run are kept). The run is ended
    ``FAILED`` when the block raises and ``FINISHED`` otherwise. Any run active in this process
    stays active around it. ``log_system_metrics``: sample the machine's ``system/*`` metrics
    into the run while it is open (None: MLflow's ``MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING``).
    """
    _quoted(parent_run_id, "parent_run_id")
    mlflow = configure(tracking_uri)
    client = mlflow.MlflowClient()
    parent = client.get_run(parent_run_id)
    if parent.info.lifecycle_stage == "deleted":
        raise ConfigError(f"parent run {parent_run_id} was deleted")
    inherited = {k: parent.data.tags[k] for k in INHERITED_TAGS if k in parent.data.tags}
    if parent.data.tags.get(TAG_ROLE) == "pipeline":
        inherited[TAG_PIPELINE_RUN] = parent_run_id
    key = {TAG_PARENT: parent_run_id, **{str(k): str(v) for k, v in match.items()}}
    run_id, _ = _get_or_create(
        client,
        parent.info.experiment_id,
        key,
        run_name=run_name,
        tags={**inherited, **_clean_tags(tags)},
    )
    nested = mlflow.active_run() is not None
    run = mlflow.start_run(run_id=run_id, nested=nested, log_system_metrics=log_system_metrics)
    try:
        if params:
            _log_params_once(run_id, params)
    except BaseException:
        mlflow.end_run(status="FAILED")
        raise
    with _run_block(run, owned=True) as active:
        yield active


@contextmanager
def stage_run(
    parent_run_id: str,
    stage: str,
    *,
    params: Mapping[str, Any] | None = None,
    tags: Mapping[str, Any] | None = None,
    tracking_uri: str | None = None,
    log_system_metrics: bool | None = None,
) -> Iterator[Any]:
    """Open the nested run of ``stage`` under the pipeline run ``parent_run_id``; yields the
    ``mlflow.ActiveRun`` (log into it with :mod:`conductor_core.track.mlflow_run`).

    Found by the tags ``mlflow.parentRunId`` and ``conductor.stage`` (a retried stage re-opens
    its run), else created (named ``stage``, tagged ``conductor.role=stage``). Ends ``FAILED``
    when the block raises, ``FINISHED`` otherwise. See :func:`nested_run`.

    Args:
        parent_run_id: the run id :func:`pipeline_run` returned.
        stage: the stage's name (see :data:`STAGES`).
        params: params of the stage (flattened and scrubbed).
        tags: more tags for a new run.
        tracking_uri: tracking URI (default: ``$MLFLOW_TRACKING_URI``, else the local store).
        log_system_metrics: sample ``system/*`` metrics into the run while it is open.
    """
    _quoted(stage, "stage")
    with nested_run(
        parent_run_id,
        {TAG_STAGE: stage},
        run_name=stage,
        params=params,
        tags={**(tags or {}), TAG_ROLE: "stage"},
        tracking_uri=tracking_uri,
        log_system_metrics=log_system_metrics,
    ) as run:
        yield run


__all__ = [
    "GIT_COMMIT_ENV",
    "INHERITED_TAGS",
    "PIPELINE_EXPERIMENT",
    "STAGES",
    "TAG_GIT_COMMIT",
    "TAG_KFP_RUN_ID",
    "TAG_KFP_RUN_NAME",
    "TAG_METHOD",
    "TAG_PARENT",
    "TAG_PIPELINE",
    "TAG_PIPELINE_RUN",
    "TAG_ROLE",
    "TAG_STAGE",
    "PipelineRun",
    "close_pipeline_run",
    "find_nested_run",
    "find_pipeline_run",
    "git_commit",
    "kfp_run_ids",
    "name_pipeline_run",
    "nested_run",
    "pipeline_run",
    "stage_run",
    "tag_filter",
]
