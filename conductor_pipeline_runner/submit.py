"""Submit a compiled pipeline to a Kubeflow Pipelines endpoint with the official ``kfp.Client``.

One call does what an engineer would do in the UI: upload the pipeline (or, when a pipeline of
that name exists, a new version of it), get or create the experiment, and start a run of exactly
that version with the given parameters::

    result = submit("conductor_pipelines/compiled/training.yaml", host="http://localhost:8080",
                    pipeline_name="conductor-training", params={"profile": "tiny"})
    print(result.run_url)

Before anything is uploaded, the server's version is read from its healthz endpoint
(``GET /apis/v2beta1/healthz``: ``tag_name`` from the API server, ``apiServerTagName`` when the
host is the KFP UI, which answers that path itself) and checked against
:data:`conductor_core.cluster.versions.KFP_BACKEND` (2.17.0): an older server is refused with the
reason; a server that reports no version (``unknown``, ``master``, a development build) gets a
warning (logged, and ``server_version`` is empty in the result) and the submission goes on.

``service_account`` names the Kubernetes service account the run's pods use (KFP's default when
absent: ``pipeline-runner`` in standalone KFP, ``default-editor`` in a multi-user profile); it
must have the TrainJob permissions of ``charts/conductor-training-rbac`` when training launches
TrainJobs.

:func:`schedule` uploads the same way and creates a **recurring run** of that version instead
(``kfp.Client.create_recurring_run``): a cron schedule (:func:`.cron.kfp_cron`) or an
interval, at most ``max_concurrency`` runs at once, no backfill of missed runs unless asked.

``caching=False`` (``--no-cache``) turns KFP's execution cache off for every task: the version
uploaded is the package with each task's ``cachingOptions.enableCache`` false (what
``kfp.Client``'s ``enable_caching=False`` does to a package it submits inline, applied to the
tasks of every DAG); ``enable_caching`` itself only affects a run submitted with its package, not
a run of an uploaded version, which is what is started here.

Every failure a user can cause (unreachable host, rejected credentials, a server too old, a
rejected upload, a taken version name, unknown run parameters) raises :class:`SubmitError` with
one line that says what failed and how to fix it. The bearer token is only handed to
``kfp.Client``: it is never printed, logged or put in an error message. ``kfp`` is imported when
:func:`submit` is called.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import re
import urllib.error
import urllib.request
import warnings
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conductor_core import __version__
from conductor_core.cluster.versions import KFP_BACKEND, check_version
from conductor_core.errors import ConductorError, require

log = logging.getLogger(__name__)

HEALTHZ_PATH = "/apis/v2beta1/healthz"
PROBE_TIMEOUT_S = 10.0
_MAX_DETAIL = 300
VERSION_FIELDS = ("tag_name", "apiServerTagName")
"""Where a healthz answer holds the KFP backend's version: ``tag_name`` from the API server
(``backend/src/apiserver/main.go``), ``apiServerTagName`` from the UI's server
(``frontend/server/handlers/healthz.ts``), which answers the same path."""
_SERVICE_ACCOUNT = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


class SubmitError(ConductorError):
    """Submitting a pipeline failed; the message is one line naming the step and the fix."""


@dataclass(frozen=True)
class SubmitResult:
    """What :func:`submit` created on the Kubeflow Pipelines endpoint."""

    host: str
    pipeline_id: str
    pipeline_name: str
    version_id: str
    version_name: str
    experiment_id: str
    experiment: str
    run_id: str
    run_name: str
    run_url: str
    created_pipeline: bool
    package_sha256: str
    server_version: str = ""
    """The KFP backend's version as its healthz reported it; empty when it reported none."""
    service_account: str = ""
    """The service account the run was started with; empty = KFP's default."""
    caching: bool = True
    """False: the version uploaded has KFP's execution cache off for every task."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


@dataclass(frozen=True)
class ScheduleResult:
    """What :func:`schedule` created on the Kubeflow Pipelines endpoint."""

    host: str
    pipeline_id: str
    pipeline_name: str
    version_id: str
    version_name: str
    experiment_id: str
    experiment: str
    recurring_run_id: str
    recurring_run_name: str
    recurring_run_url: str
    cron: str
    """The cron KFP was given (seconds first), or empty for an interval."""
    interval_s: int
    """Seconds between runs, or 0 for a cron schedule."""
    max_concurrency: int
    catchup: bool
    enabled: bool
    start_time: str
    end_time: str
    created_pipeline: bool
    package_sha256: str
    server_version: str = ""
    service_account: str = ""
    caching: bool = True

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict of every field."""
        return asdict(self)


def default_version_name(package_sha256: str, now: datetime | None = None) -> str:
    """``YYYYMMDD-HHMMSS-<first 12 hex of the package's SHA-256>`` (UTC): unique per upload and
    traceable to the file's content."""
    when = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    return f"{when}-{package_sha256[:12]}"


def submit(
    package_path: str | Path,
    *,
    host: str,
    pipeline_name: str,
    version_name: str | None = None,
    experiment: str = "conductor",
    run_name: str | None = None,
    params: dict[str, Any] | None = None,
    namespace: str | None = None,
    existing_token: str | None = None,
    service_account: str | None = None,
    caching: bool = True,
) -> SubmitResult:
    """Upload ``package_path`` to the KFP endpoint ``host`` and start a run of that version.

    Args:
        package_path: A compiled pipeline (YAML from ``kfp.compiler``).
        host: The KFP API endpoint, e.g. ``http://localhost:8080`` (a port-forward of
            ``ml-pipeline-ui``) or ``https://kubeflow.example.com/pipeline``. Without a scheme,
            ``https://`` is assumed (as ``kfp.Client`` does).
        pipeline_name: The pipeline's name in KFP. Absent: the pipeline is uploaded (KFP names
            its first version after the pipeline). Present: a new version is uploaded.
        version_name: The new version's name; default :func:`default_version_name`.
        experiment: The experiment the run is filed under (created when absent).
        run_name: The run's name; default ``"<pipeline_name> <UTC time>"``.
        params: Pipeline parameters of the run (names must be inputs of the pipeline).
        namespace: The Kubeflow profile namespace (multi-user installs); ``None`` otherwise.
        existing_token: A bearer token for the endpoint (sent as ``Authorization``; never
            printed or logged).
        service_account: The Kubernetes service account the run's pods use (in the run's
            namespace); ``None`` = KFP's default (``pipeline-runner`` standalone,
            ``default-editor`` multi-user).
        caching: False: KFP's execution cache is off for every task of the run (the version
            uploaded says so, see the module doc).

    Returns:
        The pipeline, version, experiment and run ids, and the run's URL in the KFP UI.

    Raises:
        SubmitError: a step failed (one line: the step, the server's reason, the fix), or the
            server is older than :data:`~conductor_core.cluster.versions.KFP_BACKEND`.
        MissingDependencyError: ``kfp`` is not installed (the ``pipelines`` extra).
    """
    with _package(package_path, caching) as (path, digest):
        up = _upload(
            path,
            digest,
            host=host,
            pipeline_name=pipeline_name,
            version_name=version_name,
            experiment=experiment,
            namespace=namespace,
            existing_token=existing_token,
            service_account=service_account,
            caching=caching,
        )
    run_name = run_name or f"{pipeline_name} {datetime.now(UTC):%Y-%m-%d %H:%M:%S}"
    run = up.session.call(
        f"starting run {run_name!r}",
        up.client.run_pipeline,
        experiment_id=up.experiment_id,
        job_name=run_name,
        params=dict(params or {}),
        pipeline_id=up.pipeline_id,
        version_id=up.version_id,
        service_account=service_account or None,
    )
    result = SubmitResult(
        host=up.host,
        pipeline_id=up.pipeline_id,
        pipeline_name=pipeline_name,
        version_id=up.version_id,
        version_name=up.version_name,
        experiment_id=up.experiment_id,
        experiment=experiment,
        run_id=run.run_id,
        run_name=run_name,
        run_url=f"{up.ui}/#/runs/details/{run.run_id}",
        created_pipeline=up.created,
        package_sha256=digest,
        server_version=up.server_version,
        service_account=service_account or "",
        caching=caching,
    )
    log.info(
        "submitted %s version %s: run %s (%s)",
        pipeline_name,
        result.version_name,
        result.run_id,
        result.run_url,
    )
    return result


MAX_CONCURRENCY = (1, 10)
"""The bounds KFP's API server puts on a recurring run's ``max_concurrency``."""


def schedule(
    package_path: str | Path,
    *,
    host: str,
    pipeline_name: str,
    cron: str | None = None,
    interval_s: int | str | None = None,
    max_concurrency: int = 1,
    catchup: bool = False,
    start_time: datetime | str | None = None,
    end_time: datetime | str | None = None,
    enabled: bool = True,
    name: str | None = None,
    version_name: str | None = None,
    experiment: str = "conductor",
    params: dict[str, Any] | None = None,
    namespace: str | None = None,
    existing_token: str | None = None,
    service_account: str | None = None,
    caching: bool = True,
) -> ScheduleResult:
    """Upload ``package_path`` as :func:`submit` does and create a recurring run of that version.

    Args:
        cron: When to run: standard five-field cron (``0 2 * * *``: 02:00 every day), KFP's
            six-field form (seconds first) or a descriptor (``@daily``); see
            :func:`.cron.kfp_cron`. Times are the cluster's (UTC on most).
        interval_s: Or every so many seconds (``3600``, or ``"6h"``); exactly one of the two.
        max_concurrency: Runs of this schedule at once (KFP allows 1 to 10); a run due while
            that many are going waits.
        catchup: Whether runs missed while the schedule was paused (or before a ``start_time``
            in the past) are started afterwards, one per missed time (KFP's ``no_catchup``
            inverted); default: only the latest.
        start_time, end_time: When the schedule starts and ends (a ``datetime``, or ISO 8601;
            without a zone, UTC); default: from now, for ever.
        enabled: False: created paused (enable it in the KFP UI).
        name: The recurring run's name; default ``"<pipeline_name> <schedule>"``.
        The other arguments are :func:`submit`'s.

    Returns:
        The pipeline, version and experiment, the recurring run's id and its URL in the KFP UI.

    Raises:
        SubmitError: as :func:`submit`; a schedule or bound KFP would refuse is refused before
            anything is uploaded.
    """
    from conductor_pipeline_runner.cron import interval_seconds, kfp_cron

    try:
        if (cron is None) == (interval_s is None):
            raise ConductorError("give a cron schedule or an interval, exactly one of the two")
        kfp_schedule = kfp_cron(cron) if cron is not None else ""
        seconds = interval_seconds(interval_s) if interval_s is not None else 0
        low, high = MAX_CONCURRENCY
        if not low <= int(max_concurrency) <= high:
            raise ConductorError(
                f"max concurrency {max_concurrency}: Kubeflow Pipelines allows {low} to {high}"
            )
        start, end = _timestamp(start_time, "start"), _timestamp(end_time, "end")
        if start and end and end <= start:
            raise ConductorError(f"the end ({end}) is not after the start ({start})")
    except ConductorError as exc:
        raise SubmitError(f"scheduling {pipeline_name!r}: {exc}") from None
    what = f"cron {kfp_schedule}" if kfp_schedule else f"every {seconds} s"
    with _package(package_path, caching) as (path, digest):
        up = _upload(
            path,
            digest,
            host=host,
            pipeline_name=pipeline_name,
            version_name=version_name,
            experiment=experiment,
            namespace=namespace,
            existing_token=existing_token,
            service_account=service_account,
            caching=caching,
        )
    name = name or f"{pipeline_name} {what}"
    recurring = up.session.call(
        f"creating recurring run {name!r}",
        up.client.create_recurring_run,
        experiment_id=up.experiment_id,
        job_name=name,
        description=f"conductor-core {__version__}: {what}",
        start_time=start or None,
        end_time=end or None,
        interval_second=seconds or None,
        cron_expression=kfp_schedule or None,
        max_concurrency=int(max_concurrency),
        no_catchup=not catchup,
        params=dict(params or {}),
        pipeline_id=up.pipeline_id,
        version_id=up.version_id,
        enabled=enabled,
        service_account=service_account or None,
    )
    result = ScheduleResult(
        host=up.host,
        pipeline_id=up.pipeline_id,
        pipeline_name=pipeline_name,
        version_id=up.version_id,
        version_name=up.version_name,
        experiment_id=up.experiment_id,
        experiment=experiment,
        recurring_run_id=recurring.recurring_run_id,
        recurring_run_name=name,
        recurring_run_url=f"{up.ui}/#/recurringrun/details/{recurring.recurring_run_id}",
        cron=kfp_schedule,
        interval_s=seconds,
        max_concurrency=int(max_concurrency),
        catchup=catchup,
        enabled=enabled,
        start_time=start,
        end_time=end,
        created_pipeline=up.created,
        package_sha256=digest,
        server_version=up.server_version,
        service_account=service_account or "",
        caching=caching,
    )
    log.info("scheduled %s version %s: %s (%s)", pipeline_name, up.version_name, what, name)
    return result


def _timestamp(value: datetime | str | None, what: str) -> str:
    """RFC 3339 in UTC (what KFP's API takes), from a datetime or ISO 8601 text (no zone: UTC)."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise ConductorError(
                f"{what} time {value!r} is not ISO 8601 (e.g. 2026-01-31T02:00:00Z)"
            ) from None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class _Uploaded:
    """A pipeline version uploaded and the experiment to file runs under."""

    client: Any
    session: _Session
    host: str
    ui: str
    pipeline_id: str
    version_id: str
    version_name: str
    experiment_id: str
    created: bool
    server_version: str


@contextlib.contextmanager
def _package(package_path: str | Path, caching: bool):
    """``(path, sha256)`` of the package to upload: ``package_path`` itself, or without
    ``caching`` a copy (same file name, in a temporary folder) with the cache off for every
    task."""
    path = Path(package_path)
    if not path.is_file():
        raise SubmitError(
            f"pipeline package not found: {path}; compile it first (conductor pipeline compile)"
        )
    if caching:
        yield path, hashlib.sha256(path.read_bytes()).hexdigest()
        return
    import tempfile

    data = without_caching(path.read_text(encoding="utf-8")).encode("utf-8")
    with tempfile.TemporaryDirectory(prefix="conductor-nocache-") as folder:
        copy = Path(folder) / path.name
        copy.write_bytes(data)
        yield copy, hashlib.sha256(data).hexdigest()


def without_caching(package: str) -> str:
    """The compiled pipeline ``package`` (YAML) with KFP's execution cache off for every task of
    every DAG (``cachingOptions.enableCache: false``; a task's cache key is kept). The other
    documents (the Kubernetes platform spec) are kept as they are."""
    import yaml

    docs = list(yaml.safe_load_all(package))
    spec = docs[0] if docs else None
    if not isinstance(spec, dict) or "root" not in spec:
        raise SubmitError("--no-cache: the package is not a KFP pipeline spec (no root)")
    dags = [spec["root"].get("dag") or {}]
    dags += [c.get("dag") or {} for c in (spec.get("components") or {}).values()]
    for dag in dags:
        for task in (dag.get("tasks") or {}).values():
            task["cachingOptions"] = {**(task.get("cachingOptions") or {}), "enableCache": False}
    return yaml.safe_dump_all(docs, sort_keys=False)


def _upload(
    path: Path,
    digest: str,
    *,
    host: str,
    pipeline_name: str,
    version_name: str | None,
    experiment: str,
    namespace: str | None,
    existing_token: str | None,
    service_account: str | None,
    caching: bool,
) -> _Uploaded:
    """Check the server, upload the pipeline (or a version of it) and get or create the
    experiment: what :func:`submit` and :func:`schedule` do before they start anything."""
    if not pipeline_name or not pipeline_name.strip():
        raise SubmitError("pipeline_name is empty; give the pipeline a name")
    if service_account is not None and not (
        len(service_account) <= 253 and _SERVICE_ACCOUNT.match(service_account)
    ):
        raise SubmitError(
            f"service account {service_account!r} is not a valid Kubernetes name (lowercase "
            "letters, digits, '-' and '.')"
        )
    host = _normalise_host(host)
    scrub = _Scrubber(existing_token)
    server_version = _check_server_version(host, _probe(host, existing_token, scrub))

    kfp = require("kfp", "pipelines", "submitting pipelines to Kubeflow")
    with _quiet():
        client = kfp.Client(
            host=host,
            existing_token=existing_token,
            namespace=namespace or "kubeflow",  # kfp.Client's "not given"
        )
    session = _Session(client, host, scrub)

    description = f"conductor-core {__version__}; package sha256 {digest}" + (
        "" if caching else "; execution cache off (--no-cache)"
    )
    pipeline_id = session.find_pipeline(pipeline_name, namespace)
    created = False
    if pipeline_id is None:
        uploaded = session.call(
            f"uploading pipeline {pipeline_name!r}",
            client.upload_pipeline,
            pipeline_package_path=str(path),
            pipeline_name=pipeline_name,
            description=description,
            namespace=namespace,
            conflict=None,  # taken meanwhile: upload a version instead (below)
        )
        if uploaded is not None:
            pipeline_id, created = uploaded.pipeline_id, True
            version = session.newest_version(pipeline_id, pipeline_name)
        else:
            pipeline_id = session.find_pipeline(pipeline_name, namespace)
            if pipeline_id is None:
                raise SubmitError(
                    f"uploading pipeline {pipeline_name!r}: the server says it exists but "
                    "lists no pipeline of that name; check the namespace"
                )
    if not created:
        version_name = version_name or default_version_name(digest)
        version = session.call(
            f"uploading version {version_name!r} of pipeline {pipeline_name!r}",
            client.upload_pipeline_version,
            pipeline_package_path=str(path),
            pipeline_version_name=version_name,
            pipeline_id=pipeline_id,
            description=description,
            conflict=(
                f"version {version_name!r} of pipeline {pipeline_name!r} already exists; "
                "pass another version name"
            ),
        )

    exp = session.call(
        f"getting or creating experiment {experiment!r}",
        client.create_experiment,
        name=experiment,
        namespace=namespace,
    )
    return _Uploaded(
        client=client,
        session=session,
        host=host,
        ui=_normalise_host(os.environ.get("KF_PIPELINES_UI_ENDPOINT") or host),
        pipeline_id=pipeline_id,
        version_id=version.pipeline_version_id,
        version_name=version.display_name or version.name or "",
        experiment_id=exp.experiment_id,
        created=created,
        server_version=server_version,
    )


# -- helpers -------------------------------------------------------------------------------------


RUN_STATES_GOING = frozenset(
    {"PENDING", "RUNNING", "PAUSED", "CANCELING", "RUNTIME_STATE_UNSPECIFIED"}
)
"""KFP run states (v2beta1 ``V2beta1RuntimeState``) of a run that has not ended."""


def close_stale_runs(
    *,
    host: str,
    existing_token: str | None = None,
    namespace: str | None = None,
    tracking_uri: str | None = None,
    log: Any = print,
) -> list[tuple[str, str]]:
    """Close the MLflow runs that ended KFP runs left RUNNING (a run terminated from the UI: KFP
    sets the workflow's deadline to zero and the exit handler's pod may never run), asking the
    KFP API at ``host`` how each ended: ``SUCCEEDED``/``SKIPPED`` -> FINISHED, ``CANCELED``
    -> KILLED, ``FAILED`` -> FAILED. A run still going, one the server does not know (a local
    run's, a deleted one: named in ``log``) and one it cannot be asked about stay open.
    Returns ``(KFP run id, MLflow status)`` of every run closed."""
    from conductor_core.pipeline_steps.context import mlflow_status
    from conductor_core.track.pipeline_runs import close_stale_pipeline_runs

    host = _normalise_host(host)
    scrub = _Scrubber(existing_token)
    _check_server_version(host, _probe(host, existing_token, scrub))
    kfp = require("kfp", "pipelines", "asking Kubeflow Pipelines how runs ended")
    with _quiet():
        client = kfp.Client(
            host=host, existing_token=existing_token, namespace=namespace or "kubeflow"
        )
    session = _Session(client, host, scrub)

    def ended(kfp_run_id: str) -> str | None:
        try:
            run = session.call(f"reading run {kfp_run_id}", client.get_run, run_id=kfp_run_id)
        except SubmitError as exc:
            log(f"{kfp_run_id}: left open ({exc})")
            return None
        state = str(run.state or "RUNTIME_STATE_UNSPECIFIED").upper()
        return None if state in RUN_STATES_GOING else mlflow_status(state)

    return close_stale_pipeline_runs(ended, tracking_uri=tracking_uri)


def _normalise_host(host: str) -> str:
    host = (host or "").strip().rstrip("/")
    if not host:
        raise SubmitError("host is empty; give the Kubeflow Pipelines endpoint URL")
    if not host.startswith(("http://", "https://")):
        host = "https://" + host
    return host


class _Scrubber:
    """Removes the token from any text that may reach a message (defence in depth)."""

    def __init__(self, token: str | None) -> None:
        self.token = token

    def __call__(self, text: str) -> str:
        text = " ".join(str(text).split())  # one line
        if self.token:
            text = text.replace(self.token, "***")
        return text[:_MAX_DETAIL]


def _probe(host: str, token: str | None, scrub: _Scrubber) -> dict[str, Any]:
    """GET the healthz endpoint once, with a timeout: a clear error now instead of kfp.Client's
    retries (5 x 5 s) or an endless wait on a host that does not answer. Returns the answer's
    JSON object (empty when it is not one)."""
    request = urllib.request.Request(host + HEALTHZ_PATH, headers={"Accept": "application/json"})
    if token:
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    # Like kfp.Client (urllib3): no proxy from the environment, certifi's CA bundle if present.
    handlers: list[Any] = [urllib.request.ProxyHandler({})]
    with contextlib.suppress(ImportError):
        import ssl

        import certifi

        context = ssl.create_default_context(cafile=certifi.where())
        handlers.append(urllib.request.HTTPSHandler(context=context))
    opener = urllib.request.build_opener(*handlers)
    try:
        with opener.open(request, timeout=PROBE_TIMEOUT_S) as resp:
            body = resp.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise SubmitError(
                f"Kubeflow Pipelines at {host} rejected the credentials (HTTP {exc.code}); "
                "check the token (and the namespace) you gave"
            ) from None
        raise SubmitError(
            f"Kubeflow Pipelines at {host} answered HTTP {exc.code} on {HEALTHZ_PATH}; "
            "check that --host is the KFP API endpoint (e.g. http://localhost:8080 for "
            "`kubectl port-forward -n kubeflow svc/ml-pipeline-ui 8080:80`)"
        ) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise SubmitError(
            f"cannot reach Kubeflow Pipelines at {host}: {scrub(str(reason))}; check --host and "
            "that the endpoint is reachable from here (port-forward, VPN)"
        ) from None
    try:
        health = json.loads(body)
    except ValueError:
        return {}
    return health if isinstance(health, dict) else {}


def _check_server_version(host: str, health: dict[str, Any]) -> str:
    """The KFP backend's version from a healthz answer; raises :class:`SubmitError` when it is
    older than :data:`KFP_BACKEND`, warns (and returns "") when it reports none."""
    reported = next((str(health[key]) for key in VERSION_FIELDS if health.get(key)), "")
    check = check_version(KFP_BACKEND, reported)
    if check.too_old:
        raise SubmitError(check.message(f"at {host}"))
    if not check.known:
        log.warning("%s", check.message(f"at {host}"))
        return ""
    return check.reported


@contextlib.contextmanager
def _quiet():
    """kfp.Client prints links and warns about its server version: keep stdout clean (the
    links are in the result)."""
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()) as out:
        warnings.simplefilter("ignore", FutureWarning)
        yield
    if out.getvalue().strip():
        log.debug("kfp: %s", out.getvalue().strip())


def _server_reason(exc: Any, scrub: _Scrubber) -> str:
    """The server's message from an ``ApiException`` body (either KFP error shape)."""
    body = getattr(exc, "body", None) or ""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    message = ""
    try:
        data = json.loads(body)
        if isinstance(data, dict):
            message = str(
                data.get("error_message") or data.get("message") or data.get("error") or ""
            )
    except ValueError:
        message = body
    status = getattr(exc, "status", None)
    head = f"HTTP {status} {getattr(exc, 'reason', '') or ''}".strip() if status else "error"
    return scrub(f"{head}: {message}" if message else head)


class _Session:
    """Runs ``kfp.Client`` calls, turning their exceptions into one-line :class:`SubmitError`."""

    def __init__(self, client: Any, host: str, scrub: _Scrubber) -> None:
        self.client = client
        self.host = host
        self.scrub = scrub

    def call(self, what: str, fn: Any, *, conflict: str | None = "", **kwargs: Any) -> Any:
        """``fn(**kwargs)``; on HTTP 409 raise ``conflict`` as the message, or return ``None``
        when ``conflict`` is ``None``."""
        import kfp_server_api
        import urllib3

        try:
            with _quiet():
                return fn(**kwargs)
        except kfp_server_api.ApiException as exc:
            if exc.status == 409 and conflict is None:
                return None
            if exc.status == 409 and conflict:
                raise SubmitError(f"{what}: {conflict}") from None
            if exc.status in (401, 403):
                raise SubmitError(
                    f"{what}: Kubeflow Pipelines at {self.host} refused it "
                    f"({_server_reason(exc, self.scrub)}); check the token and the namespace"
                ) from None
            raise SubmitError(
                f"{what}: rejected by Kubeflow Pipelines at {self.host} "
                f"({_server_reason(exc, self.scrub)})"
            ) from None
        except urllib3.exceptions.HTTPError as exc:
            raise SubmitError(
                f"{what}: lost the connection to Kubeflow Pipelines at {self.host} "
                f"({self.scrub(type(exc).__name__)}); check that the endpoint is up"
            ) from None
        except ValueError as exc:  # kfp's own checks (names, duplicates)
            raise SubmitError(f"{what}: {self.scrub(str(exc))}") from None

    def find_pipeline(self, name: str, namespace: str | None) -> str | None:
        """The id of the pipeline named ``name`` (display name), or ``None``."""
        flt = json.dumps(
            {"predicates": [{"operation": "EQUALS", "key": "display_name", "stringValue": name}]}
        )
        found = self.call(
            f"looking up pipeline {name!r}",
            self.client.list_pipelines,
            filter=flt,
            namespace=namespace,
            page_size=2,
        )
        pipelines = [p for p in (found.pipelines or []) if p.display_name == name]
        if len(pipelines) > 1:
            raise SubmitError(
                f"looking up pipeline {name!r}: {len(pipelines)} pipelines have that name; "
                "rename or delete the duplicates in the KFP UI"
            )
        return pipelines[0].pipeline_id if pipelines else None

    def newest_version(self, pipeline_id: str, pipeline_name: str) -> Any:
        """The newest version of a pipeline (the one an upload just created)."""
        found = self.call(
            f"reading the versions of pipeline {pipeline_name!r}",
            self.client.list_pipeline_versions,
            pipeline_id=pipeline_id,
            page_size=1,
            sort_by="created_at desc",
        )
        if not found.pipeline_versions:
            raise SubmitError(
                f"pipeline {pipeline_name!r} was uploaded but KFP lists no version of it"
            )
        return found.pipeline_versions[0]
