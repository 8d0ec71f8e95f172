"""The charts as packages others depend on: rendered as subcharts of a parent chart (a
``file://`` dependency fetched by ``helm dependency build``) with the parent's ``global``
values, packaged with their README, schema and dashboard, and pushed by ``make chart-push``'s
script to an OCI registry on loopback (Debian's ``docker-registry``, the CNCF Distribution
registry), from which ``helm template oci://...`` renders what the checkout renders.
(The charts' files read without helm: tests/unit/test_chart_metadata.py.)
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from conductor_core.track.loopback import LoopbackServer, free_port, log_tail, running
from tests.support.helm import helm_env, run_helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "conductor"
RBAC_CHART = ROOT / "charts" / "conductor-training-rbac"
K8S_VERSION = "1.33.0"
NAMESPACE = "team-a"
REGISTRY_BINARY = "docker-registry"
# Fixed so that two renders of the chart agree (else the vLLM key is generated at each).
DETERMINISTIC = [
    "--set",
    "allowUnauthenticated=true",
    "--set",
    "conductorModel.source=models:/conductor/1",
    "--set",
    "vllm.apiKey.value=rehearsal-0123456789",
]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


def docs_of(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def objects(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def chart_version(chart: Path) -> str:
    return str(yaml.safe_load((chart / "Chart.yaml").read_text(encoding="utf-8"))["version"])


def validate(docs: list[dict[str, Any]]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


# ---- a subchart -------------------------------------------------------------------------------


def parent_chart(folder: Path, conductor: Path, rbac: Path) -> Path:
    """A parent chart depending on both charts by file:// (the conductor chart aliased)."""
    parent = folder / "platform"
    (parent / "templates").mkdir(parents=True)
    chart = {
        "apiVersion": "v2",
        "name": "platform",
        "version": "1.0.0",
        "dependencies": [
            {
                "name": "conductor",
                "alias": "llm",
                "version": chart_version(conductor),
                "repository": f"file://{conductor}",
            },
            {
                "name": "conductor-training-rbac",
                "version": chart_version(rbac),
                "repository": f"file://{rbac}",
                "condition": "training.enabled",
            },
        ],
    }
    (parent / "Chart.yaml").write_text(yaml.safe_dump(chart), encoding="utf-8")
    values = {
        "global": {"imagePullSecrets": [{"name": "platform-pull"}], "domain": "example.org"},
        "training": {"enabled": True},
        "llm": {
            "allowUnauthenticated": True,
            "conductorModel": {"source": "models:/conductor/1"},
            "imagePullSecrets": [{"name": "own-pull"}],
            "monitoring": {
                "serviceMonitor": {"enabled": True},
                "grafanaDashboard": {"enabled": True},
                "prometheusRule": {"enabled": True},
            },
        },
        "conductor-training-rbac": {"kfp": {"mode": "multi-user"}},
    }
    (parent / "values.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")
    return parent


def build_dependencies(helm: Path, home: Path, parent: Path) -> None:
    done = run_helm(helm, ["dependency", "build", str(parent)], home, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    packaged = sorted(p.name for p in (parent / "charts").iterdir())
    assert packaged == sorted(
        [
            f"conductor-{chart_version(CHART)}.tgz",
            f"conductor-training-rbac-{chart_version(RBAC_CHART)}.tgz",
        ]
    ), packaged


def test_renders_as_a_subchart_with_global_values(helm, home, tmp_path) -> None:
    parent = parent_chart(tmp_path, CHART, RBAC_CHART)
    build_dependencies(helm, home, parent)
    lint = run_helm(helm, ["lint", "--strict", str(parent)], home)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    done = run_helm(helm, ["template", "plat", str(parent), "--namespace", NAMESPACE], home)
    assert done.returncode == 0, done.stderr
    docs = docs_of(done.stdout)
    validate([d for d in docs if d["apiVersion"] != "monitoring.coreos.com/v1"])
    # the alias names the objects (<release>-<alias>), the subchart's own values apply
    gateway = objects(docs, "Deployment")["plat-llm"]
    spec = gateway["spec"]["template"]["spec"]
    # the parent's global.imagePullSecrets join the chart's own, on every pod
    assert spec["imagePullSecrets"] == [{"name": "own-pull"}, {"name": "platform-pull"}]
    for deployment in objects(docs, "Deployment").values():
        secrets = deployment["spec"]["template"]["spec"]["imagePullSecrets"]
        assert {"name": "platform-pull"} in secrets
    assert objects(docs, "PrometheusRule") and objects(docs, "ServiceMonitor")
    dashboard = objects(docs, "ConfigMap")["plat-llm-dashboard"]
    assert json.loads(dashboard["data"]["conductor-gateway.json"])["uid"] == "conductor-gateway"
    # the RBAC chart beside it, with its values from the parent
    bindings = objects(docs, "RoleBinding")
    assert any(
        s.get("name") == "default-editor" for b in bindings.values() for s in b["subjects"]
    ), bindings


def test_a_closed_schema_without_global_would_refuse_the_parent(helm, home, tmp_path) -> None:
    """The control: Helm hands every subchart the parent's `global`, so a closed schema that
    does not list it refuses to render as a dependency (why `global` is in the schema)."""
    copies = tmp_path / "copies"
    closed = {}
    for chart in (CHART, RBAC_CHART):
        copy = copies / chart.name
        shutil.copytree(chart, copy)
        schema_file = copy / "values.schema.json"
        schema = json.loads(schema_file.read_text(encoding="utf-8"))
        del schema["properties"]["global"]
        schema_file.write_text(json.dumps(schema), encoding="utf-8")
        values_file = copy / "values.yaml"
        values = yaml.safe_load(values_file.read_text(encoding="utf-8"))
        values.pop("global")
        values_file.write_text(yaml.safe_dump(values), encoding="utf-8")
        closed[chart.name] = copy
    parent = parent_chart(tmp_path, closed["conductor"], closed["conductor-training-rbac"])
    build_dependencies(helm, home, parent)
    done = run_helm(helm, ["template", "plat", str(parent), "--namespace", NAMESPACE], home)
    assert done.returncode != 0
    assert "Additional property global is not allowed" in done.stderr, done.stderr


# ---- the package ------------------------------------------------------------------------------


def test_package_holds_the_readme_schema_and_dashboard(helm, home, tmp_path) -> None:
    for chart in (CHART, RBAC_CHART):
        done = run_helm(helm, ["package", str(chart), "-d", str(tmp_path)], home)
        assert done.returncode == 0, done.stderr
        archive = tmp_path / f"{chart.name}-{chart_version(chart)}.tgz"
        with tarfile.open(archive) as tar:
            names = {name.split("/", 1)[1] for name in tar.getnames()}
        assert {"Chart.yaml", "values.yaml", "values.schema.json", "README.md"} <= names
        if chart == CHART:
            assert "dashboards/conductor-gateway.json" in names
        assert not any(name.endswith((".pyc", ".bak", ".swp")) for name in names), names


# ---- an OCI registry on loopback --------------------------------------------------------------


def start_registry(folder: Path) -> LoopbackServer:
    """Debian's docker-registry (Distribution 2.x) on a free loopback port, storing in
    ``folder``; waits until /v2/ answers."""
    binary = shutil.which(REGISTRY_BINARY) or f"/usr/bin/{REGISTRY_BINARY}"
    port = free_port()
    config = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(folder / "data")}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }
    (folder / "config.yml").write_text(yaml.safe_dump(config), encoding="utf-8")
    log = folder / "registry.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [binary, "serve", str(folder / "config.yml")],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = LoopbackServer(url=f"127.0.0.1:{port}", process=process, log=log, ready_s=0.0)
    start = time.monotonic()
    while time.monotonic() - start < 30:
        if process.poll() is not None:
            server.stop()
            pytest.fail(f"docker-registry exited with {process.returncode}:\n{log_tail(log)}")
        try:
            with urllib.request.urlopen(f"http://{server.url}/v2/", timeout=2) as answer:
                if answer.status == 200:
                    server.ready_s = time.monotonic() - start
                    return server
        except OSError:
            time.sleep(0.2)
    server.stop()
    pytest.fail(f"docker-registry did not answer in 30 s:\n{log_tail(log)}")


@pytest.fixture(scope="module")
def registry(tmp_path_factory) -> Iterator[LoopbackServer]:
    if not (shutil.which(REGISTRY_BINARY) or os.access(f"/usr/bin/{REGISTRY_BINARY}", os.X_OK)):
        pytest.skip("no docker-registry binary (Debian: apt-get install docker-registry)")
    with running(start_registry(tmp_path_factory.mktemp("registry"))) as server:
        yield server


def manifest_digest(registry: str, repository: str, tag: str) -> str:
    request = urllib.request.Request(
        f"http://{registry}/v2/{repository}/manifests/{tag}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
        method="HEAD",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return answer.headers["Docker-Content-Digest"]


def test_pushed_to_an_oci_registry_and_installed_from_it(helm, home, registry, tmp_path) -> None:
    """`make chart-push`'s script packages both charts and pushes them (plain HTTP: loopback);
    `helm template oci://...` then renders from the registry exactly what the checkout
    renders, and the digests it recorded are the registry's."""
    out = tmp_path / "dist"
    env = {**helm_env(home), "HELM_BIN": str(helm)}
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "chart_push.py"),
            f"{registry.url}/charts",
            "--out",
            str(out),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    pushed = {r["chart"]: r for r in json.loads((out / "pushed.json").read_text("utf-8"))}
    assert set(pushed) == {"conductor", "conductor-training-rbac"}
    for chart in (CHART, RBAC_CHART):
        record = pushed[chart.name]
        assert record["ref"] == f"oci://{registry.url}/charts/{chart.name}"
        assert record["version"] == chart_version(chart)
        digest = manifest_digest(registry.url, f"charts/{chart.name}", record["version"])
        assert record["digest"] == digest, (record, digest)
        assert record["ref"] in done.stdout

    ref, version = pushed["conductor"]["ref"], pushed["conductor"]["version"]
    values = [*DETERMINISTIC, "--set", "monitoring.prometheusRule.enabled=true"]
    remote = run_helm(
        helm,
        ["template", "rel", ref, "--version", version, "--plain-http", "-n", NAMESPACE, *values],
        home,
        timeout=120,
    )
    assert remote.returncode == 0, remote.stderr
    local = run_helm(helm, ["template", "rel", str(CHART), "-n", NAMESPACE, *values], home)
    assert local.returncode == 0, local.stderr
    assert docs_of(remote.stdout) == docs_of(local.stdout)
    validate([d for d in docs_of(remote.stdout) if d["apiVersion"] != "monitoring.coreos.com/v1"])
    # its metadata and README travel with it
    shown = run_helm(
        helm, ["show", "chart", ref, "--version", version, "--plain-http"], home, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    meta = yaml.safe_load(shown.stdout)
    assert meta["annotations"]["artifacthub.io/license"] == "Apache-2.0"
    readme = run_helm(
        helm, ["show", "readme", ref, "--version", version, "--plain-http"], home, timeout=60
    )
    assert readme.returncode == 0 and "| `gateway.image.repository` |" in readme.stdout
    # the RBAC chart too, with its values
    rbac = run_helm(
        helm,
        [
            "template",
            "rbac",
            pushed["conductor-training-rbac"]["ref"],
            "--version",
            pushed["conductor-training-rbac"]["version"],
            "--plain-http",
            "-n",
            "kubeflow",
        ],
        home,
        timeout=120,
    )
    assert rbac.returncode == 0, rbac.stderr
    assert objects(docs_of(rbac.stdout), "RoleBinding")


def test_chart_push_needs_a_registry() -> None:
    done = subprocess.run(
        ["make", "-s", "chart-push"], cwd=ROOT, capture_output=True, text=True, timeout=30
    )
    assert done.returncode != 0
    assert "set REGISTRY=host[:port][/path]" in done.stderr
