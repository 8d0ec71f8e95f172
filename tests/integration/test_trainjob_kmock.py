"""The TrainJob launcher against ``kmock``, an in-memory Kubernetes API on 127.0.0.1 that the
official ``kubernetes`` client talks HTTP to. kmock has no controllers: each test plays the
Trainer/JobSet controllers itself (patches the TrainJob status, creates the rank-0 pod).

Two kmock quirks the harness works around: it reads ``watch=true`` only in lowercase (the Python
client sends ``watch=True``, which real API servers accept), and it never ends a watch by
``timeoutSeconds`` (the launcher's client-side read timeout ends each window instead). It also
ignores label and field selectors, which the launcher checks again on its side.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

kmock = pytest.importorskip("kmock")
kubernetes = pytest.importorskip("kubernetes")

from kubernetes import client  # noqa: E402

from conductor_core.cluster.launcher import (  # noqa: E402
    ClusterError,
    TrainJobCancelledError,
    TrainJobDeadlineError,
    TrainJobFailedError,
    launch_and_wait,
)
from conductor_core.cluster.settings import ClusterSettings, load_cluster_settings  # noqa: E402
from conductor_core.cluster.trainjob import (  # noqa: E402
    TRAINER_GROUP,
    TRAINER_VERSION,
    TRAINJOB_PLURAL,
    TrainJobRequest,
    build_manifests,
)

NS = "conductor-test"
GROUP_VERSION = (TRAINER_GROUP, TRAINER_VERSION)


class _LowercaseWatchServer:
    """aiohttp ``RawTestServer`` whose handler sees ``watch=True`` as ``watch=true``."""

    def __new__(cls, handler: Any, **kwargs: Any) -> Any:
        import aiohttp.test_utils

        async def wrapped(request: Any) -> Any:
            if request.query.get("watch") == "True":
                request = request.clone(rel_url=request.rel_url.update_query(watch="true"))
            return await handler(request)

        return aiohttp.test_utils.RawTestServer(wrapped, **kwargs)


class KMockCluster:
    """A kmock ``KubernetesEmulator`` served on 127.0.0.1 from a background event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._stop: asyncio.Future[None] | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="kmock", daemon=True)
        self.thread.start()
        if not self._ready.wait(15) or self.error is not None:
            raise RuntimeError(f"kmock did not start: {self.error!r}")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported by __init__
            self.error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._stop = self.loop.create_future()
        emulator = kmock.KubernetesEmulator()
        async with emulator as km, kmock.Server(km, server_cls=_LowercaseWatchServer) as server:
            self.km = km
            self.url = str(server.url).rstrip("/")
            for key, kind in (
                (f"{TRAINER_GROUP}/{TRAINER_VERSION}/{TRAINJOB_PLURAL}", "TrainJob"),
                ("v1/configmaps", "ConfigMap"),
                ("v1/pods", "Pod"),
                ("argoproj.io/v1alpha1/workflows", "Workflow"),
            ):
                km.resources[key].kind = kind
                km.resources[key].namespaced = True
            runtimes = f"{TRAINER_GROUP}/{TRAINER_VERSION}/clustertrainingruntimes"
            km.resources[runtimes].kind = "ClusterTrainingRuntime"
            km.resources[runtimes].namespaced = False
            self._ready.set()
            await self._stop

    def serve_log(self, pod: str, text: str) -> None:
        """Answer ``GET .../pods/<pod>/log`` with ``text`` (a finished container's log)."""
        self.km[f"get /api/v1/namespaces/{NS}/pods/{pod}/log"] << text.encode()

    def close(self) -> None:
        if self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set_result, None)
        self.thread.join(10)


@pytest.fixture(scope="module")
def cluster() -> Iterator[KMockCluster]:
    server = KMockCluster()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture()
def api(cluster: KMockCluster) -> Iterator[client.ApiClient]:
    cfg = client.Configuration()
    cfg.host = cluster.url
    with client.ApiClient(cfg) as api_client:
        yield api_client


def make_settings(**trainjob: Any) -> ClusterSettings:
    return load_cluster_settings(
        None,
        overrides={
            "namespace": NS,
            "trainjob": {"watch_timeout_s": 1, "deadline_s": 30, "num_nodes": 2, **trainjob},
        },
    )


def make_request(stage: str = "base") -> TrainJobRequest:
    return TrainJobRequest(
        run_id=f"run-{uuid.uuid4().hex[:8]}",
        task_id="task-1",
        stage=stage,
        stage_config={"stage": stage, "steps": 3},
        image="registry.example.com/conductor-train:test",
    )


def get_job(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    try:
        return client.CustomObjectsApi(api).get_namespaced_custom_object(
            *GROUP_VERSION, NS, TRAINJOB_PLURAL, name
        )
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def get_configmap(api: client.ApiClient, name: str) -> Any | None:
    try:
        return client.CoreV1Api(api).read_namespaced_config_map(name, NS)
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def wait_for_job(api: client.ApiClient, name: str, timeout: float = 10.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        job = get_job(api, name)
        if job is not None:
            return job
        time.sleep(0.05)
    raise AssertionError(f"TrainJob {name} was never created")


def set_conditions(api: client.ApiClient, name: str, conditions: list[dict[str, Any]]) -> None:
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        *GROUP_VERSION, NS, TRAINJOB_PLURAL, name, {"status": {"conditions": conditions}}
    )


def create_pod(api: client.ApiClient, job: str, name: str, index: int) -> None:
    client.CoreV1Api(api).create_namespaced_pod(
        NS,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "namespace": NS,
                "labels": {
                    "jobset.sigs.k8s.io/jobset-name": job,
                    "jobset.sigs.k8s.io/replicatedjob-name": "node",
                    "jobset.sigs.k8s.io/job-index": str(index),
                    "batch.kubernetes.io/job-completion-index": "0",
                },
            },
            "spec": {"containers": [{"name": "node", "image": "x"}]},
            "status": {"phase": "Running"},
        },
    )


def controller(
    api: client.ApiClient, name: str, steps: Callable[[], None]
) -> tuple[threading.Thread, list[BaseException]]:
    """Run ``steps`` (the fake controller) once the TrainJob exists, in a thread."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            wait_for_job(api, name)
            steps()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, errors


def launch_to_completion(api: client.ApiClient, log: Callable[[str], None] = lambda _: None) -> str:
    """Launch a new request whose TrainJob the fake controller completes at once; its name."""
    settings = make_settings(stream_logs=False)
    request = make_request()
    name = build_manifests(request, settings).name

    def steps() -> None:
        set_conditions(api, name, [{"type": "Complete", "status": "True"}])

    thread, errors = controller(api, name, steps)
    launch_and_wait(request, settings, api_client=api, log=log)
    thread.join(5)
    assert not errors, errors
    return name


def test_complete_job_is_created_as_built_streams_rank0_log_and_is_kept(cluster, api) -> None:
    settings = make_settings()
    request = make_request()
    manifests = build_manifests(request, settings)
    name = manifests.name
    cluster.serve_log(
        f"{name}-node-0-0-aaaaa",
        "2026-01-01T00:00:00.5Z step 1 loss 0.9\n2026-01-01T00:00:01Z step 2 loss 0.7\n",
    )
    cluster.serve_log(f"{name}-node-1-0-bbbbb", "2026-01-01T00:00:00Z rank 1 noise\n")
    seen_running: list[dict[str, Any]] = []

    def steps() -> None:
        seen_running.append(get_job(api, name))
        create_pod(api, name, f"{name}-node-1-0-bbbbb", 1)
        create_pod(api, name, f"{name}-node-0-0-aaaaa", 0)
        set_conditions(api, name, [{"type": "Suspended", "status": "False", "reason": "Resumed"}])
        time.sleep(1.0)
        set_conditions(api, name, [{"type": "Complete", "status": "True", "reason": "JobsDone"}])

    thread, errors = controller(api, name, steps)
    lines: list[str] = []
    start = time.monotonic()
    result = launch_and_wait(request, settings, api_client=api, log=lines.append)
    thread.join(5)
    assert not errors, errors
    assert time.monotonic() - start < 15
    assert (result.name, result.namespace, result.condition) == (name, NS, "Complete")
    assert result.reason == "JobsDone"
    assert result.attached is False
    assert 0.5 < result.duration_s < 15

    # the server received the manifests as built
    stored = seen_running[0]
    assert stored["spec"] == manifests.trainjob["spec"]
    assert stored["metadata"]["labels"] == manifests.trainjob["metadata"]["labels"]
    configmap = get_configmap(api, manifests.configmap_name)
    assert configmap.data == manifests.configmap["data"]

    # rank-0 log lines, without their timestamps; not rank 1's
    assert "step 1 loss 0.9" in lines and "step 2 loss 0.7" in lines
    assert lines.index("step 1 loss 0.9") < lines.index("step 2 loss 0.7")
    assert not any("rank 1 noise" in line for line in lines)

    # kept on success (delete_on_success is off)
    assert get_job(api, name) is not None


def test_delete_on_success_removes_job_and_configmap(cluster, api) -> None:
    settings = make_settings(delete_on_success=True, stream_logs=False)
    request = make_request()
    manifests = build_manifests(request, settings)

    def steps() -> None:
        set_conditions(api, manifests.name, [{"type": "Complete", "status": "True"}])

    thread, errors = controller(api, manifests.name, steps)
    result = launch_and_wait(request, settings, api_client=api, log=lambda _: None)
    thread.join(5)
    assert not errors, errors
    assert result.condition == "Complete"
    assert get_job(api, manifests.name) is None
    assert get_configmap(api, manifests.configmap_name) is None


def test_failed_job_raises_with_reason_and_log_tail_and_is_deleted(cluster, api) -> None:
    settings = make_settings()
    request = make_request()
    manifests = build_manifests(request, settings)
    name = manifests.name
    cluster.serve_log(f"{name}-node-0-0-ccccc", "2026-01-01T00:00:00Z CUDA out of memory\n")

    def steps() -> None:
        create_pod(api, name, f"{name}-node-0-0-ccccc", 0)
        time.sleep(0.5)
        set_conditions(
            api,
            name,
            [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "BackoffLimitExceeded",
                    "message": "x",
                }
            ],
        )

    thread, errors = controller(api, name, steps)
    with pytest.raises(TrainJobFailedError) as info:
        launch_and_wait(request, settings, api_client=api, log=lambda _: None)
    thread.join(5)
    assert not errors, errors
    assert "BackoffLimitExceeded" in str(info.value)
    assert info.value.state.reason == "BackoffLimitExceeded"
    assert "CUDA out of memory" in info.value.log_tail
    assert get_job(api, name) is None
    assert get_configmap(api, manifests.configmap_name) is None


def test_failed_job_is_kept_when_delete_on_failure_is_off(cluster, api) -> None:
    settings = make_settings(delete_on_failure=False, stream_logs=False)
    request = make_request()
    manifests = build_manifests(request, settings)

    def steps() -> None:
        set_conditions(api, manifests.name, [{"type": "Failed", "status": "True"}])

    thread, errors = controller(api, manifests.name, steps)
    with pytest.raises(TrainJobFailedError):
        launch_and_wait(request, settings, api_client=api, log=lambda _: None)
    thread.join(5)
    assert not errors, errors
    assert get_job(api, manifests.name) is not None


def test_existing_job_of_the_same_task_is_attached_to(cluster, api) -> None:
    settings = make_settings(stream_logs=False)
    request = make_request()
    manifests = build_manifests(request, settings)
    custom = client.CustomObjectsApi(api)
    # a first try of this task created both, then the task was retried
    client.CoreV1Api(api).create_namespaced_config_map(NS, manifests.configmap)
    custom.create_namespaced_custom_object(*GROUP_VERSION, NS, TRAINJOB_PLURAL, manifests.trainjob)
    set_conditions(api, manifests.name, [{"type": "Suspended", "status": "False"}])

    def steps() -> None:
        time.sleep(0.5)
        set_conditions(api, manifests.name, [{"type": "Complete", "status": "True"}])

    thread, errors = controller(api, manifests.name, steps)
    lines: list[str] = []
    result = launch_and_wait(request, settings, api_client=api, log=lines.append)
    thread.join(5)
    assert not errors, errors
    assert result.attached is True
    assert result.condition == "Complete"
    assert any("already exists: attaching" in line for line in lines)
    listed = custom.list_namespaced_custom_object(*GROUP_VERSION, NS, TRAINJOB_PLURAL)["items"]
    assert [item["metadata"]["name"] for item in listed].count(manifests.name) == 1


def test_existing_job_of_another_task_is_an_error_and_left_alone(cluster, api) -> None:
    settings = make_settings(stream_logs=False)
    request = make_request()
    manifests = build_manifests(request, settings)
    foreign = build_manifests(request, settings)
    foreign.trainjob["metadata"]["labels"]["conductor.dev/run-id"] = "someone-else"
    foreign.configmap["data"] = {"stage.yaml": "steps: 999\n"}
    client.CoreV1Api(api).create_namespaced_config_map(NS, foreign.configmap)
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        *GROUP_VERSION, NS, TRAINJOB_PLURAL, foreign.trainjob
    )
    with pytest.raises(ClusterError, match="belongs to another task"):
        launch_and_wait(request, settings, api_client=api, log=lambda _: None)
    kept = get_job(api, manifests.name)
    assert kept is not None
    assert kept["metadata"]["labels"]["conductor.dev/run-id"] == "someone-else"
    assert get_configmap(api, manifests.configmap_name).data == {"stage.yaml": "steps: 999\n"}


def test_configmap_left_by_a_try_that_made_no_job_is_refreshed(cluster, api) -> None:
    settings = make_settings(stream_logs=False)
    request = make_request()
    manifests = build_manifests(request, settings)
    stale = {**manifests.configmap, "data": {"stage.yaml": "steps: 1\n"}}
    client.CoreV1Api(api).create_namespaced_config_map(NS, stale)

    def steps() -> None:
        set_conditions(api, manifests.name, [{"type": "Complete", "status": "True"}])

    thread, errors = controller(api, manifests.name, steps)
    result = launch_and_wait(request, settings, api_client=api, log=lambda _: None)
    thread.join(5)
    assert not errors, errors
    assert result.attached is False
    assert get_configmap(api, manifests.configmap_name).data == manifests.configmap["data"]


def test_deadline_deletes_the_job_and_raises(cluster, api) -> None:
    settings = make_settings(deadline_s=2, stream_logs=False)
    request = make_request()
    manifests = build_manifests(request, settings)
    start = time.monotonic()
    with pytest.raises(TrainJobDeadlineError, match=r"deadline_s=2s"):
        launch_and_wait(request, settings, api_client=api, log=lambda _: None)
    elapsed = time.monotonic() - start
    assert 2.0 <= elapsed < 10.0
    assert get_job(api, manifests.name) is None
    assert get_configmap(api, manifests.configmap_name) is None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_cancellation_deletes_the_job(cluster, api, signum: int) -> None:
    assert threading.current_thread() is threading.main_thread()
    settings = make_settings(stream_logs=False)
    request = make_request()
    manifests = build_manifests(request, settings)

    def steps() -> None:
        time.sleep(0.5)
        os.kill(os.getpid(), signum)

    previous = signal.getsignal(signal.SIGTERM)
    thread, errors = controller(api, manifests.name, steps)
    with pytest.raises(TrainJobCancelledError):
        launch_and_wait(request, settings, api_client=api, log=lambda _: None)
    thread.join(5)
    assert not errors, errors
    assert signal.getsignal(signal.SIGTERM) is previous  # handler restored
    assert get_job(api, manifests.name) is None
    assert get_configmap(api, manifests.configmap_name) is None


def test_a_cancel_whose_exception_was_lost_still_stops_the_wait(cluster, api) -> None:
    """A signal handler's exception is dropped where it lands in a finalizer; the flag the
    handler sets first stops the wait at the next poll, not at the deadline (30 s here)."""
    from conductor_core.cluster.launcher import _Launch

    settings = make_settings(stream_logs=False)
    manifests = build_manifests(make_request(), settings)
    cancel = threading.Event()
    launch = _Launch(manifests, settings, api, lambda _: None, time.monotonic, cancel)
    launch.create()
    try:
        cancel.set()  # what the handler does before raising
        start = time.monotonic()
        with pytest.raises(TrainJobCancelledError, match="cancelled by a signal"):
            launch.wait()
        assert time.monotonic() - start < 5
    finally:
        launch.delete()
    assert get_job(api, manifests.name) is None


# -- ownership: the TrainJob goes away with its task's pod (issue 24, 3.9) -----------------------

POD_ENV = ("POD_NAME", "POD_UID", "POD_NAMESPACE", "WORKFLOW_NAME")


def create_task_pod(api: client.ApiClient, name: str, namespace: str = NS) -> dict[str, str]:
    """The launching task's pod (kmock assigns no uid: the test gives one, as the API server
    would) and the downward-API environment KFP gives the task (expose_pod_identity)."""
    uid = str(uuid.uuid4())
    client.CoreV1Api(api).create_namespaced_pod(
        namespace,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"containers": [{"name": "main", "image": "x"}]},
        },
    )
    return {"POD_NAME": name, "POD_UID": uid, "POD_NAMESPACE": namespace}


def pod_uid(api: client.ApiClient, name: str) -> str | None:
    try:
        return client.CoreV1Api(api).read_namespaced_pod(name, NS).metadata.uid
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def workflow_uid(api: client.ApiClient, name: str) -> str | None:
    try:
        return get_workflow(api, name)["metadata"]["uid"]
    except client.ApiException as exc:
        if exc.status == 404:
            return None
        raise


def get_workflow(api: client.ApiClient, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", name
    )


def collected(api: client.ApiClient, metadata: dict[str, Any]) -> bool:
    """Whether Kubernetes' garbage collector would delete an object with this metadata: it has
    owners and none of them exists any more (an owner is identified by name *and* uid, in the
    object's namespace)."""
    owners = metadata.get("ownerReferences") or []
    uid_of = {("v1", "Pod"): pod_uid, ("argoproj.io/v1alpha1", "Workflow"): workflow_uid}
    assert all((ref["apiVersion"], ref["kind"]) in uid_of for ref in owners), owners
    return bool(owners) and all(
        uid_of[ref["apiVersion"], ref["kind"]](api, ref["name"]) != ref["uid"] for ref in owners
    )


def create_workflow(api: client.ApiClient, pod_env: dict[str, str]) -> dict[str, str]:
    """The Argo Workflow of the launching pod's pipeline run, named in its environment as KFP
    gives it (the pod's ``workflows.argoproj.io/workflow`` label, expose_pod_identity)."""
    name = f"training-{uuid.uuid4().hex[:6]}"
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "argoproj.io",
        "v1alpha1",
        NS,
        "workflows",
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": name, "namespace": NS, "uid": str(uuid.uuid4())},
            "spec": {"entrypoint": "entrypoint"},
        },
    )
    return {**pod_env, "WORKFLOW_NAME": name}


def test_trainjob_and_configmap_are_owned_by_the_launching_pod(
    cluster, api, monkeypatch: pytest.MonkeyPatch
) -> None:
    pod = f"train-base-{uuid.uuid4().hex[:6]}-impl"
    for key, value in create_task_pod(api, pod).items():
        monkeypatch.setenv(key, value)
    settings = make_settings(stream_logs=False)
    request = make_request()
    name = build_manifests(request, settings).name
    seen: list[dict[str, Any]] = []

    def steps() -> None:
        seen.append(get_job(api, name))
        set_conditions(api, name, [{"type": "Complete", "status": "True"}])

    thread, errors = controller(api, name, steps)
    launch_and_wait(request, settings, api_client=api, log=lambda _: None)
    thread.join(5)
    assert not errors, errors

    uid = pod_uid(api, pod)
    expected = [
        {"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid, "blockOwnerDeletion": False}
    ]
    job = get_job(api, name)
    assert seen[0]["metadata"]["ownerReferences"] == expected  # from its creation on
    assert job["metadata"]["ownerReferences"] == expected
    configmap = get_configmap(api, f"{name}-config")
    # (kmock gives the TrainJob no uid, so the ConfigMap keeps the pod as its owner; on a real
    # API server the launcher then makes the TrainJob its owner)
    assert [ref.uid for ref in configmap.metadata.owner_references] == [uid]

    # the pipeline run's pods are deleted: the job and its ConfigMap have no owner left
    assert not collected(api, job["metadata"])
    client.CoreV1Api(api).delete_namespaced_pod(pod, NS)
    assert collected(api, job["metadata"])
    assert collected(api, client.ApiClient().sanitize_for_serialization(configmap.metadata))


def test_a_local_run_sets_no_owner(cluster, api, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in POD_ENV:
        monkeypatch.delenv(key, raising=False)
    name = launch_to_completion(api)
    assert "ownerReferences" not in get_job(api, name)["metadata"]
    assert not get_configmap(api, f"{name}-config").metadata.owner_references


def test_a_pod_in_another_namespace_owns_nothing(
    cluster, api, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in create_task_pod(api, "elsewhere-impl", namespace="kubeflow").items():
        monkeypatch.setenv(key, value)
    settings = make_settings(stream_logs=False)  # the TrainJob goes to NS, not kubeflow
    request = make_request()
    name = build_manifests(request, settings).name

    def steps() -> None:
        set_conditions(api, name, [{"type": "Complete", "status": "True"}])

    thread, errors = controller(api, name, steps)
    lines: list[str] = []
    launch_and_wait(request, settings, api_client=api, log=lines.append)
    thread.join(5)
    assert not errors, errors
    assert "ownerReferences" not in get_job(api, name)["metadata"]
    assert any("will not be owned by the pod" in line for line in lines), lines


def test_a_retried_task_adds_its_pod_as_a_second_owner(
    cluster, api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from conductor_core.cluster.trainjob import owner_pod_from_env

    settings = make_settings(stream_logs=False)
    request = make_request()
    first = create_task_pod(api, f"try-1-{uuid.uuid4().hex[:6]}")
    manifests = build_manifests(request, settings, owner=owner_pod_from_env(first))
    client.CoreV1Api(api).create_namespaced_config_map(NS, manifests.configmap)
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        *GROUP_VERSION, NS, TRAINJOB_PLURAL, manifests.trainjob
    )
    second = create_task_pod(api, f"try-2-{uuid.uuid4().hex[:6]}")
    for key, value in second.items():
        monkeypatch.setenv(key, value)

    def steps() -> None:
        time.sleep(0.3)
        set_conditions(api, manifests.name, [{"type": "Complete", "status": "True"}])

    thread, errors = controller(api, manifests.name, steps)
    result = launch_and_wait(request, settings, api_client=api, log=lambda _: None)
    thread.join(5)
    assert not errors, errors
    assert result.attached is True
    job = get_job(api, manifests.name)
    owners = job["metadata"]["ownerReferences"]
    assert [(ref["name"], ref["uid"]) for ref in owners] == [
        (first["POD_NAME"], first["POD_UID"]),
        (second["POD_NAME"], second["POD_UID"]),
    ]
    # the first try's pod goes: the job stays for the retry that waits on it
    client.CoreV1Api(api).delete_namespaced_pod(first["POD_NAME"], NS)
    assert not collected(api, job["metadata"])
    client.CoreV1Api(api).delete_namespaced_pod(second["POD_NAME"], NS)
    assert collected(api, job["metadata"])


def test_a_job_owned_by_the_run_outlives_its_launcher_pod(
    cluster, api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Owned by the run's Workflow, the job stays when the launcher pod goes (a drained node)
    and goes with the run (issue 43 §3)."""
    env = create_workflow(api, create_task_pod(api, f"launcher-{uuid.uuid4().hex[:6]}"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    name = launch_to_completion(api)
    job = get_job(api, name)
    workflow = get_workflow(api, env["WORKFLOW_NAME"])
    assert job["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "name": env["WORKFLOW_NAME"],
            "uid": workflow["metadata"]["uid"],
            "blockOwnerDeletion": False,
        }
    ]
    client.CoreV1Api(api).delete_namespaced_pod(env["POD_NAME"], NS)
    assert not collected(api, job["metadata"])
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "argoproj.io", "v1alpha1", NS, "workflows", env["WORKFLOW_NAME"]
    )
    assert collected(api, job["metadata"])


@pytest.mark.parametrize("terminated", [False, True], ids=["pod-stopped", "run-terminated"])
def test_a_stopped_launcher_leaves_the_job_to_its_retry_unless_the_run_is_terminated(
    cluster, api, monkeypatch: pytest.MonkeyPatch, terminated: bool
) -> None:
    """SIGTERM to the launcher: while the run goes on (a drain, an eviction) the job is left
    for the task's retry, which attaches to it by its name; when KFP terminates the run (the
    Workflow's deadline set to 0) it is deleted."""
    env = create_workflow(api, create_task_pod(api, f"launcher-{uuid.uuid4().hex[:6]}"))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    settings = make_settings(stream_logs=False)
    request = make_request()
    name = build_manifests(request, settings).name

    def steps() -> None:
        time.sleep(0.5)
        if terminated:
            client.CustomObjectsApi(api).patch_namespaced_custom_object(
                "argoproj.io", "v1alpha1", NS, "workflows", env["WORKFLOW_NAME"],
                {"spec": {"activeDeadlineSeconds": 0}},
            )  # fmt: skip
        os.kill(os.getpid(), signal.SIGTERM)

    thread, errors = controller(api, name, steps)
    lines: list[str] = []
    with pytest.raises(TrainJobCancelledError):
        launch_and_wait(request, settings, api_client=api, log=lines.append)
    thread.join(5)
    assert not errors, errors
    if terminated:
        assert get_job(api, name) is None
        return
    assert get_job(api, name) is not None
    assert any("left running, for the task's retry" in line for line in lines), lines

    # the retry (a new pod of the same task) attaches to the job instead of starting another
    retry = create_task_pod(api, f"launcher-retry-{uuid.uuid4().hex[:6]}")
    monkeypatch.setenv("POD_NAME", retry["POD_NAME"])
    monkeypatch.setenv("POD_UID", retry["POD_UID"])

    def finish() -> None:
        set_conditions(api, name, [{"type": "Complete", "status": "True"}])

    thread, errors = controller(api, name, finish)
    result = launch_and_wait(request, settings, api_client=api, log=lambda _: None)
    thread.join(5)
    assert not errors, errors
    assert result.attached is True
    assert len(get_job(api, name)["metadata"]["ownerReferences"]) == 1  # the same Workflow


def test_without_a_readable_workflow_the_launcher_pod_owns_the_job(
    cluster, api, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = create_task_pod(api, f"launcher-{uuid.uuid4().hex[:6]}")
    for key, value in {**env, "WORKFLOW_NAME": "no-such-workflow"}.items():
        monkeypatch.setenv(key, value)
    lines: list[str] = []
    name = launch_to_completion(api, log=lines.append)
    (owner,) = get_job(api, name)["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("Pod", env["POD_UID"])
    assert any("could not read Workflow no-such-workflow" in line for line in lines), lines


# -- the minimum Trainer (issue 24, 3.6) -------------------------------------------------------


def test_a_trainer_without_runtime_patches_is_refused_naming_the_version(cluster, api) -> None:
    """A Trainer older than 2.2 (TrainJob API without runtimePatches) behind the API server:
    under strict field validation it refuses the job; without it, it would silently drop the
    patches (tolerations, volumes) and the job would run wrongly."""
    namespace = "old-trainer"
    received: list[Any] = []

    def old_api_server(request: Any) -> Any:
        received.append(request)
        body = request.data or {}
        if request.params.get("fieldValidation") == "Strict" and "runtimePatches" in body.get(
            "spec", {}
        ):
            return kmock.Response(
                status=400,
                payload={
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "message": 'TrainJob in version "v1alpha1" cannot be handled as a TrainJob: '
                    'strict decoding error: unknown field "spec.runtimePatches"',
                    "reason": "BadRequest",
                    "code": 400,
                },
            )
        dropped = {**body, "spec": {k: v for k, v in body["spec"].items() if k != "runtimePatches"}}
        return kmock.Response(status=201, payload=dropped)

    cluster.km[
        f"post /apis/{TRAINER_GROUP}/{TRAINER_VERSION}/namespaces/{namespace}/trainjobs"
    ] << (old_api_server)
    settings = make_settings(stream_logs=False)
    with pytest.raises(ClusterError) as info:
        launch_and_wait(
            make_request(), settings, api_client=api, namespace=namespace, log=lambda _: None
        )
    message = str(info.value)
    assert "Kubeflow Trainer 2.2.0 or newer is needed" in message
    assert 'unknown field "spec.runtimePatches"' in message
    assert len(received) == 1 and received[0].params["fieldValidation"] == "Strict"


# -- the parameter check's look at the runtime (issue 43 §3) -------------------------------------


def test_the_runtime_check_finds_an_installed_runtime_and_names_a_missing_one(api) -> None:
    """A default Trainer install ships no runtime and its webhook rejects a TrainJob that names
    a missing one: the parameter check says so before any GPU node is asked for."""
    from conductor_core.cluster.runtime import check_runtime, runtime_reference

    reference = runtime_reference(make_settings(runtime_name="conductor-torch"))
    assert reference == "ClusterTrainingRuntime/conductor-torch"
    missing = check_runtime(reference, api, NS)
    assert missing.problem is not None and missing.warning is None
    assert missing.problem.startswith(
        "trainjob: the ClusterTrainingRuntime 'conductor-torch' does not exist; install"
    )
    assert "runtimes.torchDistributed.enabled=true" in missing.problem
    client.CustomObjectsApi(api).create_cluster_custom_object(
        TRAINER_GROUP,
        TRAINER_VERSION,
        "clustertrainingruntimes",
        {
            "apiVersion": f"{TRAINER_GROUP}/{TRAINER_VERSION}",
            "kind": "ClusterTrainingRuntime",
            "metadata": {"name": "conductor-torch"},
            "spec": {},
        },
    )
    assert check_runtime(reference, api, NS) == type(missing)()  # neither problem nor warning


def test_the_runtime_check_names_an_api_server_that_does_not_answer() -> None:
    """No API server on the other end (a wrong kubeconfig, a stopped cluster): the parameter
    check says so in one line instead of ending in urllib3's traceback."""
    import socket

    from conductor_core.cluster.runtime import check_runtime

    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    cfg.retries = False
    with client.ApiClient(cfg) as unreachable:
        result = check_runtime("ClusterTrainingRuntime/torch-distributed", unreachable, NS)
    assert result.problem is not None and result.problem.startswith(
        "trainjob: the Kubernetes API could not be reached to read the ClusterTrainingRuntime "
        "'torch-distributed' ("
    )
