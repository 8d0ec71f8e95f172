"""The cluster rehearsal: a **compiled** pipeline (``conductor_pipelines/compiled/<name>.yaml``,
what the Kubeflow UI gets) run by ``kfp.local.DockerRunner``, every task in its own container of
the image the YAML names, sharing nothing but what a cluster shares: KFP's artifacts, an S3
bucket and an MLflow server.

The containers run as the images' user (uid 10001) with every capability dropped and no new
privileges, on the host's network (servers bind 127.0.0.1; no traffic to bridge addresses). The
compiled pipeline's own environment (its cluster settings) applies, except the endpoints this
machine replaces: the MLflow tracking URI and the S3 endpoint. The Secrets the compiled pipeline
mounts as environment variables are filled, where this machine has a value, from the local S3
server's credentials and this process's environment (API keys), the way a cluster fills them
from its Secrets. The compute thread counts this process was given (``OMP_NUM_THREADS``,
``MKL_NUM_THREADS``) go to the tasks too (:func:`thread_settings`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from conductor_core.errors import ConductorError

log = logging.getLogger(__name__)

TASK_USER = "10001:10001"
"""The images' numeric user (images/*/Dockerfile), as pods run them (``runAsNonRoot``)."""
RUN_LABEL = "org.conductor.rehearsal"
"""Label on every task container of a rehearsal, valued with the rehearsal's id."""
BUCKET = "conductor"
"""Bucket of the loopback S3 server: the artifact root and MLflow's artifacts."""
ENDPOINT_ENVS = ("MLFLOW_S3_ENDPOINT_URL", "AWS_ENDPOINT_URL")


@dataclass
class Rehearsal:
    """What the tasks of one rehearsal get: the runner, the parameters this machine fills in,
    and where the servers are."""

    rehearsal_id: str
    tracking_uri: str
    artifact_root: str
    environment: dict[str, str]
    security_options: list[str]
    """Docker security options the pods' sandbox settings ask for (sandbox_security_options)."""
    scratch: list[str]
    """Paths where the pods get an emptyDir (the workspace): each container gets a fresh tmpfs
    there, empty at start and gone at exit, like the pod's volume."""
    store_uri: str
    """Where the run's MLflow runs can be read after the rehearsal: the given tracking URI, or
    the SQLite store of the loopback server, which outlives it."""
    kept_artifacts: bool
    """False when S3 was the loopback server: the weights and MLflow artifacts end with it."""
    images: list[str] = field(default_factory=list)

    def runner(self) -> Any:
        """``kfp.local.DockerRunner`` with the settings every task container gets."""
        import kfp.local

        return kfp.local.DockerRunner(
            network_mode="host",
            user=TASK_USER,
            environment=self.environment,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges", *api_security_options(self.security_options)],
            labels={RUN_LABEL: self.rehearsal_id},
            tmpfs={p: "mode=1777" for p in self.scratch},
        )

    def params(self, pipeline: Any) -> dict[str, str]:
        """Parameters of ``pipeline`` this machine provides (a user's ``--set`` wins)."""
        given = {"tracking_uri": self.tracking_uri, "artifact_root": self.artifact_root}
        inputs = pipeline.component_spec.inputs or {}
        return {k: v for k, v in given.items() if k in inputs}


def compiled_pipeline(path: Path) -> Any:
    """The pipeline of a compiled YAML file, callable under ``kfp.local``, with every task but
    its exit handler cached in KFP's local cache (``local_resume.cache_every_task``: what lets
    a ``--resume`` reuse the tasks a run finished, as KFP's Retry does on a cluster)."""
    import yaml
    from google.protobuf import json_format
    from kfp import components
    from kfp.pipeline_spec import pipeline_spec_pb2

    from conductor_pipeline_runner.local_resume import cache_every_task

    if not path.is_file():
        raise ConductorError(f"no compiled pipeline at {path}: run `conductor pipeline compile`")
    docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    spec = json_format.ParseDict(docs[0], pipeline_spec_pb2.PipelineSpec())
    cache_every_task(spec)
    docs[0] = json_format.MessageToDict(spec)
    return components.load_component_from_text(yaml.safe_dump_all(docs, sort_keys=False))


def pipeline_images(path: Path) -> tuple[list[str], list[str]]:
    """The container images the compiled pipeline's tasks name: those of CPU tasks (needed),
    and those only tasks that ask for GPUs use (the GPU branches, which cannot run here)."""
    import yaml

    spec = next(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    executors = spec.get("deploymentSpec", {}).get("executors", {})
    cpu, gpu = set(), set()
    for executor in executors.values():
        if "container" not in executor:
            continue
        container = executor["container"]
        on_gpu = "accelerator" in container.get("resources", {})
        (gpu if on_gpu else cpu).add(container["image"])
    return sorted(cpu), sorted(gpu - cpu)


def _pod_settings(path: Path) -> dict[str, Any]:
    """The compiled pipeline's Kubernetes settings per executor (its platform spec)."""
    import yaml

    docs = list(yaml.safe_load_all(path.read_text(encoding="utf-8")))
    platform = docs[1] if len(docs) > 1 else {}
    return (
        platform.get("platforms", {})
        .get("kubernetes", {})
        .get("deploymentSpec", {})
        .get("executors", {})
    )


def empty_dir_paths(path: Path) -> list[str]:
    """Mount paths of the emptyDir volumes the compiled pipeline gives its pods (the workspace),
    except /dev/shm, which every container has."""
    return sorted(
        {
            mount["mountPath"]
            for executor in _pod_settings(path).values()
            for mount in executor.get("emptyDirMounts", [])
            if mount["mountPath"] != "/dev/shm"
        }
    )


def sandbox_security_options(path: Path) -> list[str]:
    """Docker ``--security-opt`` values (as the docker command line takes them) that give the
    containers what the compiled pods' sandbox settings ask for: seccomp ``Unconfined`` ->
    ``seccomp=unconfined``, AppArmor ``Unconfined`` -> ``apparmor=unconfined``, ``procMount:
    Unmasked`` -> ``systempaths=unconfined`` (what bwrap needs to create its namespaces as a
    non-root user; docs/sandbox.md).

    Raises:
        ConductorError: a Localhost profile, which this rehearsal cannot load.
    """
    import json

    from conductor_pipelines.kubernetes import SANDBOX_SPEC_ANNOTATION

    options: set[str] = set()
    for executor in _pod_settings(path).values():
        annotations = executor.get("podMetadata", {}).get("annotations", {})
        if SANDBOX_SPEC_ANNOTATION not in annotations:
            continue
        spec = json.loads(annotations[SANDBOX_SPEC_ANNOTATION])
        security = spec.get("securityContext", {})
        for key, option in (("seccompProfile", "seccomp"), ("appArmorProfile", "apparmor")):
            kind = security.get(key, {}).get("type")
            if kind == "Unconfined":
                options.add(f"{option}=unconfined")
            elif kind == "Localhost":
                raise ConductorError(
                    f"--docker: the pods' sandbox asks for a Localhost {key}, which this "
                    "rehearsal cannot load; rehearse with Unconfined or without it"
                )
        for container in spec.get("containers", []):
            if container.get("securityContext", {}).get("procMount") == "Unmasked":
                options.add("systempaths=unconfined")
    return sorted(options)


CLI_ONLY_OPTIONS = ("systempaths=unconfined",)
"""Options the docker command line turns into other API fields (``systempaths=unconfined`` ->
empty ``MaskedPaths``/``ReadonlyPaths``), which the Docker SDK, and so KFP's DockerRunner,
cannot set."""


def api_security_options(options: list[str]) -> list[str]:
    """The options of ``options`` the Docker API takes as ``SecurityOpt``; warns about the rest
    (without an unmasked /proc the sandbox in the rehearsal's tasks cannot create namespaces and
    refuses to run generated code, unless the pods accept limits only)."""
    dropped = [o for o in options if o in CLI_ONLY_OPTIONS]
    if dropped:
        log.warning(
            "--docker: %s cannot be given through KFP's DockerRunner (the Docker SDK has no "
            "MaskedPaths field); the tasks run with a masked /proc",
            ", ".join(dropped),
        )
    return [o for o in options if o not in CLI_ONLY_OPTIONS]


def secret_env_names(path: Path) -> list[str]:
    """The environment variables the compiled pipeline's tasks take from Kubernetes Secrets."""
    executors = _pod_settings(path)
    return sorted(
        {
            item["envVar"]
            for executor in executors.values()
            for secret in executor.get("secretAsEnv", [])
            for item in secret.get("keyToEnv", [])
        }
    )


def missing_images(images: list[str]) -> list[str]:
    """The images of ``images`` (tags or ``repository@digest``) the local Docker engine does not
    have (nothing is pulled).

    Raises:
        ConductorError: no Docker engine can be reached.
    """
    docker = _docker_client()
    try:
        have = {
            name
            for image in docker.images.list()
            for name in (*image.tags, *image.attrs.get("RepoDigests", []))
        }
    finally:
        docker.close()
    return [i for i in images if i not in have]


def pullable(image: str, pull: bool) -> bool:
    """Whether the rehearsal may let KFP's DockerRunner pull ``image``: from a registry on this
    machine's loopback (one that ``make images REGISTRY=127.0.0.1:PORT`` pushed to), or from any
    registry when asked (``pull``). Otherwise a missing image is an error: a rehearsal runs what
    was built here, not whatever a registry has under the name."""
    from conductor_core.cluster.images import is_loopback

    return pull or is_loopback(image)


def leftover_containers(rehearsal_id: str, settle_s: float = 20.0) -> list[str]:
    """Names of the containers of a rehearsal that still exist (running or stopped) after
    ``settle_s`` seconds: KFP starts them with ``auto_remove``, which the engine carries out
    just after the container exits."""
    import time

    docker = _docker_client()
    deadline = time.monotonic() + settle_s
    try:
        while True:
            found = _rehearsal_containers(docker, rehearsal_id)
            if not found or time.monotonic() > deadline:
                return [c.name for c in found]
            time.sleep(0.5)
    finally:
        docker.close()


def remove_containers(rehearsal_id: str) -> None:
    """Stop and remove every container of a rehearsal (after an interrupted run)."""
    docker = _docker_client()
    try:
        for c in _rehearsal_containers(docker, rehearsal_id):
            with contextlib.suppress(Exception):
                c.remove(force=True)
    finally:
        docker.close()


def _rehearsal_containers(docker: Any, rehearsal_id: str) -> list[Any]:
    # The engine auto-removes a KFP container just after it exits, which can fall between
    # listing its id and inspecting it; such a container is gone, not an error.
    return docker.containers.list(
        all=True, filters={"label": f"{RUN_LABEL}={rehearsal_id}"}, ignore_removed=True
    )


def _docker_client() -> Any:
    try:
        import docker
    except ImportError as exc:
        raise ConductorError(
            "--docker needs the Docker SDK: pip install 'conductor-core[containers]'"
        ) from exc
    try:
        client = docker.from_env()
        client.ping()
    except Exception as exc:
        raise ConductorError(
            f"--docker: no Docker engine answers ({exc}); start one, or run "
            "`make images`, which installs and starts it where it can"
        ) from exc
    return client


@contextlib.contextmanager
def rehearsal(compiled: Path, root: Path, pull: bool = False) -> Iterator[Rehearsal]:
    """Prepare a rehearsal of ``compiled`` under ``root``: check the images exist locally
    (or may be pulled: :func:`pullable`; KFP's runner pulls them as a node would, when the first
    task that names one starts), start an S3 server and an MLflow server on loopback unless
    ``MLFLOW_TRACKING_URI`` and an S3 endpoint are given, and stop them (and any container left
    behind) at the end.

    Raises:
        ConductorError: no engine, or an image the pipeline names is not built and may not be
            pulled.
    """
    images, gpu_only = pipeline_images(compiled)
    missing = missing_images(images)
    refused = [i for i in missing if not pullable(i, pull)]
    if refused:
        raise ConductorError(
            f"--docker: image(s) not built here: {', '.join(refused)}; run `make images` "
            "(nothing is pulled from a registry other than one on 127.0.0.1/localhost, unless "
            "--pull is given)"
        )
    if missing:
        log.info("--docker: %s will be pulled by the first task that runs it", ", ".join(missing))
    if missing_images(gpu_only):
        log.warning(
            "--docker: %s is not built here; only the GPU branches use it (a GPU profile "
            "cannot run in this rehearsal)",
            ", ".join(gpu_only),
        )
    rid = uuid.uuid4().hex[:12]
    given = given_services()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_exit_codes_kept())
        if given is not None:
            s3_env = {k: os.environ[k] for k in _S3_ENVS if os.environ.get(k)}
            s3_env.update({k: given["s3"] for k in ENDPOINT_ENVS})
            tracking_uri = store_uri = given["mlflow"]
            kept = True
            artifact_root = os.environ.get("CONDUCTOR_ARTIFACT_ROOT", "")
            if not artifact_root.startswith("s3://"):
                raise ConductorError(
                    "--docker with your own MLflow and S3: set CONDUCTOR_ARTIFACT_ROOT to an "
                    "s3://bucket/prefix the tasks share (or --set artifact_root=s3://...)"
                )
        else:
            from conductor_core.track.loopback import (
                running,
                start_mlflow_server,
                start_s3_server,
            )

            services = root / "services"
            s3 = stack.enter_context(running(start_s3_server(services, buckets=(BUCKET,))))
            mlflow = stack.enter_context(
                running(start_mlflow_server(services, f"s3://{BUCKET}/mlflow", s3.env))
            )
            s3_env, tracking_uri = dict(s3.env), mlflow.url
            store_uri, kept = f"sqlite:///{services / 'mlflow.db'}", False
            artifact_root = f"s3://{BUCKET}/pipelines"
        # What the compiled pipeline takes from Secrets, where this machine has a value.
        secrets = {
            name: value
            for name in secret_env_names(compiled)
            if (value := s3_env.get(name) or os.environ.get(name))
        }
        environment = {
            **secrets,
            **{k: v for k, v in s3_env.items() if k in ENDPOINT_ENVS or k == "AWS_DEFAULT_REGION"},
            "MLFLOW_TRACKING_URI": tracking_uri,
            "HF_HUB_OFFLINE": "1",
            **thread_settings(),
        }
        stack.callback(remove_containers, rid)
        yield Rehearsal(
            rehearsal_id=rid,
            tracking_uri=tracking_uri,
            artifact_root=artifact_root,
            environment=environment,
            security_options=sandbox_security_options(compiled),
            scratch=empty_dir_paths(compiled),
            store_uri=store_uri,
            kept_artifacts=kept,
            images=images,
        )


_S3_ENVS = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")
THREAD_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")


def thread_settings(environ: Any = None) -> dict[str, str]:
    """The compute thread counts of this process's environment (``THREAD_ENVS``, where set), for
    the task containers. On a cluster a pod's CPU limit bounds its threads; in a rehearsal the
    tasks share this machine's cores with whatever else runs on it, and a container does not
    inherit this process's environment, so torch in a task would start one OpenMP thread per
    core. Where cores are shared, threads spinning against other processes made a tiny model's
    generation 9 times slower (docs/notes/testing.md); the test session sets one thread for
    itself and every process it starts, the rehearsal's containers included."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in THREAD_ENVS if env.get(k)}


def _given_endpoint() -> str:
    return next((os.environ[k] for k in ENDPOINT_ENVS if os.environ.get(k)), "")


def given_services() -> dict[str, str] | None:
    """The MLflow server and S3 endpoint this process names for a rehearsal's tasks
    (``MLFLOW_TRACKING_URI`` and an S3 endpoint), as a cluster gives them: they outlive the
    rehearsal, so that a killed one can be resumed. None when either is missing: the rehearsal
    then starts its own on loopback, and its S3 (in memory) ends with it."""
    uri, endpoint = os.environ.get("MLFLOW_TRACKING_URI", ""), _given_endpoint()
    return {"mlflow": uri, "s3": endpoint} if uri and endpoint else None


@contextlib.contextmanager
def _exit_codes_kept() -> Iterator[None]:
    """Make KFP's DockerRunner read each task container's exit code before the container is
    removed.

    kfp 2.17 starts a task's container with ``auto_remove`` and, when the engine has removed it
    before it asks for the exit code, takes the task for a success; a container killed from
    outside (``docker kill``, the OOM killer) exits and is removed at once, so its task could
    pass without outputs and be cached as finished. Here its containers are kept until their
    exit code is read (``docker_task_handler.run_docker_container`` given a client whose
    containers are not auto-removed), then removed.
    """
    from kfp.local import docker_task_handler

    original = docker_task_handler.run_docker_container

    def run_kept(client: Any, *args: Any, **kwargs: Any) -> int:
        started: list[Any] = []
        try:
            return original(_KeptContainers(client, started), *args, **kwargs)
        finally:
            for container in started:
                with contextlib.suppress(Exception):
                    container.remove(force=True)

    docker_task_handler.run_docker_container = run_kept
    try:
        yield
    finally:
        docker_task_handler.run_docker_container = original


class _KeptContainers:
    """A Docker client whose ``containers.run`` never auto-removes, recording what it starts."""

    def __init__(self, client: Any, started: list[Any]) -> None:
        self.images = client.images
        self.containers = self
        self._client, self._started = client, started

    def run(self, **kwargs: Any) -> Any:
        container = self._client.containers.run(**{**kwargs, "auto_remove": False})
        self._started.append(container)
        return container


def writable_pipeline_root(path: Path) -> Path:
    """Create KFP's local pipeline root so that the tasks' user can write it (a pod's volume
    would be writable for it too): owned by uid 10001 when this process may chown, else
    world-writable."""
    path.mkdir(parents=True, exist_ok=True)
    uid, gid = (int(x) for x in TASK_USER.split(":"))
    try:
        os.chown(path, uid, gid)
    except PermissionError:
        path.chmod(0o777)
    return path
