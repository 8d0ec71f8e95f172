"""Launch a training stage as a Kubeflow Trainer ``TrainJob`` and wait for it.

:func:`launch_and_wait` is what the training pipeline component calls when one GPU node is not
enough. On the official ``kubernetes`` client (imported lazily) it:

1. creates the ConfigMap with the stage config, then the TrainJob (HTTP 409: the job of this
   task already exists, e.g. a retried task: it attaches to it instead of failing). The TrainJob
   is created with strict field validation, so a Kubeflow Trainer older than
   :data:`~conductor_core.cluster.versions.TRAINER` rejects it naming the fields it lacks
   (instead of silently dropping ``runtimePatches``). In a pipeline pod (``POD_NAME``/``POD_UID``
   set from the downward API) both objects are owned by the run's Argo Workflow (its name from
   ``WORKFLOW_NAME``; ``trainjob.owner``), so they outlive the launcher pod and are
   garbage-collected with the run, or by that pod (``owner: pod``; a retried task's new pod is
   then added as a second owner when it attaches);
2. watches the TrainJob in short windows (``watch_timeout_s``), re-reading it at the end of each
   window and after a dropped connection or an expired watch (HTTP 410), and decides from the
   Trainer's ``Complete``/``Failed`` conditions;
3. streams the rank-0 pod's log (pod of the JobSet ``node`` job with index 0) into ``log``;
4. enforces an overall deadline; on failure, deadline or cancellation (SIGINT or SIGTERM, turned
   into :class:`TrainJobCancelledError`) it deletes the TrainJob and its ConfigMap (unless
   ``delete_on_failure`` is off) and raises a :class:`ClusterError` subclass. A SIGTERM while
   the owning Workflow goes on (a drained node or an evicted pod, not a terminated run) leaves
   the job running for the task's retry, which attaches to it by its name. A completed job is
   kept unless ``delete_on_success``.
"""

from __future__ import annotations

import collections
import contextlib
import datetime as dt
import json
import math
import signal
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor_core.cluster.settings import ClusterSettings
from conductor_core.cluster.trainjob import (
    LABEL_RUN,
    LABEL_TASK,
    NODE,
    TRAINER_API_VERSION,
    TRAINER_GROUP,
    TRAINER_VERSION,
    TRAINJOB_KIND,
    TRAINJOB_PLURAL,
    WORKFLOW_GROUP,
    WORKFLOW_KIND,
    WORKFLOW_PLURAL,
    WORKFLOW_VERSION,
    JobState,
    Owner,
    TrainJobManifests,
    TrainJobRequest,
    build_manifests,
    job_state,
    owner_pod_from_env,
    rank0_pod_selector,
    workflow_name_from_env,
    workflow_owner,
    workflow_shutting_down,
)
from conductor_core.cluster.versions import TRAINER
from conductor_core.errors import ConductorError

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LOG_TAIL_LINES = 30
_TRANSIENT_STATUS = {0, 410, 429, 500, 502, 503, 504}


class ClusterError(ConductorError):
    """A TrainJob could not be launched or watched (API error, permissions, conflicts)."""


class TrainJobFailedError(ClusterError):
    """The TrainJob reached its ``Failed`` condition."""

    def __init__(self, name: str, state: JobState, log_tail: list[str]) -> None:
        tail = "\n".join(log_tail[-10:])
        why = ": ".join(part for part in (state.reason, state.message) if part) or "no reason"
        super().__init__(
            f"TrainJob {name} failed ({why})"
            + (f"; last rank-0 log lines:\n{tail}" if tail else "")
        )
        self.name = name
        self.state = state
        self.log_tail = log_tail


class TrainJobDeadlineError(ClusterError):
    """The TrainJob did not finish within ``trainjob.deadline_s``."""


class TrainJobCancelledError(ClusterError):
    """The launch was cancelled (Ctrl-C or SIGTERM) before the TrainJob finished."""


@dataclass(frozen=True)
class LaunchResult:
    """How a launch ended."""

    name: str
    """TrainJob name."""
    namespace: str
    condition: str
    """Final condition type: ``Complete``."""
    reason: str
    duration_s: float
    """Seconds from the launch to the final condition."""
    attached: bool
    """Whether the TrainJob already existed (a retried task) and was attached to."""


def load_api_client(kubeconfig: str | None = None) -> Any:
    """A ``kubernetes.client.ApiClient``: the in-cluster service account when running in a pod,
    else the kubeconfig (``kubeconfig`` or the default ``~/.kube/config``/``$KUBECONFIG``)."""
    from kubernetes import client, config

    cfg = client.Configuration()
    try:
        if kubeconfig is not None:
            raise config.ConfigException("explicit kubeconfig")
        config.load_incluster_config(client_configuration=cfg)
    except config.ConfigException:
        try:
            config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
        except (config.ConfigException, FileNotFoundError, OSError) as exc:
            raise ClusterError(
                f"no Kubernetes credentials: not in a pod and no usable kubeconfig ({exc}); "
                "run inside the cluster or set KUBECONFIG"
            ) from exc
    return client.ApiClient(cfg)


def resolve_namespace(settings: ClusterSettings, namespace: str | None = None) -> str:
    """``namespace``, else ``settings.namespace``, else the pod's own namespace, else default."""
    if namespace:
        return namespace
    if settings.namespace:
        return settings.namespace
    with contextlib.suppress(OSError):
        own = SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip()
        if own:
            return own
    return "default"


def _status(exc: BaseException) -> int | None:
    return getattr(exc, "status", None) if type(exc).__name__ == "ApiException" else None


def _is_transient(exc: BaseException) -> bool:
    """A dropped connection, a read timeout, an expired watch or a 5xx/429 answer."""
    import urllib3

    if isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError, TimeoutError)):
        return True
    status = _status(exc)
    return status in _TRANSIENT_STATUS


def _api_body_message(exc: BaseException) -> str:
    """The ``message`` of a Kubernetes ``Status`` in an ``ApiException``'s body (or "")."""
    body = getattr(exc, "body", None) or ""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(body)
    except ValueError:
        return ""
    return str(data.get("message") or "") if isinstance(data, dict) else ""


def _unknown_fields_error(exc: BaseException) -> str | None:
    """The server's message when it refused a TrainJob for fields its schema does not have
    (HTTP 400 under strict field validation), else None."""
    if _status(exc) != 400:
        return None
    message = _api_body_message(exc)
    if "unknown field" not in message and "field not declared in schema" not in message:
        return None
    return " ".join(message.split())[:500]


def _api_message(exc: BaseException) -> str:
    status = _status(exc)
    if status is None:
        return f"{type(exc).__name__}: {exc}"
    reason = getattr(exc, "reason", "") or ""
    hint = ""
    if status in (401, 403):
        hint = (
            "; grant the pipeline's service account the TrainJob permissions "
            "(helm install the charts/conductor-training-rbac chart)"
        )
    elif status == 404:
        hint = "; is Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1) installed?"
    return f"HTTP {status} {reason}{hint}"


class _CancelOnSignal:
    """While active (main thread only), SIGTERM and SIGINT cancel the launch.

    The handler raises :class:`TrainJobCancelledError` at once and also sets :attr:`requested`,
    which :meth:`_Launch.wait` checks at every poll: an exception raised by a signal handler is
    lost when it lands in a finalizer (Python prints "Exception ignored" and goes on), and a
    lost Ctrl-C once left a TrainJob running until its deadline.
    """

    def __init__(self) -> None:
        self.requested = threading.Event()
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _CancelOnSignal:
        if threading.current_thread() is threading.main_thread():

            def _cancel(signum: int, frame: Any) -> None:
                self.requested.set()
                raise TrainJobCancelledError(f"received {signal.Signals(signum).name}")

            for signum in (signal.SIGTERM, signal.SIGINT):
                self._previous[signum] = signal.signal(signum, _cancel)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


def _parse_timestamp(text: str) -> tuple[dt.datetime, int] | None:
    """An RFC 3339 (nano) timestamp as ``(datetime to the second, nanoseconds)``."""
    try:
        main, _, rest = text.rstrip("Z").partition(".")
        when = dt.datetime.strptime(main, "%Y-%m-%dT%H:%M:%S")
        nanos = int((rest or "0")[:9].ljust(9, "0"))
    except ValueError:
        return None
    return when, nanos


class _Rank0LogFollower(threading.Thread):
    """Follows the rank-0 pod's log (``timestamps=True``) and hands each line to ``log``; after a
    dropped connection it reconnects and skips lines it already passed on."""

    def __init__(
        self,
        core: Any,
        name: str,
        namespace: str,
        log: Callable[[str], None],
        read_timeout_s: float,
    ) -> None:
        super().__init__(name=f"logs-{name}", daemon=True)
        self.core = core
        self.job = name
        self.namespace = namespace
        self.log = log
        self.read_timeout_s = read_timeout_s
        self.stop_event = threading.Event()
        self._wake = threading.Event()  # cuts the waits between looks for the pod
        self.finishing = False  # the job ended: no more waiting for the pod
        self.tail: collections.deque[str] = collections.deque(maxlen=LOG_TAIL_LINES)
        self.last: tuple[dt.datetime, int] | None = None
        self.error: BaseException | None = None
        self._response: Any = None
        self.streaming = False  # the rank-0 pod was found and its log is being followed

    def _find_pod(self) -> Any | None:
        selector = rank0_pod_selector(self.job)
        wanted = dict(item.split("=", 1) for item in selector.split(","))
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=selector)
        for pod in pods.items:  # also checked here: some servers ignore the selector
            labels = pod.metadata.labels or {}
            if all(labels.get(k) == v for k, v in wanted.items()):
                return pod
        return None

    def _follow(self, pod_name: str) -> bool:
        """Stream once; True when the stream ended (the container exited)."""
        kwargs: dict[str, Any] = {}
        if self.last is not None:
            age = (dt.datetime.now(dt.UTC).replace(tzinfo=None) - self.last[0]).total_seconds()
            kwargs["since_seconds"] = max(1, math.ceil(age) + 1)
        resp = self.core.read_namespaced_pod_log(
            pod_name,
            self.namespace,
            container=NODE,
            follow=True,
            timestamps=True,
            _preload_content=False,
            _request_timeout=(10, self.read_timeout_s),
            **kwargs,
        )
        self._response = resp
        try:
            buffer = b""
            for chunk in resp.stream(4096):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for raw in lines:
                    self._emit(raw.decode("utf-8", errors="replace"))
                if self.stop_event.is_set():
                    return False
            if buffer:
                self._emit(buffer.decode("utf-8", errors="replace"))
            return True
        finally:
            self._response = None
            with contextlib.suppress(Exception):
                resp.release_conn()

    def _emit(self, line: str) -> None:
        stamp_text, sep, text = line.partition(" ")
        stamp = _parse_timestamp(stamp_text) if sep else None
        if stamp is None:
            text = line
        elif self.last is not None and stamp <= self.last:
            return  # already passed on before a reconnect
        else:
            self.last = stamp
        self.tail.append(text)
        self.log(text)

    def run(self) -> None:
        pod_name: str | None = None
        while not self.stop_event.is_set():
            try:
                if pod_name is None:
                    pod = self._find_pod()
                    if pod is None or (pod.status and pod.status.phase == "Pending"):
                        if self.finishing:
                            return
                        self._wake.wait(2.0)
                        continue
                    pod_name = pod.metadata.name
                    self.streaming = True
                if self._follow(pod_name):
                    return
            except BaseException as exc:  # the job's outcome never depends on its log
                if self.finishing or (not _is_transient(exc) and _status(exc) not in (400, 404)):
                    self.error = exc
                    return
                if _status(exc) == 404:
                    pod_name = None  # pod replaced (restart): find the new one
                self._wake.wait(1.0)

    def stop(self, drain_s: float) -> None:
        """Let the log finish for up to ``drain_s`` seconds (a job that ended before its pod was
        seen gets one last look for it), then stop following."""
        self.finishing = True
        self._wake.set()
        if drain_s > 0:
            self.join(timeout=drain_s)
        self.stop_event.set()
        resp = self._response
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.close()
        self.join(timeout=2.0)


class _Launch:
    """One launch: the API objects, the deadline and the cleanup."""

    def __init__(
        self,
        manifests: TrainJobManifests,
        settings: ClusterSettings,
        api_client: Any,
        log: Callable[[str], None],
        clock: Callable[[], float],
        cancel: threading.Event | None = None,
        owner: Owner | None = None,
    ) -> None:
        from kubernetes import client

        self.owner = owner
        """The owner of the TrainJob and ConfigMap: the run's Workflow or the launching pod
        (None: no owner)."""
        self.cancel = cancel or threading.Event()
        """Set when a signal cancelled the launch (:class:`_CancelOnSignal`)."""
        self.m = manifests
        self.settings = settings
        self.log = log
        self.clock = clock
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.start = clock()
        self.deadline = self.start + settings.trainjob.deadline_s
        self.owns_configmap = False  # created here (or this task's, once the job is owned)
        self.owns_job = False  # created here, or attached to after checking it is this task's

    # -- API calls ----------------------------------------------------------------------------

    def _retry(self, what: str, call: Callable[[], Any]) -> Any:
        """``call()``, retried on transient errors with backoff until the deadline."""
        delay = 0.5
        while True:
            try:
                return call()
            except Exception as exc:
                if not _is_transient(exc):
                    raise
                if self.clock() + delay >= self.deadline:
                    raise ClusterError(f"{what}: {_api_message(exc)} until the deadline") from exc
                self.log(f"[launcher] {what}: {_api_message(exc)}; retrying in {delay:.1f}s")
                time.sleep(delay)
                delay = min(delay * 2, 10.0)

    def _get_job(self) -> dict[str, Any]:
        return self._retry(
            f"reading TrainJob {self.m.name}",
            lambda: self.custom.get_namespaced_custom_object(
                TRAINER_GROUP, TRAINER_VERSION, self.m.namespace, TRAINJOB_PLURAL, self.m.name
            ),
        )

    def create(self) -> bool:
        """Create the ConfigMap and the TrainJob; True when the TrainJob already existed."""
        configmap_existed = False
        try:
            self._retry(
                f"creating ConfigMap {self.m.configmap_name}",
                lambda: self.core.create_namespaced_config_map(self.m.namespace, self.m.configmap),
            )
            self.owns_configmap = True
        except Exception as exc:
            if _status(exc) != 409:
                raise ClusterError(
                    f"creating ConfigMap {self.m.configmap_name} in {self.m.namespace}: "
                    f"{_api_message(exc)}"
                ) from exc
            configmap_existed = True  # refreshed below once the job is known to be ours
        try:
            created = self._retry(
                f"creating TrainJob {self.m.name}",
                lambda: self.custom.create_namespaced_custom_object(
                    TRAINER_GROUP,
                    TRAINER_VERSION,
                    self.m.namespace,
                    TRAINJOB_PLURAL,
                    self.m.trainjob,
                    field_validation="Strict",
                ),
            )
            attached = False
        except Exception as exc:
            unknown = _unknown_fields_error(exc)
            if unknown is not None:
                raise ClusterError(
                    f"creating TrainJob {self.m.name}: the cluster's TrainJob API does not know "
                    f"fields of it ({unknown}); {TRAINER.service} {TRAINER.minimum_text} or "
                    f"newer is needed because {TRAINER.reason}"
                ) from exc
            if _status(exc) != 409:
                raise ClusterError(
                    f"creating TrainJob {self.m.name} in {self.m.namespace}: {_api_message(exc)}"
                ) from exc
            created = self._get_job()
            self._check_same_task(created)
            attached = True
            self.log(f"[launcher] TrainJob {self.m.name} already exists: attaching to it")
            self._add_owner(created)
        self.owns_job = self.owns_configmap = True
        if configmap_existed and not attached:  # left by an earlier try that made no job
            try:
                self._retry(
                    f"updating ConfigMap {self.m.configmap_name}",
                    lambda: self.core.patch_namespaced_config_map(
                        self.m.configmap_name, self.m.namespace, {"data": self.m.configmap["data"]}
                    ),
                )
            except Exception as exc:
                raise ClusterError(
                    f"updating ConfigMap {self.m.configmap_name}: {_api_message(exc)}"
                ) from exc
        self._own_configmap(created)
        return attached

    def _check_same_task(self, existing: dict[str, Any]) -> None:
        mine = self.m.trainjob["metadata"]["labels"]
        theirs = (existing.get("metadata") or {}).get("labels") or {}
        for key in (LABEL_RUN, LABEL_TASK):
            if theirs.get(key) != mine.get(key):
                raise ClusterError(
                    f"TrainJob {self.m.name} already exists in {self.m.namespace} but belongs to "
                    f"another task ({key}={theirs.get(key)!r}, expected {mine.get(key)!r}); "
                    "delete it or use another run"
                )

    def _add_owner(self, trainjob: dict[str, Any]) -> None:
        """Add this try's owner to the owners of a TrainJob an earlier try of the task created
        (with ``owner: pod`` a retried task runs in a new pod; the run's Workflow is the same
        owner for every try): the job then lives until every owner is gone, rather than being
        collected with the first pod while this one waits for it."""
        if self.owner is None:
            return
        owners = list((trainjob.get("metadata") or {}).get("ownerReferences") or [])
        if any(ref.get("uid") == self.owner.uid for ref in owners):
            return
        owners.append(self.owner.reference())
        try:
            self._retry(
                f"adding {self.owner.kind} {self.owner.name} to the owners of TrainJob "
                f"{self.m.name}",
                lambda: self.custom.patch_namespaced_custom_object(
                    TRAINER_GROUP,
                    TRAINER_VERSION,
                    self.m.namespace,
                    TRAINJOB_PLURAL,
                    self.m.name,
                    {"metadata": {"ownerReferences": owners}},
                ),
            )
        except Exception as exc:  # the job still runs; it may only go away with the old pod
            self.log(
                f"[launcher] could not add {self.owner.kind} {self.owner.name} to the owners "
                f"of TrainJob {self.m.name}: {_api_message(exc)}"
            )

    def _own_configmap(self, trainjob: dict[str, Any]) -> None:
        """Make the TrainJob the ConfigMap's owner, so that deleting the job also removes it."""
        uid = (trainjob.get("metadata") or {}).get("uid")
        if not uid:
            return
        owner = {
            "apiVersion": TRAINER_API_VERSION,
            "kind": TRAINJOB_KIND,
            "name": self.m.name,
            "uid": uid,
            "blockOwnerDeletion": False,
        }
        try:
            self.core.patch_namespaced_config_map(
                self.m.configmap_name, self.m.namespace, {"metadata": {"ownerReferences": [owner]}}
            )
        except Exception as exc:  # cosmetic: cleanup deletes the ConfigMap explicitly anyway
            self.log(f"[launcher] could not set the ConfigMap's owner: {_api_message(exc)}")

    def run_goes_on(self) -> bool:
        """Whether the job should outlive this launcher, stopped by a signal: it is this task's
        and owned by the run's Workflow, which is not being terminated (a drained node or an
        evicted pod, whose task a retry runs again). False when that cannot be read: a launcher
        that cannot tell does not leave GPUs running."""
        owner = self.owner
        if owner is None or owner.kind != WORKFLOW_KIND or not self.owns_job:
            return False
        try:
            workflow = self.custom.get_namespaced_custom_object(
                WORKFLOW_GROUP, WORKFLOW_VERSION, self.m.namespace, WORKFLOW_PLURAL, owner.name
            )
        except Exception as exc:
            self.log(f"[launcher] could not read Workflow {owner.name}: {_api_message(exc)}")
            return False
        return not workflow_shutting_down(workflow)

    def delete(self) -> None:
        """Delete the TrainJob (pods in the foreground) and the ConfigMap, those of this task
        only; missing ones are fine."""
        from kubernetes import client

        body = client.V1DeleteOptions(propagation_policy="Foreground")
        targets = (
            (
                f"TrainJob {self.m.name}",
                lambda: self.custom.delete_namespaced_custom_object(
                    TRAINER_GROUP,
                    TRAINER_VERSION,
                    self.m.namespace,
                    TRAINJOB_PLURAL,
                    self.m.name,
                    body=body,
                ),
            ),
            (
                f"ConfigMap {self.m.configmap_name}",
                lambda: self.core.delete_namespaced_config_map(
                    self.m.configmap_name, self.m.namespace
                ),
            ),
        )
        for (what, call), owned in zip(targets, (self.owns_job, self.owns_configmap), strict=True):
            if not owned:
                continue
            try:
                call()
                self.log(f"[launcher] deleted {what}")
            except Exception as exc:
                if _status(exc) != 404:
                    self.log(f"[launcher] could not delete {what}: {_api_message(exc)}")

    # -- waiting ------------------------------------------------------------------------------

    def _watch_window(self, window_s: int) -> Iterator[dict[str, Any]]:
        """TrainJob objects of this job seen by one watch window (ends at the window's end)."""
        from kubernetes import watch

        watcher = watch.Watch()
        try:
            for event in watcher.stream(
                self.custom.list_namespaced_custom_object,
                TRAINER_GROUP,
                TRAINER_VERSION,
                self.m.namespace,
                TRAINJOB_PLURAL,
                field_selector=f"metadata.name={self.m.name}",
                timeout_seconds=window_s,
                _request_timeout=(10, window_s * 1.5 + 1),  # the server ends it first
            ):
                obj = event.get("raw_object") or event.get("object") or {}
                if (obj.get("metadata") or {}).get("name") != self.m.name:
                    continue  # some servers ignore the field selector
                if event.get("type") == "DELETED":
                    raise ClusterError(
                        f"TrainJob {self.m.name} was deleted by someone else while running"
                    )
                yield obj
        finally:
            watcher.stop()

    def _check_cancelled(self) -> None:
        if self.cancel.is_set():
            raise TrainJobCancelledError(f"launch of TrainJob {self.m.name} cancelled by a signal")

    def wait(self) -> JobState:
        """Block until the TrainJob completes or fails; raise on the deadline."""
        job = self.settings.trainjob
        while True:
            self._check_cancelled()
            try:
                state = job_state(self._get_job())
            except ClusterError:
                raise
            except Exception as exc:
                if _status(exc) == 404:
                    raise ClusterError(
                        f"TrainJob {self.m.name} disappeared (deleted by someone else?)"
                    ) from exc
                raise ClusterError(f"reading TrainJob {self.m.name}: {_api_message(exc)}") from exc
            if state.finished:
                return state
            remaining = self.deadline - self.clock()
            if remaining <= 0:
                raise TrainJobDeadlineError(
                    f"TrainJob {self.m.name} did not finish within trainjob.deadline_s="
                    f"{job.deadline_s:g}s (last state: {state.phase}); it was stopped"
                )
            window = max(1, min(job.watch_timeout_s, math.ceil(remaining)))
            try:
                for obj in self._watch_window(window):
                    self._check_cancelled()
                    state = job_state(obj)
                    if state.finished:
                        return state
                    if self.clock() >= self.deadline:
                        break
            except ClusterError:
                raise
            except Exception as exc:
                if not _is_transient(exc):
                    raise ClusterError(
                        f"watching TrainJob {self.m.name}: {_api_message(exc)}"
                    ) from exc
                # expired watch (410), dropped connection or end of the window: read again


def launch_and_wait(
    request: TrainJobRequest,
    settings: ClusterSettings,
    *,
    api_client: Any | None = None,
    namespace: str | None = None,
    log: Callable[[str], None] = print,
    clock: Callable[[], float] = time.monotonic,
) -> LaunchResult:
    """Run one training stage as a TrainJob and block until it completes.

    ``api_client`` is a ``kubernetes.client.ApiClient`` (default: :func:`load_api_client`);
    ``namespace`` overrides ``settings.namespace`` (default: the pod's own namespace). Lines of
    the rank-0 pod's log and the launcher's own notes go to ``log``. When the environment names
    the launching pod (``POD_NAME``, ``POD_UID``, optionally ``POD_NAMESPACE``: the downward-API
    variables ``conductor_pipelines.kubernetes.expose_pod_identity`` puts on the task) and the job
    goes to that pod's namespace, the TrainJob and its ConfigMap are owned by the pod.

    Returns a :class:`LaunchResult` when the TrainJob reaches ``Complete``. Raises
    :class:`TrainJobFailedError`, :class:`TrainJobDeadlineError`,
    :class:`TrainJobCancelledError` (Ctrl-C or SIGTERM) or :class:`ClusterError`; in each case the
    TrainJob and its ConfigMap are deleted first when ``settings.trainjob.delete_on_failure``.
    """
    if api_client is None:
        api_client = load_api_client()
    namespace = resolve_namespace(settings, namespace)
    owner = _job_owner(_owner_in(namespace, log), settings.trainjob.owner, api_client, log)
    manifests = build_manifests(request, settings, namespace, owner)
    job = settings.trainjob
    follower: _Rank0LogFollower | None = None
    with _CancelOnSignal() as cancel:
        launch = _Launch(manifests, settings, api_client, log, clock, cancel.requested, owner)
        try:
            attached = launch.create()
            log(
                f"[launcher] TrainJob {manifests.name} in {manifests.namespace}: "
                f"{job.num_nodes} node(s), runtime {job.runtime_kind}/{job.runtime_name}"
            )
            if job.stream_logs:
                follower = _Rank0LogFollower(
                    launch.core, manifests.name, manifests.namespace, log, job.watch_timeout_s
                )
                follower.start()
            state = launch.wait()
            if follower is not None:
                follower.stop(drain_s=5.0)
            if state.phase == "Failed":
                raise TrainJobFailedError(
                    manifests.name, state, list(follower.tail) if follower else []
                )
        except KeyboardInterrupt as exc:
            _cleanup(launch, follower, job.delete_on_failure)
            raise TrainJobCancelledError(
                f"launch of TrainJob {manifests.name} cancelled (Ctrl-C)"
            ) from exc
        except TrainJobCancelledError:
            if launch.run_goes_on():
                if follower is not None:
                    follower.stop(drain_s=0.0)
                log(
                    f"[launcher] this pod was stopped while its run goes on (a drained node, an "
                    f"evicted pod): TrainJob {manifests.name} is left running, for the task's "
                    "retry to attach to; it is deleted with the run's Workflow"
                )
            else:
                _cleanup(launch, follower, job.delete_on_failure)
            raise
        except BaseException:
            _cleanup(launch, follower, job.delete_on_failure)
            raise
    duration = clock() - launch.start
    log(f"[launcher] TrainJob {manifests.name} completed in {duration:.0f}s")
    if job.delete_on_success:
        launch.delete()
    return LaunchResult(
        name=manifests.name,
        namespace=manifests.namespace,
        condition=state.phase,
        reason=state.reason,
        duration_s=duration,
        attached=attached,
    )


def _job_owner(
    pod: Owner | None, mode: str, api_client: Any, log: Callable[[str], None]
) -> Owner | None:
    """The owner of the objects of a launch from pod ``pod`` (None: none) under
    ``trainjob.owner`` ``mode``: the pod's Argo Workflow (read by the name ``WORKFLOW_NAME``
    gives, for its uid), else, where there is none or it cannot be read, the pod, said so."""
    if pod is None or mode == "none":
        return None
    if mode == "pod":
        return pod
    name = workflow_name_from_env()
    if name is None:
        log("[launcher] no Argo Workflow named (WORKFLOW_NAME): the TrainJob is owned by this pod")
        return pod
    from kubernetes import client

    try:
        workflow = client.CustomObjectsApi(api_client).get_namespaced_custom_object(
            WORKFLOW_GROUP, WORKFLOW_VERSION, pod.namespace, WORKFLOW_PLURAL, name
        )
    except Exception as exc:
        log(
            f"[launcher] could not read Workflow {name} ({_api_message(exc)}): the TrainJob is "
            "owned by this pod, and is deleted with it"
        )
        return pod
    return workflow_owner(workflow)


def _owner_in(namespace: str, log: Callable[[str], None]) -> Owner | None:
    """The launching pod (:func:`owner_pod_from_env`) as the owner of objects in ``namespace``;
    None outside a pipeline pod, or when the pod is in another namespace (an owner must be in the
    same namespace; the objects are then left without one, which is logged)."""
    owner = owner_pod_from_env()
    if owner is None:
        return None
    pod_namespace = owner.namespace
    if pod_namespace is None:
        with contextlib.suppress(OSError):
            pod_namespace = SERVICE_ACCOUNT_NAMESPACE.read_text(encoding="utf-8").strip() or None
    if pod_namespace != namespace:
        log(
            f"[launcher] the TrainJob goes to namespace {namespace}, this pod is in "
            f"{pod_namespace or 'an unknown namespace'}: it will not be owned by the pod (an "
            "owner must be in the same namespace), so it is not garbage-collected with the run"
        )
        return None
    return Owner(owner.name, owner.uid, pod_namespace)


def _cleanup(launch: _Launch, follower: _Rank0LogFollower | None, delete: bool) -> None:
    if follower is not None:
        follower.stop(drain_s=0.0)
    if delete:
        launch.delete()
    elif launch.owns_job:
        launch.log(f"[launcher] leaving TrainJob {launch.m.name} in place (delete_on_failure off)")
