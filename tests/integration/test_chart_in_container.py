"""Rehearse the conductor chart for real: the gateway Deployment that ``helm template`` renders,
run in the built serve image as a kubelet would run that pod, under the local Docker engine.

What the rendered pod spec says is what the container gets: the image (the chart's values point
it at the local reference of conductor_core.cluster.images, pull policy ``Never``), command and
args, env (``value``; ``valueFrom`` resolved from the rendered Secret and ConfigMaps), the
ConfigMap and Secret volumes as read-only bind mounts of files written from the rendered objects
(items, ``subPath``, ``defaultMode``, ``fsGroup`` ownership), emptyDirs as tmpfs, the security
contexts (runAsUser/runAsGroup -> user, fsGroup -> a supplementary group, runAsNonRoot checked,
readOnlyRootFilesystem -> a read-only root, capabilities -> cap_drop/cap_add,
allowPrivilegeEscalation false -> no-new-privileges) and the memory limit. Then the rendered
probes are polled until they pass (the liveness probe within the time after which the kubelet
would restart the container), a chat completion is made with a key of the rendered Secret, and
the rendered preStop hook is run in the container and makes ``/readyz`` fail.

Networking rule of these machines: the host's network only, every server on 127.0.0.1. The chart
hard-codes ``--host 0.0.0.0 --port 8000`` (a pod has its own network namespace); so the test
rewrites only those two argument values, to 127.0.0.1 and a free port, and maps the container
port 8000 of the probes to that port. Everything else runs as rendered.

Skipped, with the reason, where no Docker engine runs, the serve image is not built (`make
images`) or there is no helm.
"""

from __future__ import annotations

import base64
import os
import re
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from conductor_core.cluster.images import image as image_reference
from conductor_core.track.loopback import LOOPBACK, free_port
from tests.support.containers import docker_or_skip, image_or_skip
from tests.support.helm import run_helm

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "conductor"
RELEASE, NAMESPACE = "rehearsal", "conductor-rehearsal"
CLIENT_KEY = "sk-rehearsal-client-key-0001"
PROBE_DEADLINE_S = 90.0  # a slow shared machine; the kubelet's own budget is asserted below


def values() -> dict[str, Any]:
    """The release's values: closed (a client key), the serve image as built here, the scripted
    plan source (no vLLM), a pool of simulated workers (a pool ConfigMap), and a provider key
    given literally (an env var from the chart's Secret)."""
    repository, _, tag = image_reference("serve").rpartition(":")
    return {
        "apiKeys": {"keys": [CLIENT_KEY]},
        "conductorModel": {"enabled": False},
        "gateway": {
            "conductor": "scripted",
            "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
            "logLevel": "INFO",
        },
        "providerKeys": [{"name": "REHEARSAL_PROVIDER_KEY", "value": "sk-provider-literal"}],
        "pool": {
            "workers": [
                {
                    "name": name,
                    "provider": "simulated",
                    "model": name,
                    "simulation": {"problems": ["bundled"], "latency_ms": 5, "seed": seed},
                }
                for seed, name in enumerate(["sim-math", "sim-general"], start=1)
            ]
        },
    }


# ---- the rendered objects -----------------------------------------------------------------------


def render(helm: Path, home: Path) -> list[dict[str, Any]]:
    home.mkdir(parents=True, exist_ok=True)
    file = home / "rehearsal-values.yaml"
    file.write_text(yaml.safe_dump(values()), encoding="utf-8")
    done = run_helm(
        helm, ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", str(file)], home
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def named(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for doc in docs:
        if doc["kind"] == kind and doc["metadata"]["name"] == name:
            return doc
    raise AssertionError(f"the chart rendered no {kind} {name!r} (a pod would not start)")


def object_data(obj: dict[str, Any]) -> dict[str, bytes]:
    """A Secret's or ConfigMap's keys and contents, as the kubelet would write them."""
    if obj["kind"] == "ConfigMap":  # data as text, binaryData in base64
        out = {k: base64.b64decode(v) for k, v in (obj.get("binaryData") or {}).items()}
        return out | {k: v.encode() for k, v in (obj.get("data") or {}).items()}
    out = {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
    return out | {k: v.encode() for k, v in (obj.get("stringData") or {}).items()}


def resolve_env(docs: list[dict[str, Any]], c: dict[str, Any]) -> dict[str, str]:
    """The container's environment: ``envFrom`` first, then ``env`` (which wins), with each
    ``valueFrom`` looked up in the rendered objects; a reference to an object the chart did not
    render fails (unless ``optional``), as the pod would not start."""
    env: dict[str, str] = {}
    for source in c.get("envFrom") or []:
        kind = "Secret" if "secretRef" in source else "ConfigMap"
        ref = source.get("secretRef") or source["configMapRef"]
        data = object_data(named(docs, kind, ref["name"]))
        env.update({source.get("prefix", "") + k: v.decode() for k, v in data.items()})
    for var in c.get("env") or []:
        if "valueFrom" not in var:
            env[var["name"]] = str(var.get("value", ""))
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            fields = {"metadata.name": f"{RELEASE}-pod", "metadata.namespace": NAMESPACE}
            fields |= {"status.podIP": LOOPBACK, "status.hostIP": LOOPBACK}
            env[var["name"]] = fields[source["fieldRef"]["fieldPath"]]
            continue
        kind = "Secret" if "secretKeyRef" in source else "ConfigMap"
        ref = source.get("secretKeyRef") or source["configMapKeyRef"]
        try:
            data = object_data(named(docs, kind, ref["name"]))
            env[var["name"]] = data[ref["key"]].decode()
        except (AssertionError, KeyError):
            if not ref.get("optional"):
                raise AssertionError(f"env {var['name']}: {kind} {ref} is not rendered") from None
    return env


def write_volume(
    docs: list[dict[str, Any]], volume: dict[str, Any], folder: Path, fs_group: int | None
) -> Path:
    """A ConfigMap or Secret volume as files (its ``items`` or every key; ``defaultMode`` or an
    item's ``mode``), owned by root with the group ``fs_group`` as the kubelet writes them."""
    kind = "Secret" if "secret" in volume else "ConfigMap"
    spec = volume.get("secret") or volume["configMap"]
    name = spec.get("secretName") or spec.get("name")
    data = object_data(named(docs, kind, name))
    items = spec.get("items") or [{"key": k, "path": k} for k in data]
    folder.mkdir(parents=True)
    for item in items:
        target = folder / item["path"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data[item["key"]])
        target.chmod(item.get("mode", spec.get("defaultMode", 0o644)))
        if fs_group is not None and os.geteuid() == 0:
            os.chown(target, 0, fs_group)
        elif fs_group is not None:  # cannot give the file away: let the pod's user read it
            target.chmod(target.stat().st_mode | 0o444)
    return folder


def quantity_bytes(value: str | int) -> int:
    """A Kubernetes memory quantity (``2Gi``, ``512M``, ``1e9``) in bytes."""
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6}
    units |= {"G": 10**9, "T": 10**12}
    match = re.fullmatch(r"([0-9.e+]+)([A-Za-z]*)", str(value))
    assert match, f"memory quantity {value!r}"
    return int(float(match.group(1)) * units.get(match.group(2), 1))


def run_options(
    docs: list[dict[str, Any]], pod: dict[str, Any], c: dict[str, Any], scratch: Path
) -> dict[str, Any]:
    """``docker run`` options (Docker SDK) for container ``c`` of pod spec ``pod``."""
    from docker.types import Mount

    pod_sc = pod.get("securityContext") or {}
    sc = {**pod_sc, **(c.get("securityContext") or {})}  # the container's settings win
    uid, gid = sc.get("runAsUser"), sc.get("runAsGroup")
    if sc.get("runAsNonRoot"):
        assert uid not in (None, 0), "runAsNonRoot with no non-root runAsUser: the pod fails"
    volumes = {v["name"]: v for v in pod.get("volumes") or []}
    mounts, tmpfs, written = [], {}, {}
    for m in c.get("volumeMounts") or []:
        volume = volumes[m["name"]]
        if "emptyDir" in volume:
            assert not m.get("subPath"), "subPath into an emptyDir is not rehearsed"
            size = volume["emptyDir"].get("sizeLimit")
            tmpfs[m["mountPath"]] = f"size={quantity_bytes(size)}" if size else ""
            continue
        assert "configMap" in volume or "secret" in volume, f"volume {volume} not rehearsed"
        if m["name"] not in written:
            folder = scratch / m["name"]
            written[m["name"]] = write_volume(docs, volume, folder, pod_sc.get("fsGroup"))
        source = written[m["name"]] / m.get("subPath", "")
        # ConfigMap and Secret volumes are always read-only in a pod
        mounts.append(Mount(m["mountPath"], str(source), type="bind", read_only=True))
    caps = sc.get("capabilities") or {}
    options: dict[str, Any] = {
        "entrypoint": c.get("command"),
        "command": c.get("args"),
        "environment": resolve_env(docs, c),
        "mounts": mounts,
        "tmpfs": tmpfs,
        "read_only": bool(sc.get("readOnlyRootFilesystem")),
        "cap_drop": caps.get("drop") or None,
        "cap_add": caps.get("add") or None,
        "security_opt": (
            ["no-new-privileges"] if sc.get("allowPrivilegeEscalation") is False else None
        ),
        "network_mode": "host",  # the rule here: host network, loopback only
    }
    if uid is not None:
        options["user"] = f"{uid}:{gid}" if gid is not None else str(uid)
    if pod_sc.get("fsGroup") is not None:
        options["group_add"] = [str(pod_sc["fsGroup"])]
    if c.get("workingDir"):
        options["working_dir"] = c["workingDir"]
    memory = ((c.get("resources") or {}).get("limits") or {}).get("memory")
    if memory is not None:
        options["mem_limit"] = quantity_bytes(memory)
    return options


def on_loopback(args: list[str], port: int) -> list[str]:
    """``args`` with only the listening address and port replaced (the chart's ``--host
    0.0.0.0 --port 8000``, meant for the pod's own network namespace): 127.0.0.1 and ``port``."""
    out = list(args)
    for flag, value in (("--host", LOOPBACK), ("--port", str(port))):
        assert flag in out, f"the rendered args have no {flag}: {args}"
        out[out.index(flag) + 1] = value
    return out


# ---- probes -----------------------------------------------------------------------------------


def probe_target(c: dict[str, Any], probe: dict[str, Any], ports: dict[int, int]) -> str:
    """The URL an ``httpGet`` probe asks, its port (a name or a number) resolved through the
    container's ports and then ``ports`` (container port -> the port used here)."""
    get = probe["httpGet"]
    port = get["port"]
    if isinstance(port, str) and not port.isdigit():
        port = next(p["containerPort"] for p in c["ports"] if p.get("name") == port)
    scheme = get.get("scheme", "HTTP").lower()
    return f"{scheme}://{LOOPBACK}:{ports[int(port)]}{get.get('path', '/')}"


def restart_budget_s(c: dict[str, Any]) -> float:
    """How long the kubelet lets the container start before it restarts it: the startup
    probe's budget when there is one, else the liveness probe's (defaults as Kubernetes')."""
    probe = c.get("startupProbe") or c.get("livenessProbe") or {}
    return probe.get("initialDelaySeconds", 0) + probe.get("periodSeconds", 10) * probe.get(
        "failureThreshold", 3
    )


def wait_for_probes(container: Any, c: dict[str, Any], ports: dict[int, int]) -> dict[str, float]:
    """Poll every probe of ``c`` (startup first) until each has passed once; seconds to each."""
    kinds = [k for k in ("startupProbe", "livenessProbe", "readinessProbe") if k in c]
    assert kinds, "the gateway container has no probes"
    for kind in kinds:
        assert "httpGet" in c[kind], f"{kind}: only httpGet probes are rehearsed"
    t0 = time.monotonic()
    passed: dict[str, float] = {}
    last: dict[str, str] = {}
    while len(passed) < len(kinds):
        container.reload()
        if container.status not in ("created", "running"):
            logs = container.logs().decode(errors="replace")[-4000:]
            pytest.fail(f"the gateway container exited ({container.status}):\n{logs}")
        if time.monotonic() - t0 > PROBE_DEADLINE_S:
            logs = container.logs().decode(errors="replace")[-4000:]
            pytest.fail(f"probes did not pass in {PROBE_DEADLINE_S:g}s: {last}\n{logs}")
        started = "startupProbe" not in kinds or "startupProbe" in passed
        for kind in kinds:
            # the kubelet runs the other probes only once the startup probe has passed
            if kind in passed or (not started and kind != "startupProbe"):
                continue
            probe = c[kind]
            try:
                r = httpx.get(probe_target(c, probe, ports), timeout=probe.get("timeoutSeconds", 1))
                ok, last[kind] = 200 <= r.status_code < 400, f"HTTP {r.status_code}"
            except httpx.HTTPError as exc:
                ok, last[kind] = False, type(exc).__name__
            if ok:
                passed[kind] = time.monotonic() - t0
        time.sleep(0.2)
    return passed


# ---- the rehearsal ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_client():
    client = docker_or_skip()
    yield client
    client.close()


def test_the_rendered_gateway_pod_runs_passes_its_probes_and_answers(
    docker_client, helm, tmp_path
) -> None:
    image = image_or_skip(docker_client, "serve")
    docs = render(helm, tmp_path / "helm")
    deployment = named(docs, "Deployment", f"{RELEASE}-conductor")
    pod = deployment["spec"]["template"]["spec"]
    c = next(x for x in pod["containers"] if x["name"] == "gateway")
    assert c["image"] == image  # the chart renders the local reference of cluster.images
    assert c["imagePullPolicy"] == "Never"

    # The chart's listening port is the port its probes and Service name.
    args = c["args"]
    chart_port = int(args[args.index("--port") + 1])
    assert {p["containerPort"] for p in c["ports"]} == {chart_port}
    port = free_port()
    c = {**c, "args": on_loopback(args, port)}
    ports = {chart_port: port}

    options = run_options(docs, pod, c, tmp_path / "volumes")
    assert options["read_only"] and options["cap_drop"] == ["ALL"]
    assert options["user"] == "10001:10001"
    assert options["environment"]["REHEARSAL_PROVIDER_KEY"] == "sk-provider-literal"
    name = f"conductor-chart-rehearsal-{uuid.uuid4().hex[:8]}"
    container = docker_client.containers.run(image, name=name, detach=True, **options)
    try:
        passed = wait_for_probes(container, c, ports)
        # the kubelet would have restarted a container slower than this
        assert passed["livenessProbe"] < restart_budget_s(c), passed

        base = f"http://{LOOPBACK}:{port}/v1"
        secret = object_data(named(docs, "Secret", f"{RELEASE}-conductor-secrets"))
        keys = [k for k in secret["api-keys"].decode().split() if not k.startswith("#")]
        assert keys == [CLIENT_KEY]
        closed = httpx.post(f"{base}/chat/completions", json={"messages": []}, timeout=10)
        assert closed.status_code == 401  # the keys file from the Secret volume is in force
        with openai.OpenAI(base_url=base, api_key=keys[0], max_retries=0, timeout=60) as client:
            reply = client.chat.completions.create(
                model="conductor",
                messages=[{"role": "user", "content": "Calculate: (56 + 26) * 25 = ?"}],
                extra_body={"conductor": {"return_trace": True}},
            )
        assert reply.choices[0].message.content
        assert reply.choices[0].finish_reason == "stop"
        summary = reply.model_extra["conductor"]
        assert summary["calls"] >= 1 and not summary["infra_error"]
        steps = [s for r in summary["trace"]["rounds"] for s in r["workflow"]["steps"]]
        # the workers of the rendered pool ConfigMap, not the image's bundled pool
        assert steps and {s["model"] for s in steps} <= {"sim-math", "sim-general"}

        # In the container as rendered: uid/gid, no capabilities, no privilege escalation.
        status = container.exec_run(["cat", "/proc/self/status"]).output.decode()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        assert fields["Uid"].split()[0] == "10001" and fields["Gid"].split()[0] == "10001"
        assert int(fields["CapEff"], 16) == 0 and fields["NoNewPrivs"].strip() == "1"
        assert "10001" in fields["Groups"].split()  # fsGroup

        # The rendered preStop hook drains through /readyz while the gateway still serves.
        hook = c["lifecycle"]["preStop"]["exec"]["command"]
        container.exec_run(hook, detach=True)
        ready = probe_target(c, c["readinessProbe"], ports)
        deadline = time.monotonic() + 10
        while httpx.get(ready, timeout=5).status_code != 503:
            assert time.monotonic() < deadline, "/readyz still 200 after the preStop hook"
            time.sleep(0.2)
        assert httpx.get(probe_target(c, c["livenessProbe"], ports), timeout=5).status_code == 200
    finally:
        container.remove(force=True)
