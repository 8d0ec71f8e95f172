"""The conductor Helm chart (the inference service), rendered by helm: ``helm lint --strict``,
``helm template`` of several value sets validated strictly against the Kubernetes schemas, and what
the rendered objects must say (GPUs, probes, secrets, the pool the gateway loads), plus the values
schema's and the templates' refusals. (What can be read from the chart's files without helm:
tests/unit/test_conductor_chart.py.)

Value sets (``tests/fixtures/chart/``; ``minimal`` is the chart's defaults plus
``allowUnauthenticated`` and a pinned ``conductorModel.source``, without which they do not render):

* ``minimal``: gateway + Conductor model pinned to ``models:/conductor/1``, bundled pool, open;
* ``gpu``: a 4-GPU Conductor, tensor parallel 2, runtime class, node selector, tolerations, PVC;
* ``existing-secrets``: every credential referenced in existing Secrets, MLflow tracing on;
* ``literal-secrets``: credentials given literally (the chart's own Secret);
* ``autoscaling``: HPA, percentage PDB, LoadBalancer, ServiceMonitor, restricted ingress;
* ``workers``: two open-weight workers on vLLM among an API and a simulated worker;
* ``exposed``: an Ingress with TLS, an HPA on in-flight requests, narrowed network policies,
  spread vLLM pods with a minAvailable budget, a literal gateway-to-vLLM key.
"""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import run_helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "conductor"
FIXTURES = ROOT / "tests" / "fixtures" / "chart"
K8S_VERSION = "1.33.0"
RELEASE, NAMESPACE = "rel", "team-a"
VALUE_SETS = [
    "minimal",
    "gpu",
    "existing-secrets",
    "literal-secrets",
    "autoscaling",
    "workers",
    "exposed",
]
CRD_KINDS = {"ServiceMonitor"}


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


MINIMAL = ["-f", str(FIXTURES / "minimal.yaml")]


def value_args(value_set: str) -> list[str]:
    return ["-f", str(FIXTURES / f"{value_set}.yaml")]


def template(helm: Path, home: Path, args: list[str], base: bool):
    """``helm template`` of the chart; ``base``: on top of the minimal values (open, so that
    the test's own values decide what else renders)."""
    values = [*MINIMAL, *args] if base else list(args)
    return run_helm(
        helm, ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *values], home
    )


def render(helm: Path, home: Path, *args: str, base: bool = True) -> list[dict[str, Any]]:
    done = template(helm, home, list(args), base)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def render_error(helm: Path, home: Path, *args: str, base: bool = True) -> str:
    done = template(helm, home, list(args), base)
    assert done.returncode != 0, f"rendered although it should not: {args}"
    return done.stderr


@pytest.fixture(scope="module")
def rendered(helm, home) -> dict[str, list[dict[str, Any]]]:
    return {name: render(helm, home, *value_args(name)) for name in VALUE_SETS}


def objects(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def container(deployment: dict[str, Any], name: str) -> dict[str, Any]:
    spec = deployment["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] + spec.get("initContainers", []) if c["name"] == name)


def vllm_deployments(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {
        name: d
        for name, d in objects(docs, "Deployment").items()
        if d["metadata"]["labels"]["app.kubernetes.io/component"] in {"conductor-model", "worker"}
    }


def gateway(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return objects(docs, "Deployment")[f"{RELEASE}-conductor"]


def option(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def env_of(c: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in c.get("env") or []}


# ---- helm lint and schema-valid manifests ---------------------------------------------------


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_helm_lint_strict_passes(helm, home, value_set) -> None:
    done = run_helm(helm, ["lint", "--strict", str(CHART), *value_args(value_set)], home)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 chart(s) failed" in done.stdout


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_rendered_manifests_validate_strictly(rendered, value_set) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    docs = rendered[value_set]
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            # No schema for CRDs here: check the shape Prometheus Operator needs.
            assert doc["apiVersion"] == "monitoring.coreos.com/v1"
            assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
            assert doc["spec"]["selector"] and doc["spec"]["endpoints"]
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    broken = dict(gateway(docs))
    broken["spec"] = {**broken["spec"], "replcas": 2}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def test_minimal_renders_the_expected_objects(rendered) -> None:
    kinds = sorted(d["kind"] for d in rendered["minimal"])
    assert kinds == sorted(
        [
            "ServiceAccount",
            "ConfigMap",
            "Service",
            "Service",
            "Deployment",
            "Deployment",
            "PodDisruptionBudget",
            "PodDisruptionBudget",
            "NetworkPolicy",
            "NetworkPolicy",
            "Pod",
            "Secret",
        ]
    )
    # nothing literal: no Secret of the chart's credentials, only the generated vLLM key
    assert list(objects(rendered["minimal"], "Secret")) == [f"{RELEASE}-conductor-vllm-api-key"]


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_no_service_makes_kubernetes_inject_vllm_variables(rendered, value_set) -> None:
    docs = rendered[value_set]
    for name in objects(docs, "Service"):
        # Service links turn a Service "vllm" into VLLM_PORT, VLLM_SERVICE_HOST, ... in every pod.
        assert not name.replace("-", "_").upper().startswith("VLLM"), name
    for deployment in vllm_deployments(docs).values():
        assert deployment["spec"]["template"]["spec"]["enableServiceLinks"] is False


# ---- the Conductor model on vLLM ------------------------------------------------------------


def test_minimal_conductor_model(rendered) -> None:
    docs = rendered["minimal"]
    model = vllm_deployments(docs)[f"{RELEASE}-conductor-model"]
    vllm = container(model, "vllm")
    args = vllm["args"]
    assert vllm["command"] == ["vllm", "serve"]
    assert args[0] == "/models/conductor"
    assert option(args, "--served-model-name") == "conductor"
    assert option(args, "--tensor-parallel-size") == "1"
    assert option(args, "--max-model-len") == "8192"
    assert "--data-parallel-size" not in args and "--pipeline-parallel-size" not in args
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert model["spec"]["strategy"] == {"type": "Recreate"}
    fetch = container(model, "fetch-weights")
    assert fetch["command"][:2] == ["python", "-c"]
    assert "conductor_core.track.registry import load_model_dir" in fetch["command"][2]
    env = env_of(fetch)
    assert env["MODEL_URI"]["value"] == "models:/conductor/1"
    assert env["MLFLOW_TRACKING_URI"]["value"] == "http://mlflow.mlflow.svc.cluster.local:5000"
    # the gateway calls this Service, which exists with the port in the URL
    service = objects(docs, "Service")[f"{RELEASE}-conductor-model"]
    gw_args = container(gateway(docs), "gateway")["args"]
    port = service["spec"]["ports"][0]["port"]
    assert option(gw_args, "--conductor") == f"http://{RELEASE}-conductor-model:{port}/v1"
    assert option(gw_args, "--conductor-model") == "conductor"
    assert "--pool" not in gw_args  # no workers given: the bundled simulated pool


def test_fetch_script_compiles_and_links_the_model_folder(rendered, tmp_path, monkeypatch) -> None:
    """The fetcher links /models/conductor to the folder with config.json and records the source;
    on persistent storage it skips a source it holds, and a new one (a new version pinned)
    replaces the old download."""
    model = vllm_deployments(rendered["minimal"])[f"{RELEASE}-conductor-model"]
    script = container(model, "fetch-weights")["command"][2]
    code = compile(script.replace('"/models"', repr(str(tmp_path))), "fetch", "exec")
    fetched: list[tuple[str, Path]] = []

    def load_model_dir(uri: str, dst: Path) -> Path:  # as the library's: a folder inside dst
        fetched.append((uri, Path(dst)))
        nested = Path(dst) / "artifacts" / "model"
        nested.mkdir(parents=True)
        (nested / "config.json").write_text(json.dumps({"uri": uri}), encoding="utf-8")
        return nested

    import conductor_core.track.registry as registry

    monkeypatch.setattr(registry, "load_model_dir", load_model_dir)
    monkeypatch.setenv("MODEL_KEY", "conductor")
    link = tmp_path / "conductor"

    def fetch(uri: str, skip: bool) -> None:
        monkeypatch.setenv("MODEL_URI", uri)
        monkeypatch.setenv("SKIP_IF_PRESENT", str(skip).lower())
        try:
            exec(code, {})
        except SystemExit as done:
            assert done.code in (0, None)

    fetch("models:/conductor/1", skip=False)
    assert link.is_symlink() and json.loads((link / "config.json").read_text()) == {
        "uri": "models:/conductor/1"
    }
    assert not Path(link.readlink()).is_absolute()  # valid wherever the volume is mounted
    first = fetched[-1][1]
    fetch("models:/conductor/1", skip=True)  # the pod restarted: nothing to fetch
    assert len(fetched) == 1
    fetch("models:/conductor/2", skip=True)  # a new version pinned: fetched, the old one gone
    assert [uri for uri, _ in fetched] == ["models:/conductor/1", "models:/conductor/2"]
    assert json.loads((link / "config.json").read_text()) == {"uri": "models:/conductor/2"}
    assert not first.exists() and fetched[-1][1].is_dir()
    assert (tmp_path / ".conductor.source").read_text() == "models:/conductor/2"


def test_the_conductor_model_is_pinned_and_the_gateway_reports_its_version(helm, home) -> None:
    """A registry alias moves: the chart refuses it and names the pin; the gateway gets the
    pinned source (or conductorModel.version) as CONDUCTOR_MODEL_VERSION, which /v1/models and
    build_info show, so a new pin rolls the gateway's pods too."""
    error = render_error(helm, home, "--set", "conductorModel.source=models:/conductor@champion")
    assert "registry alias" in error and "models:/conductor/<VERSION>" in error
    empty = render_error(helm, home, "--set", "allowUnauthenticated=true", base=False)
    assert "conductorModel.source is empty" in empty
    worker = [
        "--set",
        "pool.workers[0].name=coder",
        "--set",
        "pool.workers[0].deploy.source=models:/coder@prod",
    ]
    assert "pool.workers[0].deploy.source models:/coder@prod is a registry alias" in (
        render_error(helm, home, *worker)
    )
    version = env_of(container(gateway(render(helm, home)), "gateway"))["CONDUCTOR_MODEL_VERSION"]
    assert version == {"name": "CONDUCTOR_MODEL_VERSION", "value": "models:/conductor/1"}
    docs = render(helm, home, "--set", "conductorModel.version=7 (run 42)")
    env = env_of(container(gateway(docs), "gateway"))
    assert env["CONDUCTOR_MODEL_VERSION"]["value"] == "7 (run 42)"
    external = ["--set", "conductorModel.enabled=false", "--set", "gateway.conductor=scripted"]
    assert "CONDUCTOR_MODEL_VERSION" not in env_of(
        container(gateway(render(helm, home, *external)), "gateway")
    )
    # a new pin changes both pod templates: both Deployments roll
    before, after = (
        render(helm, home),
        render(helm, home, "--set", "conductorModel.source=models:/conductor/2"),
    )
    for name in (f"{RELEASE}-conductor", f"{RELEASE}-conductor-model"):
        old, new = (objects(d, "Deployment")[name]["spec"]["template"] for d in (before, after))
        assert old != new, name


def test_a_rolling_update_of_the_model_surges_one_pod(helm, home) -> None:
    rolling = ["--set", "conductorModel.updateStrategy=RollingUpdate"]
    model = vllm_deployments(render(helm, home, *rolling))[f"{RELEASE}-conductor-model"]
    assert model["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    # the surge pod mounts the claim beside the old one: only a ReadWriteMany claim allows it
    claim = [*rolling, "--set", "vllm.storage.type=persistentVolumeClaim"]
    assert "ReadWriteMany" in render_error(helm, home, *claim)
    shared = render(helm, home, *claim, "--set", "vllm.storage.accessModes={ReadWriteMany}")
    model = vllm_deployments(shared)[f"{RELEASE}-conductor-model"]
    assert model["spec"]["strategy"]["type"] == "RollingUpdate"


def test_gpu_values(rendered) -> None:
    docs = rendered["gpu"]
    model = vllm_deployments(docs)[f"{RELEASE}-conductor-model"]
    pod = model["spec"]["template"]["spec"]
    vllm = container(model, "vllm")
    assert vllm["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert vllm["resources"]["requests"]["nvidia.com/gpu"] == 4
    assert option(vllm["args"], "--tensor-parallel-size") == "2"
    assert option(vllm["args"], "--data-parallel-size") == "2"  # 4 GPUs / TP 2
    assert option(vllm["args"], "--served-model-name") == "conductor-7b"
    assert vllm["image"] == "vllm/vllm-openai:v0.28.0"  # the tag overridden, the rest kept
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["nodeSelector"] == {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"}
    assert pod["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}
    ]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "32Gi"}
    claim = volumes["models"]["persistentVolumeClaim"]["claimName"]
    pvc = objects(docs, "PersistentVolumeClaim")[claim]
    assert pvc["spec"]["resources"]["requests"]["storage"] == "100Gi"
    assert pvc["spec"]["storageClassName"] == "premium-rwo"
    assert env_of(container(model, "fetch-weights"))["SKIP_IF_PRESENT"]["value"] == "true"
    assert option(container(gateway(docs), "gateway")["args"], "--conductor-model") == (
        "conductor-7b"
    )


def test_pipeline_parallelism_takes_the_remaining_gpus(helm, home) -> None:
    docs = render(
        helm,
        home,
        "-f",
        str(FIXTURES / "gpu.yaml"),
        "--set",
        "conductorModel.remainingGpusAs=pipeline",
    )
    args = container(vllm_deployments(docs)[f"{RELEASE}-conductor-model"], "vllm")["args"]
    assert option(args, "--pipeline-parallel-size") == "2"
    assert "--data-parallel-size" not in args


def test_a_vllm_server_scales_to_zero_replicas_when_asked(helm, home) -> None:
    """0 is a replica count (the Deployment kept, no GPU held), not a missing value."""
    name = f"{RELEASE}-conductor-model"
    docs = render(helm, home, "--set", "conductorModel.replicaCount=0")
    assert vllm_deployments(docs)[name]["spec"]["replicas"] == 0
    docs = render(helm, home, "--set", "conductorModel.replicaCount=3")
    assert vllm_deployments(docs)[name]["spec"]["replicas"] == 3


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_vllm_server_has_memory_shm_and_health_probes(rendered, value_set) -> None:
    for deployment in vllm_deployments(rendered[value_set]).values():
        pod = deployment["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
        vllm = container(deployment, "vllm")
        mounts = {m["mountPath"]: m["name"] for m in vllm["volumeMounts"]}
        assert mounts["/dev/shm"] == "dshm"
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            # through the path filter on the pod's port (vLLM listens on loopback only)
            assert vllm[probe]["httpGet"] == {"path": "/health", "port": 8000}
        assert vllm["resources"]["limits"]["nvidia.com/gpu"] >= 1


def test_startup_probe_budget_covers_model_loading_and_is_configurable(rendered, helm, home):
    vllm = container(vllm_deployments(rendered["minimal"])[f"{RELEASE}-conductor-model"], "vllm")
    probe = vllm["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= 20 * 60
    docs = render(
        helm,
        home,
        "--set",
        "vllm.startupProbe.failureThreshold=360",
        "--set",
        "vllm.startupProbe.periodSeconds=15",
    )
    probe = container(vllm_deployments(docs)[f"{RELEASE}-conductor-model"], "vllm")["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] == 90 * 60


# ---- the gateway -----------------------------------------------------------------------------


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_gateway_runs_conductor_serve_with_real_options(rendered, value_set) -> None:
    from conductor_core.cli.serve import command

    gw = container(gateway(rendered[value_set]), "gateway")
    assert gw["command"] == ["conductor"] and gw["args"][0] == "serve"
    # click parses the arguments exactly as `conductor serve` would (unknown options fail)
    ctx = command.make_context("serve", list(gw["args"][1:]))
    assert ctx.params["host"] == "0.0.0.0" and ctx.params["port"] == 8000
    assert str(ctx.params["config_path"]) == "/etc/conductor/gateway.yaml"
    assert gw["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert gw["readinessProbe"]["httpGet"]["path"] == "/readyz"
    mounts = {m["mountPath"] for m in gw["volumeMounts"]}
    assert "/etc/conductor/gateway.yaml" in mounts
    if ctx.params["pool_path"] is not None:
        assert str(ctx.params["pool_path"]) in mounts


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_gateway_config_file_is_a_valid_gateway_config(rendered, value_set) -> None:
    from conductor_core.serve.config import GatewayConfig

    docs = rendered[value_set]
    data = yaml.safe_load(
        objects(docs, "ConfigMap")[f"{RELEASE}-conductor-gateway"]["data"]["gateway.yaml"]
    )
    config = GatewayConfig.model_validate(data)
    pod = gateway(docs)["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] > config.drain_timeout_s
    assert pod["containers"][0]["readinessProbe"]["timeoutSeconds"] > config.readiness_timeout_s
    if config.api_keys_file:
        mounts = {m["mountPath"]: m["name"] for m in pod["containers"][0]["volumeMounts"]}
        assert mounts[str(Path(config.api_keys_file).parent)] == "api-keys"


def test_autoscaling_values(rendered) -> None:
    docs = rendered["autoscaling"]
    hpa = objects(docs, "HorizontalPodAutoscaler")[f"{RELEASE}-conductor"]
    assert hpa["apiVersion"] == "autoscaling/v2"
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": f"{RELEASE}-conductor",
    }
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    targets = {m["resource"]["name"]: m["resource"]["target"] for m in hpa["spec"]["metrics"]}
    assert targets["cpu"]["averageUtilization"] == 60
    assert targets["memory"]["averageUtilization"] == 80
    assert "replicas" not in gateway(docs)["spec"]  # the HPA owns the replica count
    pdb = objects(docs, "PodDisruptionBudget")[f"{RELEASE}-conductor"]
    assert pdb["spec"]["minAvailable"] == "50%" and "maxUnavailable" not in pdb["spec"]
    assert objects(docs, "Service")[f"{RELEASE}-conductor"]["spec"]["type"] == "LoadBalancer"
    monitor = objects(docs, "ServiceMonitor")[f"{RELEASE}-conductor"]
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert {e["path"] for e in monitor["spec"]["endpoints"]} == {"/metrics"}
    assert not objects(rendered["minimal"], "HorizontalPodAutoscaler")
    assert gateway(rendered["minimal"])["spec"]["replicas"] == 2
    assert not objects(rendered["minimal"], "ServiceMonitor")


def test_network_policies(rendered) -> None:
    for value_set in ("minimal", "autoscaling"):
        docs = rendered[value_set]
        policies = objects(docs, "NetworkPolicy")
        models = policies[f"{RELEASE}-conductor-models"]["spec"]
        selected = {e["key"]: e["values"] for e in models["podSelector"]["matchExpressions"]}
        assert selected["app.kubernetes.io/component"] == ["conductor-model", "worker"]
        peers = models["ingress"][0]["from"]
        assert peers[0] == {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "conductor",
                    "app.kubernetes.io/instance": RELEASE,
                    "app.kubernetes.io/component": "gateway",
                }
            }
        }
        gateway_rules = policies[f"{RELEASE}-conductor"]["spec"]["ingress"]
        assert gateway_rules[0]["ports"] == [{"port": "http", "protocol": "TCP"}]
    # minimal: the gateway's namespace (and the test pod) reach the gateway, only the gateway
    # reaches the models
    gw_from = objects(rendered["minimal"], "NetworkPolicy")[f"{RELEASE}-conductor"]["spec"][
        "ingress"
    ][0]["from"]
    assert gw_from[0] == {"podSelector": {}}
    assert gw_from[1]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "test"
    models = objects(rendered["minimal"], "NetworkPolicy")[f"{RELEASE}-conductor-models"]
    assert len(models["spec"]["ingress"][0]["from"]) == 1
    # restricted: the given peers plus the helm test pod; models also from monitoring
    gw_from = objects(rendered["autoscaling"], "NetworkPolicy")[f"{RELEASE}-conductor"]["spec"][
        "ingress"
    ][0]["from"]
    assert gw_from[0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "apps"}
    assert gw_from[1]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "test"
    models = objects(rendered["autoscaling"], "NetworkPolicy")[f"{RELEASE}-conductor-models"]
    assert len(models["spec"]["ingress"][0]["from"]) == 2


def test_helm_test_pod_lists_models_through_the_gateway(rendered) -> None:
    pod = objects(rendered["literal-secrets"], "Pod")[f"{RELEASE}-conductor-test-models"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    c = pod["spec"]["containers"][0]
    script = c["command"][2]
    compile(script, "helm-test", "exec")
    assert "/v1/models" in script
    env = env_of(c)
    assert env["GATEWAY_URL"]["value"] == f"http://{RELEASE}-conductor:8000"
    assert env["MODEL_NAME"]["value"] == "conductor"
    assert pod["spec"]["volumes"][0]["secret"]["secretName"] == f"{RELEASE}-conductor-secrets"


# ---- secrets --------------------------------------------------------------------------------


def test_existing_secrets_are_referenced_by_name(rendered) -> None:
    docs = rendered["existing-secrets"]
    assert not objects(docs, "Secret")
    pod = gateway(docs)["spec"]["template"]["spec"]
    gw = pod["containers"][0]
    env = env_of(gw)
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "conductor-api-keys",
        "key": "OPENAI_API_KEY",
    }
    assert env["ANTHROPIC_API_KEY"]["valueFrom"]["secretKeyRef"]["name"] == "conductor-api-keys"
    # tracing on: the gateway reaches MLflow and S3 with the existing credentials
    assert env["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"] == {
        "name": "conductor-s3",
        "key": "AWS_ACCESS_KEY_ID",
    }
    assert env["MLFLOW_S3_ENDPOINT_URL"]["value"] == "http://minio.minio.svc:9000"
    assert {"secretRef": {"name": "mlflow-credentials"}} in gw["envFrom"]
    keys = {v["name"]: v for v in pod["volumes"]}["api-keys"]["secret"]
    assert keys["secretName"] == "gateway-client-keys"
    assert keys["items"] == [{"key": "keys.txt", "path": "api-keys"}]
    fetch = container(vllm_deployments(docs)[f"{RELEASE}-conductor-model"], "fetch-weights")
    fetch_env = env_of(fetch)
    assert fetch_env["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "conductor-s3",
        "key": "AWS_SECRET_ACCESS_KEY",
    }
    assert fetch_env["AWS_ENDPOINT_URL_S3"]["value"] == "http://minio.minio.svc:9000"
    # the vLLM key too, on both sides
    ref = {"name": "conductor-vllm-key", "key": "api-key"}
    assert env["CONDUCTOR_VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == ref
    vllm = container(vllm_deployments(docs)[f"{RELEASE}-conductor-model"], "vllm")
    assert env_of(vllm)["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == ref
    # No literal credential anywhere in the output.
    assert "sk-" not in json.dumps(docs)


def test_literal_secrets_go_into_the_charts_secret(rendered) -> None:
    docs = rendered["literal-secrets"]
    secret = objects(docs, "Secret")[f"{RELEASE}-conductor-secrets"]
    data = secret["stringData"]
    assert [line for line in data["api-keys"].splitlines() if line] == [
        "sk-client-key-one",
        "sk-client-key-two",
    ]
    assert data["OPENAI_API_KEY"] == "sk-openai-literal"
    assert data["AWS_ACCESS_KEY_ID"] == "AKIAEXAMPLE"
    # ... and nowhere else
    others = [d for d in docs if d["kind"] != "Secret"]
    assert "sk-openai-literal" not in json.dumps(others)
    assert "sk-client-key-one" not in json.dumps(others)
    pod = gateway(docs)["spec"]["template"]["spec"]
    env = env_of(pod["containers"][0])
    assert env["OPENAI_API_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": f"{RELEASE}-conductor-secrets",
        "key": "OPENAI_API_KEY",
    }
    assert "AWS_ACCESS_KEY_ID" not in env  # not tracing: the gateway needs no S3 access
    keys = {v["name"]: v for v in pod["volumes"]}["api-keys"]["secret"]
    assert keys["secretName"] == f"{RELEASE}-conductor-secrets"
    fetch = container(vllm_deployments(docs)[f"{RELEASE}-conductor-model"], "fetch-weights")
    assert env_of(fetch)["AWS_ACCESS_KEY_ID"]["valueFrom"]["secretKeyRef"]["name"] == (
        f"{RELEASE}-conductor-secrets"
    )
    # the pods roll when the Secret changes
    assert "checksum/secret" in gateway(docs)["spec"]["template"]["metadata"]["annotations"]


# ---- the pool -------------------------------------------------------------------------------


def test_pool_configmap_parses_and_points_at_the_in_chart_workers(rendered) -> None:
    from conductor_core.workers.config import parse_pool

    docs = rendered["workers"]
    text = objects(docs, "ConfigMap")[f"{RELEASE}-conductor-pool"]["data"]["pool.yaml"]
    pool = parse_pool(yaml.safe_load(text), origin="pool ConfigMap")
    assert [w.name for w in pool.workers] == ["gpt", "qwen-coder", "llama", "sim-generalist"]
    services = objects(docs, "Service")
    servers = vllm_deployments(docs)
    for worker in pool.workers[1:3]:
        name = f"{RELEASE}-conductor-worker-{worker.name}"
        port = services[name]["spec"]["ports"][0]["port"]
        assert worker.provider == "openai"
        assert worker.endpoint == f"http://{name}:{port}/v1"
        assert worker.api_key_env == "CONDUCTOR_VLLM_API_KEY"  # vllm.apiKey
        args = container(servers[name], "vllm")["args"]
        assert option(args, "--served-model-name") == worker.model
    assert pool.workers[1].model == "qwen2.5-coder-7b" and pool.workers[1].concurrency == 32
    assert pool.workers[2].model == "llama"
    assert pool.workers[0].endpoint == "https://api.openai.com/v1"
    assert pool.retry.backoff_base_s == 1.0
    # a Hugging Face source is pulled by vLLM itself (with the token); s3:// by the fetcher
    qwen = servers[f"{RELEASE}-conductor-worker-qwen-coder"]
    assert container(qwen, "vllm")["args"][0] == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert "initContainers" not in qwen["spec"]["template"]["spec"]
    assert env_of(container(qwen, "vllm"))["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == (
        "HF_TOKEN"
    )
    llama = servers[f"{RELEASE}-conductor-worker-llama"]
    assert container(llama, "vllm")["args"][0] == "/models/llama"
    assert option(container(llama, "vllm")["args"], "--tensor-parallel-size") == "4"
    assert container(llama, "vllm")["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert env_of(container(llama, "fetch-weights"))["MODEL_URI"]["value"].startswith("s3://")
    assert llama["spec"]["template"]["spec"]["nodeSelector"] == {
        "cloud.google.com/gke-accelerator": "nvidia-h100-80gb"
    }
    gw = container(gateway(docs), "gateway")
    assert option(gw["args"], "--pool") == "/etc/conductor/pool.yaml"


# ---- refusals: schema and template checks ---------------------------------------------------


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--set", "conductorModel.gpu.count=0"], "count"),
        (["--set", "gateway.image.pullPolicy=Sometimes"], "pullPolicy"),
        (["--set", "vllm.fetcher.image.pullPolicy=always"], "pullPolicy"),
        (["--set", "conductorModel.tensorParallelSize=3"], "tensorParallelSize"),
        (["--set", "gateway.service.type=ExternalName"], "type"),
        (["--set", "gateway.replcaCount=3"], "replcaCount"),
        (["--set", "conductorModel.remainingGpusAs=expert"], "remainingGpusAs"),
        (["--set", "gateway.config.api_keys_file=/x"], "api_keys_file"),
        (
            ["--set", "apiKeys.keys[0]=sk-literal-key", "--set", "apiKeys.existingSecret=keys"],
            "keys",
        ),
        (
            [
                "--set",
                "providerKeys[0].name=OPENAI_API_KEY",
                "--set",
                "providerKeys[0].value=sk-1",
                "--set",
                "providerKeys[0].existingSecret=s",
                "--set",
                "providerKeys[0].key=k",
            ],
            "providerKeys",
        ),
        (
            [
                "--set",
                "pool.workers[0].name=Bad_Name",
                "--set",
                "pool.workers[0].deploy.source=x/y",
            ],
            "name",
        ),
    ],
)
def test_values_schema_rejects_bad_values(helm, home, args, named) -> None:
    error = render_error(helm, home, *args)
    assert "values don't meet the specifications of the schema" in error, error
    assert named in error, error


def test_tensor_parallel_size_must_divide_the_gpu_count(helm, home) -> None:
    # TP 8 passes the schema's enum of powers of two; the template's check refuses it.
    error = render_error(
        helm,
        home,
        "--set",
        "conductorModel.gpu.count=4",
        "--set",
        "conductorModel.tensorParallelSize=8",
    )
    assert "schema" not in error
    assert "conductorModel: tensorParallelSize 8 must divide gpu.count 4" in error
    error = render_error(
        helm,
        home,
        "-f",
        str(FIXTURES / "workers.yaml"),
        "--set",
        "pool.workers[2].deploy.tensorParallelSize=8",
    )
    assert "pool.workers[2].deploy: tensorParallelSize 8 must divide gpu.count 4" in error
    render(
        helm,
        home,
        "--set",
        "conductorModel.gpu.count=8",
        "--set",
        "conductorModel.tensorParallelSize=8",
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            [
                "--set",
                "pool.workers[0].provider=openai",
                "--set",
                "pool.workers[0].model=m",
                "--set",
                "pool.workers[0].endpoint=https://api.example.com/v1",
                "--set",
                "pool.workers[0].api_key_env=EXAMPLE_KEY",
            ],
            "reads its key from EXAMPLE_KEY: add",
        ),
        (
            ["--set", "gateway.terminationGracePeriodSeconds=20"],
            "must exceed gateway.config.drain_timeout_s",
        ),
        (["--set", "conductorModel.enabled=false"], "set gateway.conductor"),
        (
            [
                "--set",
                "gateway.autoscaling.enabled=true",
                "--set",
                "gateway.autoscaling.minReplicas=5",
                "--set",
                "gateway.autoscaling.maxReplicas=2",
            ],
            "minReplicas 5 exceeds maxReplicas 2",
        ),
        (["--set", "mlflow.trackingUri="], "set mlflow.trackingUri"),
        (
            ["-f", str(FIXTURES / "workers.yaml"), "--set", "pool.workers[2].name=qwen-coder"],
            "used twice",
        ),
        (
            [
                "-f",
                str(FIXTURES / "workers.yaml"),
                "--set",
                "pool.workers[1].endpoint=http://elsewhere/v1",
            ],
            "remove endpoint",
        ),
    ],
)
def test_template_checks_name_the_value_and_the_fix(helm, home, args, message) -> None:
    assert message in render_error(helm, home, *args)


def test_external_conductor_without_a_model_server(helm, home) -> None:
    docs = render(
        helm,
        home,
        "--set",
        "conductorModel.enabled=false",
        "--set",
        "gateway.conductor=https://conductor.example.com/v1",
        "--set",
        "gateway.conductorModel=conductor-7b",
        "--set",
        "gateway.conductorKeyEnv=CONDUCTOR_KEY",
        "--set",
        "providerKeys[0].name=CONDUCTOR_KEY",
        "--set",
        "providerKeys[0].value=sk-conductor",
    )
    assert not vllm_deployments(docs)
    args = container(gateway(docs), "gateway")["args"]
    assert option(args, "--conductor") == "https://conductor.example.com/v1"
    assert option(args, "--conductor-model") == "conductor-7b"
    assert option(args, "--conductor-key-env") == "CONDUCTOR_KEY"


def render_notes(helm: Path, home: Path, tmp_path: Path, *args: str) -> str:
    """NOTES.txt as `helm install` would print it (helm template skips it: render a copy of the
    chart in which it is a named template shown through a ConfigMap)."""
    import shutil

    chart = tmp_path / "conductor"
    shutil.copytree(CHART, chart)
    notes = (chart / "templates" / "NOTES.txt").read_text(encoding="utf-8")
    (chart / "templates" / "NOTES.txt").unlink()
    (chart / "templates" / "_notes.tpl").write_text(
        '{{- define "test.notes" -}}\n' + notes + "\n{{- end -}}\n", encoding="utf-8"
    )
    (chart / "templates" / "notes.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
        'data: {notes: {{ include "test.notes" . | quote }}}\n',
        encoding="utf-8",
    )
    done = run_helm(
        helm,
        ["template", RELEASE, str(chart), "-n", NAMESPACE, "-s", "templates/notes.yaml", *args],
        home,
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)["data"]["notes"]


def test_notes_say_how_to_reach_the_gateway_and_warn_when_open(helm, home, tmp_path) -> None:
    notes = render_notes(helm, home, tmp_path / "a", *MINIMAL)
    assert f"svc/{RELEASE}-conductor 8000:8000" in notes
    assert "bundled SIMULATED pool" in notes
    assert "gateway is OPEN" in notes
    notes = render_notes(
        helm,
        home,
        tmp_path / "b",
        "-f",
        str(FIXTURES / "workers.yaml"),
        "-f",
        str(FIXTURES / "literal-secrets.yaml"),
        "--set",
        "conductorModel.source=models:/conductor/1",
    )
    assert "OPEN" not in notes and "Authorization: Bearer" in notes
    assert f"ConfigMap {RELEASE}-conductor-pool" in notes


# ---- closed by default: keys, network, schema, vLLM, scaling -------------------------------


def test_no_client_key_refuses_to_render_unless_explicitly_open(helm, home) -> None:
    error = render_error(helm, home, base=False)  # the chart's defaults
    assert "no client API key" in error and "allowUnauthenticated=true" in error, error
    # helm lint reports a template's `fail` as information (so chart tooling can lint the
    # defaults) and still shows why they would not install
    done = run_helm(helm, ["lint", "--strict", str(CHART)], home)
    assert "no client API key" in done.stdout + done.stderr
    pinned = ["--set", "conductorModel.source=models:/conductor/1"]
    assert render(helm, home, *pinned, "--set", "allowUnauthenticated=true", base=False)
    assert render(helm, home, *pinned, "--set", "apiKeys.existingSecret=client-keys", base=False)
    assert render(helm, home, *pinned, "--set", "apiKeys.keys[0]=sk-0123456789abcdef", base=False)
    # the schema types the switch: only the boolean true opens the gateway
    error = render_error(helm, home, "--set-string", "allowUnauthenticated=yes", base=False)
    assert "allowUnauthenticated" in error


@pytest.mark.parametrize(
    "key",
    [
        "sk-long-enough-key-1,ab",  # the gateway splits on commas: "ab" would be a key
        "sk-long-enough-key-1\nab",
        "sk-long-enough key-1",
        "#sk-long-enough-key-1",  # a comment in the keys file: the key would be dropped
        "sk-short-key",
    ],
)
def test_client_keys_cannot_smuggle_a_short_key(helm, home, key) -> None:
    error = render_error(helm, home, "--set-json", f"apiKeys.keys={json.dumps([key])}", base=False)
    assert "values don't meet the specifications of the schema" in error, error
    assert "apiKeys.keys.0" in error, error


def test_a_comma_in_a_key_would_have_made_two_keys() -> None:
    """Why the schema refuses commas: the gateway's key variable reads ``a,b`` as two keys."""
    from conductor_core.serve.auth import load_api_keys
    from conductor_core.serve.config import GatewayConfig

    keys = load_api_keys(GatewayConfig(), {"CONDUCTOR_API_KEYS": "sk-long-enough-key-1,ab"})
    assert "ab" in keys


@pytest.mark.parametrize("where", ["providerKeys", "gateway.extraEnv"])
def test_client_keys_only_through_apikeys(helm, home, where) -> None:
    entry = {"name": "CONDUCTOR_API_KEYS", "value": "sk-long-enough-key-1,ab"}
    error = render_error(helm, home, "--set-json", f"{where}={json.dumps([entry])}")
    assert "CONDUCTOR_API_KEYS (the gateway's api_keys_env)" in error, error


def restricted_violations(pod: dict[str, Any]) -> list[str]:
    """What the Pod Security Standard "restricted" refuses in a pod spec."""
    found = [key for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]
    allowed = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral"}
    allowed |= {"persistentVolumeClaim", "projected", "secret"}
    for volume in pod.get("volumes") or []:
        if not set(volume) - {"name"} <= allowed:
            found.append(f"volume {volume['name']}")
    pod_sc = pod.get("securityContext") or {}
    for c in pod["containers"] + pod.get("initContainers", []):
        sc = c.get("securityContext") or {}
        name = c["name"]
        if sc.get("privileged"):
            found.append(f"{name}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            found.append(f"{name}: allowPrivilegeEscalation")
        caps = sc.get("capabilities") or {}
        if "ALL" not in caps.get("drop", []) or set(caps.get("add", [])) - {"NET_BIND_SERVICE"}:
            found.append(f"{name}: capabilities")
        if sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")) is not True:
            found.append(f"{name}: runAsNonRoot")
        if sc.get("runAsUser", pod_sc.get("runAsUser")) == 0:
            found.append(f"{name}: runAsUser 0")
        seccomp = sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            found.append(f"{name}: seccompProfile")
        if any(port.get("hostPort") for port in c.get("ports") or []):
            found.append(f"{name}: hostPort")
    return found


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_every_pod_is_pss_restricted(rendered, value_set) -> None:
    docs = rendered[value_set]
    pods = {
        f"Deployment {n}": d["spec"]["template"]["spec"]
        for n, d in objects(docs, "Deployment").items()
    }
    pods |= {f"Pod {n}": d["spec"] for n, d in objects(docs, "Pod").items()}
    assert pods
    for name, pod in pods.items():
        assert not restricted_violations(pod), (name, restricted_violations(pod))


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_vllm_writes_only_to_its_volumes(rendered, value_set) -> None:
    for name, deployment in vllm_deployments(rendered[value_set]).items():
        vllm = container(deployment, "vllm")
        sc = vllm["securityContext"]
        assert sc["readOnlyRootFilesystem"] is True and sc["runAsNonRoot"] is True, name
        assert sc["runAsUser"] != 0
        mounts = {m["mountPath"]: m for m in vllm["volumeMounts"]}
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        writable = [p for p, m in mounts.items() if not m.get("readOnly")]
        assert {"/tmp", "/models", "/dev/shm"} <= set(writable)
        env = env_of(vllm)
        for var in ("HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TMPDIR", "HF_HOME"):
            path = env[var]["value"]
            assert any(path == w or path.startswith(w + "/") for w in writable), (var, path)
        assert env["USER"]["value"]  # getpass without a passwd entry for the uid
        for mount in ("/tmp", env["HOME"]["value"]):
            assert volumes[mounts[mount]["name"]]["emptyDir"]["sizeLimit"] == "10Gi"


def test_vllm_security_context_is_settable(helm, home) -> None:
    docs = render(
        helm,
        home,
        "--set",
        "vllm.securityContext.runAsNonRoot=false",
        "--set",
        "vllm.securityContext.runAsUser=0",
        "--set",
        "vllm.scratchSizeLimit=2Gi",
    )
    model = vllm_deployments(docs)[f"{RELEASE}-conductor-model"]
    sc = container(model, "vllm")["securityContext"]
    assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}  # the rest kept
    volumes = {v["name"]: v for v in model["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tmp"]["emptyDir"]["sizeLimit"] == "2Gi"
    error = render_error(helm, home, "--set", "vllm.securityContext.runAsNonroot=true")
    assert "Additional property runAsNonroot is not allowed" in error


def test_gateway_and_vllm_share_a_generated_key(rendered, monkeypatch) -> None:
    from conductor_core.cli._common import make_plan_source
    from conductor_core.cli.serve import command

    docs = rendered["minimal"]
    gw = container(gateway(docs), "gateway")
    params = command.make_context("serve", list(gw["args"][1:])).params
    key_env = params["conductor_key_env"]
    assert key_env == "CONDUCTOR_VLLM_API_KEY"
    ref = env_of(gw)[key_env]["valueFrom"]["secretKeyRef"]
    assert ref == {"name": f"{RELEASE}-conductor-vllm-api-key", "key": "VLLM_API_KEY"}
    model = vllm_deployments(docs)[f"{RELEASE}-conductor-model"]
    vllm_env = env_of(container(model, "vllm"))
    assert vllm_env["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == ref  # vLLM's --api-key
    assert "--api-key" not in container(model, "vllm")["args"]  # never in the pod spec
    key = base64.b64decode(objects(docs, "Secret")[ref["name"]]["data"][ref["key"]]).decode()
    assert len(key) >= 32
    # the gateway's plan source sends what the variable holds
    monkeypatch.setenv(key_env, key)
    source = make_plan_source(params["conductor"], params["conductor_model"], key_env)
    assert source._get_client().api_key == key


def test_literal_vllm_key_stays_in_the_charts_secret(rendered) -> None:
    for value_set in ("literal-secrets", "exposed"):
        docs = rendered[value_set]
        secret = objects(docs, "Secret")[f"{RELEASE}-conductor-secrets"]
        assert secret["stringData"]["VLLM_API_KEY"] == "vllm-literal-key-0123456789"
        assert f"{RELEASE}-conductor-vllm-api-key" not in objects(docs, "Secret")
        others = [d for d in docs if d["kind"] != "Secret"]
        assert "vllm-literal-key-0123456789" not in json.dumps(others)
        ref = {"name": f"{RELEASE}-conductor-secrets", "key": "VLLM_API_KEY"}
        gw = container(gateway(docs), "gateway")
        assert env_of(gw)["CONDUCTOR_VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == ref
        for deployment in vllm_deployments(docs).values():
            vllm = container(deployment, "vllm")
            assert env_of(vllm)["VLLM_API_KEY"]["valueFrom"]["secretKeyRef"] == ref
            annotations = deployment["spec"]["template"]["metadata"]["annotations"]
            assert "checksum/api-key" in annotations  # a new key rolls vLLM too


def test_vllm_key_can_be_turned_off_and_refuses_conflicts(helm, home) -> None:
    docs = render(
        helm, home, "-f", str(FIXTURES / "workers.yaml"), "--set", "vllm.apiKey.enabled=false"
    )
    assert "VLLM_API_KEY" not in json.dumps(docs)
    assert "--conductor-key-env" not in container(gateway(docs), "gateway")["args"]
    error = render_error(
        helm,
        home,
        "--set",
        "gateway.conductorKeyEnv=MY_KEY",
        "--set",
        "providerKeys[0].name=MY_KEY",
        "--set",
        "providerKeys[0].value=sk-my-key",
    )
    assert "the in-chart Conductor model is called with vllm.apiKey" in error
    error = render_error(
        helm, home, "--set", "vllm.apiKey.value=short", "--set", "vllm.apiKey.existingSecret=s"
    )
    assert "vllm.apiKey.value" in error


def test_network_policies_close_both_directions(rendered) -> None:
    docs = rendered["minimal"]
    policies = objects(docs, "NetworkPolicy")
    gw = policies[f"{RELEASE}-conductor"]["spec"]
    models = policies[f"{RELEASE}-conductor-models"]["spec"]
    assert gw["policyTypes"] == ["Ingress", "Egress"]
    assert models["policyTypes"] == ["Ingress", "Egress"]
    # every rule names its peers: no rule allows everyone
    for spec in (gw, models):
        assert all(rule.get("from") for rule in spec["ingress"])
        assert all(rule.get("to") and rule.get("ports") for rule in spec["egress"])
    dns = {
        "to": [
            {
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": "kube-system"}
                },
                "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
            }
        ],
        "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}],
    }
    assert gw["egress"][0] == dns and models["egress"][0] == dns
    # the gateway reaches the release's vLLM servers on their port
    to_vllm = gw["egress"][1]
    selected = {e["key"]: e["values"] for e in to_vllm["to"][0]["podSelector"]["matchExpressions"]}
    assert selected == {
        "app.kubernetes.io/instance": [RELEASE],
        "app.kubernetes.io/component": ["conductor-model", "worker"],
    }
    assert to_vllm["ports"] == [{"port": 8000, "protocol": "TCP"}]
    # workers: public HTTPS only, never private ranges or the metadata endpoint
    workers = gw["egress"][2]
    block = workers["to"][0]["ipBlock"]
    assert block["cidr"] == "0.0.0.0/0"
    assert {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"} <= set(
        block["except"]
    )
    assert workers["ports"] == [{"port": 443, "protocol": "TCP"}]
    # telemetry: MLflow
    telemetry = gw["egress"][3]
    assert telemetry["to"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "mlflow"
    }
    assert len(gw["egress"]) == 4
    # vLLM: ingress only from the gateway; egress DNS + weight sources
    assert models["ingress"][0]["from"] == [
        {"podSelector": {"matchLabels": gateway(docs)["spec"]["selector"]["matchLabels"]}}
    ]
    assert len(models["egress"]) == 3


def test_network_policies_are_configurable(rendered) -> None:
    policies = objects(rendered["exposed"], "NetworkPolicy")
    gw = policies[f"{RELEASE}-conductor"]["spec"]
    assert gw["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "ingress-nginx"
    }
    assert [rule["to"] for rule in gw["egress"][2:]] == [
        [{"ipBlock": {"cidr": "162.159.140.0/24"}}]
    ]
    models = policies[f"{RELEASE}-conductor-models"]["spec"]
    assert len(models["egress"]) == 1  # modelEgressTo []: DNS only
    assert models["egress"][0]["ports"][0]["port"] == 53


def test_network_policy_values_are_typed(helm, home) -> None:
    error = render_error(
        helm, home, "--set-json", 'networkPolicy.workerEgressTo=[{"to": [{"cidr": "1.2.3.0/24"}]}]'
    )
    assert "networkPolicy.workerEgressTo.0.to.0" in error, error
    error = render_error(helm, home, "--set", "networkPolicy.dns.ports[0].protocol=ICMP")
    assert "protocol" in error


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        (
            "gateway.config.request_timout_s=30",
            "gateway.config: Additional property request_timout_s",
        ),
        ("gateway.config.max_concurrent_request=8", "Additional property max_concurrent_request"),
        ("gateway.config.max_concurrent_requests=0", "gateway.config.max_concurrent_requests"),
        ("gateway.config.max_concurrent_requests_per_key=-1", "max_concurrent_requests_per_key"),
        ("gateway.config.access_mode=bitmap", "gateway.config.access_mode"),
        ("gateway.config.max_steps=50", "gateway.config.max_steps"),
        ("gateway.config.request_timeout_s=0", "gateway.config.request_timeout_s"),
        ("gateway.config.descriptors=maybe", "gateway.config.descriptors"),
        (
            "gateway.securityContext.readOnlyRootFilesytem=true",
            "Additional property readOnlyRootFilesytem is",
        ),
        ("gateway.podSecurityContext.fsgroup=1", "Additional property fsgroup is"),
        ("gateway.tolerations[0].efect=NoSchedule", "Additional property efect is"),
        ("gateway.affinity.nodeAfinity.x=y", "Additional property nodeAfinity is"),
        ("gateway.extraEnv[0].name=A", None),
        ("gateway.extraEnv[0].valu=x", "Additional property valu is"),
        ("gateway.extraEnvFrom[0].secretRf.name=x", "Additional property secretRf is"),
        (
            "gateway.autoscaling.inFlightRequests.averageValu=3",
            "Additional property averageValu is",
        ),
        ("gateway.topologySpreadConstraints[0].maxskew=1", "Additional property maxskew is"),
        ("gateway.resources.claims[0].nam=x", "Additional property nam is"),
        ("pool.retry.backoff_base=1", "pool.retry: Additional property backoff_base"),
        ("pool.cache.enable=true", "pool.cache: Additional property enable"),
        ("vllm.apiKey.vaule=x", "Additional property vaule is"),
        ("vllm.podDisruptionBudget.maxUnavailabel=1", "Additional property maxUnavailabel is"),
        ("ingress.host=x", "ingress: Additional property host"),
        ("networkPolicy.dns.port=53", "Additional property port is"),
        ("allowUnauthenticatd=true", "Additional property allowUnauthenticatd is"),
    ],
)
def test_values_schema_rejects_unknown_and_mistyped_settings(helm, home, setting, named) -> None:
    done = template(helm, home, ["--set", setting], base=True)
    if named is None:  # a well-formed entry (the control of the next one)
        assert "values don't meet" not in done.stderr, done.stderr
        return
    assert done.returncode != 0, setting
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert named in done.stderr, done.stderr


def test_a_misspelt_gateway_setting_fails_lint_too(helm, home) -> None:
    done = run_helm(
        helm,
        ["lint", "--strict", str(CHART), *MINIMAL, "--set", "gateway.config.request_timout_s=30"],
        home,
    )
    assert done.returncode != 0
    assert "Additional property request_timout_s is not allowed" in done.stdout + done.stderr


def test_every_gateway_setting_reaches_the_config_file(helm, home) -> None:
    from conductor_core.serve.config import GatewayConfig

    settings = {
        "max_concurrent_requests": 100,
        "max_concurrent_requests_per_key": None,
        "rate_limit_per_minute": 600,
        "max_cost": 0.5,
        "access_mode": "index",
        "prompt_style": "compact",
    }
    docs = render(helm, home, "--set-json", f"gateway.config={json.dumps(settings)}")
    text = objects(docs, "ConfigMap")[f"{RELEASE}-conductor-gateway"]["data"]["gateway.yaml"]
    config = GatewayConfig.model_validate(yaml.safe_load(text))
    assert config.max_concurrent_requests == 100
    assert config.max_concurrent_requests_per_key is None  # a limit lifted with null
    assert config.max_cost == 0.5 and config.access_mode.value == "index"


def gateway_config_of(docs: list[dict[str, Any]]):
    """The GatewayConfig the rendered gateway ConfigMap holds."""
    from conductor_core.serve.config import GatewayConfig

    text = objects(docs, "ConfigMap")[f"{RELEASE}-conductor-gateway"]["data"]["gateway.yaml"]
    return GatewayConfig.model_validate(yaml.safe_load(text))


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_limits_are_on_by_default(rendered, value_set) -> None:
    """Every value set (each leaves the limits alone) renders per-request cost and token
    ceilings, a per-key rate limit and a per-key spend quota, and trusts X-Forwarded-For only
    from private (pod network) ranges, never from any peer."""
    config = gateway_config_of(rendered[value_set])
    assert config.max_cost == 1.0 and config.max_tokens == 100_000
    assert config.rate_limit_per_minute == 60 and config.rate_limit_burst == 20
    assert config.spend_quota == 50 and config.spend_quota_period_s == 86_400
    assert "10.0.0.0/8" in config.forwarded_allow_ips
    assert "*" not in config.forwarded_allow_ips


def test_limits_are_raised_or_lifted_on_purpose(helm, home) -> None:
    settings = {"spend_quota": None, "rate_limit_per_minute": None, "max_cost": 5}
    docs = render(
        helm,
        home,
        "--set-json",
        f"gateway.config={json.dumps(settings)}",
        "--set-json",
        'gateway.config.forwarded_allow_ips=["10.42.0.0/16"]',
    )
    config = gateway_config_of(docs)
    assert config.spend_quota is None and config.rate_limit_per_minute is None
    assert config.max_cost == 5 and config.max_tokens == 100_000
    assert config.forwarded_allow_ips == ["10.42.0.0/16"]
    stderr = render_error(helm, home, "--set", "gateway.config.spend_quota=0")
    assert "spend_quota" in stderr


def test_hpa_scales_on_in_flight_requests_with_cpu_as_fallback(rendered) -> None:
    from conductor_core.serve.metrics import GatewayMetrics

    hpa = objects(rendered["exposed"], "HorizontalPodAutoscaler")[f"{RELEASE}-conductor"]
    metrics = hpa["spec"]["metrics"]
    pods = [m["pods"] for m in metrics if m["type"] == "Pods"]
    assert pods == [
        {
            "metric": {"name": "conductor_gateway_workflows_in_flight"},
            "target": {"type": "AverageValue", "averageValue": "24"},
        }
    ]
    cpu = [m["resource"] for m in metrics if m["type"] == "Resource"]
    assert cpu == [{"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}]
    # the metric is the gauge the gateway exports at /metrics
    names = {m.name for m in GatewayMetrics().registry.collect()}
    assert "conductor_gateway_workflows_in_flight" in names


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "gateway.autoscaling.inFlightRequests.averageValue=300"],
            "must be below gateway.config.max_concurrent_requests (256)",
        ),
        (
            [
                "--set",
                "gateway.autoscaling.inFlightRequests.enabled=false",
                "--set",
                "gateway.autoscaling.targetCPUUtilizationPercentage=null",
            ],
            "gateway.autoscaling has no target",
        ),
    ],
)
def test_hpa_refuses_targets_that_cannot_work(helm, home, args, message) -> None:
    base = ["--set", "gateway.autoscaling.enabled=true"]
    base += ["--set", "gateway.autoscaling.inFlightRequests.enabled=true"]
    assert message in render_error(helm, home, *base, *args)


def test_topology_spread_defaults_to_the_pods_own_labels(rendered) -> None:
    gw = gateway(rendered["minimal"])
    constraints = gw["spec"]["template"]["spec"]["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in constraints} == {
        "kubernetes.io/hostname",
        "topology.kubernetes.io/zone",
    }
    for c in constraints:
        assert c["whenUnsatisfiable"] == "ScheduleAnyway"
        assert c["labelSelector"]["matchLabels"] == gw["spec"]["selector"]["matchLabels"]
    for deployment in vllm_deployments(rendered["exposed"]).values():
        (c,) = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert c["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    for deployment in vllm_deployments(rendered["minimal"]).values():
        assert "topologySpreadConstraints" not in deployment["spec"]["template"]["spec"]


@pytest.mark.parametrize("value_set", ["minimal", "workers", "exposed"])
def test_every_vllm_server_has_a_disruption_budget(rendered, value_set) -> None:
    docs = rendered[value_set]
    budgets = objects(docs, "PodDisruptionBudget")
    for name, deployment in vllm_deployments(docs).items():
        spec = budgets[name]["spec"]
        assert spec["selector"] == deployment["spec"]["selector"]
        if value_set == "exposed":
            assert spec == {"minAvailable": 1, "selector": spec["selector"]}
        else:
            assert spec["maxUnavailable"] == 1


def test_ingress_is_off_by_default_and_routes_only_the_api(rendered, helm, home) -> None:
    assert not objects(rendered["minimal"], "Ingress")
    docs = rendered["exposed"]
    ingress = objects(docs, "Ingress")[f"{RELEASE}-conductor"]
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [
        {"hosts": ["conductor.example.com"], "secretName": "conductor-tls"}
    ]
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "conductor.example.com"
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/v1", "Prefix")  # not /metrics
    service = objects(docs, "Service")[path["backend"]["service"]["name"]]
    assert path["backend"]["service"]["port"]["name"] in {
        p["name"] for p in service["spec"]["ports"]
    }
    docs = render(helm, home, "--set", "ingress.enabled=true")
    (rule,) = objects(docs, "Ingress")[f"{RELEASE}-conductor"]["spec"]["rules"]
    assert "host" not in rule  # any host
    error = render_error(
        helm, home, "--set", "ingress.enabled=true", "--set", "ingress.hosts[0]=Bad_Host"
    )
    assert "ingress.hosts.0" in error


# ---- the path filter in front of vLLM -----------------------------------------------------------


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_vllm_is_reached_only_through_the_path_filter(rendered, value_set) -> None:
    """vLLM listens on loopback; the pod's port (the Service's target, what the NetworkPolicy
    lets in, what Prometheus scrapes) is the allow-list proxy's, run from the gateway's image."""
    from conductor_core.serve.model_proxy import ALLOWED_ROUTES

    docs = rendered[value_set]
    image = container(gateway(docs), "gateway")["image"]
    deployments = vllm_deployments(docs)
    assert deployments or value_set != "minimal"
    for name, deployment in deployments.items():
        vllm = container(deployment, "vllm")
        assert option(vllm["args"], "--host") == "127.0.0.1"
        assert option(vllm["args"], "--port") == "8001"
        assert "ports" not in vllm
        proxy = container(deployment, "path-filter")
        assert proxy["image"] == image
        assert proxy["command"] == ["python", "-m", "conductor_core.serve.model_proxy"]
        assert proxy["args"] == ["--port", "8000", "--upstream", "http://127.0.0.1:8001"]
        assert proxy["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
        service = objects(docs, "Service")[name]
        assert service["spec"]["ports"][0]["targetPort"] == "http"
    assert ("GET", "/health") in ALLOWED_ROUTES and ("GET", "/metrics") in ALLOWED_ROUTES


def test_the_rendered_path_filter_command_refuses_tokenize(rendered) -> None:
    """The filter's rendered command, run here (on a free port, nothing behind it): /tokenize
    and /invocations get 403, /health reaches for vLLM (502: none there)."""
    import socket
    import subprocess
    import sys
    import time

    import httpx

    proxy = container(
        vllm_deployments(rendered["minimal"])[f"{RELEASE}-conductor-model"], "path-filter"
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [*proxy["args"]]
    args[args.index("--port") + 1] = str(port)
    command = [sys.executable, *proxy["command"][1:], *args, "--host", "127.0.0.1"]
    with subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE) as process:
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 20
            while True:
                try:
                    health = httpx.get(f"{base}/health", timeout=5)
                    break
                except httpx.ConnectError:
                    assert time.monotonic() < deadline and process.poll() is None
                    time.sleep(0.1)
            refused = [
                httpx.post(f"{base}{p}", json={}, timeout=5) for p in ("/tokenize", "/invocations")
            ]
        finally:
            process.terminate()
    assert health.status_code == 502
    assert [r.status_code for r in refused] == [403, 403]


def test_the_path_filter_can_be_turned_off_and_refuses_a_shared_port(helm, home) -> None:
    docs = render(helm, home, "--set", "vllm.pathFilter.enabled=false")
    vllm_pod = vllm_deployments(docs)[f"{RELEASE}-conductor-model"]
    vllm = container(vllm_pod, "vllm")
    assert option(vllm["args"], "--host") == "0.0.0.0" and option(vllm["args"], "--port") == "8000"
    assert vllm["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert [c["name"] for c in vllm_pod["spec"]["template"]["spec"]["containers"]] == ["vllm"]
    stderr = render_error(helm, home, "--set", "vllm.pathFilter.internalPort=8000")
    assert "vllm.pathFilter.internalPort (8000) must differ from vllm.port" in stderr


# ---- images: by tag, or pinned by digest --------------------------------------------------------

# What each container runs: the gateway's image (the gateway, the path filter, the helm test pod),
# vLLM's, and the fetcher's.
IMAGE_OF_CONTAINER = {
    "gateway": "gateway",
    "path-filter": "gateway",
    "list-models": "gateway",
    "vllm": "vllm",
    "fetch-weights": "fetcher",
}
DIGESTS = {
    "gateway": "sha256:" + hashlib.sha256(b"serve image").hexdigest(),
    "vllm": "sha256:" + hashlib.sha256(b"vllm image").hexdigest(),
    "fetcher": "sha256:" + hashlib.sha256(b"base image").hexdigest(),
}
DIGEST_VALUES = {
    "gateway": "gateway.image.digest",
    "vllm": "vllm.image.digest",
    "fetcher": "vllm.fetcher.image.digest",
}


def default_images() -> dict[str, str]:
    """``repository:tag`` of each image kind, from the chart's defaults."""
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    images = {
        "gateway": values["gateway"]["image"],
        "vllm": values["vllm"]["image"],
        "fetcher": values["vllm"]["fetcher"]["image"],
    }
    return {kind: f"{i['repository']}:{i['tag']}" for kind, i in images.items()}


def pod_containers(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(owner name, container) of every container and init container the release runs."""
    found = []
    for doc in docs:
        if doc["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job"}:
            spec = doc["spec"]["template"]["spec"]
        elif doc["kind"] == "Pod":
            spec = doc["spec"]
        else:
            continue
        for c in spec["containers"] + spec.get("initContainers", []):
            found.append((doc["metadata"]["name"], c))
    return found


@pytest.mark.parametrize("value_set", VALUE_SETS)
def test_images_without_a_digest_render_by_tag_as_before(rendered, value_set) -> None:
    """No digest given (the default): each image is ``repository:tag``, nothing appended."""
    expected = default_images()
    containers = pod_containers(rendered[value_set])
    assert {c["name"] for _, c in containers} <= set(IMAGE_OF_CONTAINER)
    for owner, c in containers:
        want = expected[IMAGE_OF_CONTAINER[c["name"]]]
        if value_set == "gpu" and owner == f"{RELEASE}-conductor-model" and c["name"] == "vllm":
            want = "vllm/vllm-openai:v0.28.0"  # conductorModel.image.tag
        assert c["image"] == want, (owner, c["name"])
    assert "@" not in "".join(c["image"] for _, c in containers)


def digest_args(*kinds: str) -> list[str]:
    return [arg for kind in kinds for arg in ("--set", f"{DIGEST_VALUES[kind]}={DIGESTS[kind]}")]


@pytest.mark.parametrize("value_set", ["minimal", "workers", "exposed"])
def test_every_image_is_pinned_by_its_digest_when_given(helm, home, value_set) -> None:
    """With the gateway's, vLLM's and the fetcher's digests set, every container and init
    container of that image (the path filter and the helm test pod run the gateway's) pulls
    ``repository:tag@digest``; the tag stays for readability."""
    docs = render(helm, home, *value_args(value_set), *digest_args(*DIGESTS))
    expected = default_images()
    containers = pod_containers(docs)
    kinds = {IMAGE_OF_CONTAINER[c["name"]] for _, c in containers}
    assert kinds == set(DIGESTS), kinds  # each kind is rendered somewhere
    for owner, c in containers:
        kind = IMAGE_OF_CONTAINER[c["name"]]
        assert c["image"] == f"{expected[kind]}@{DIGESTS[kind]}", (owner, c["name"])
    if value_set == "workers":
        vllm_images = [c["image"] for _, c in containers if c["name"] == "vllm"]
        assert len(vllm_images) == 3  # the Conductor model and both deploy workers


def test_one_digest_pins_only_its_own_image(helm, home) -> None:
    docs = render(helm, home, *digest_args("fetcher"))
    images = {c["name"]: c["image"] for _, c in pod_containers(docs)}
    expected = default_images()
    assert images["fetch-weights"] == f"{expected['fetcher']}@{DIGESTS['fetcher']}"
    assert images["vllm"] == expected["vllm"]
    assert images["gateway"] == images["path-filter"] == images["list-models"]
    assert images["gateway"] == expected["gateway"]


def test_a_servers_image_override_merges_its_digest(helm, home) -> None:
    """A server's `image` overrides vllm.image field by field, the digest included: its own
    digest replaces vllm.image's, its own repository/tag with vllm.image's digest would name
    another build than the tag says (refused), and `digest: ""` there pulls it by tag."""
    own = "sha256:" + hashlib.sha256(b"conductor vllm build").hexdigest()
    worker = [
        *("--set", "pool.workers[0].name=coder"),
        *("--set", "pool.workers[0].deploy.source=Qwen/Qwen2.5-Coder-7B-Instruct"),
    ]
    docs = render(
        helm,
        home,
        *digest_args("vllm"),
        *worker,
        *("--set", f"conductorModel.image.digest={own}"),
    )
    deployments = vllm_deployments(docs)
    vllm_image = default_images()["vllm"]
    model = container(deployments[f"{RELEASE}-conductor-model"], "vllm")
    assert model["image"] == f"{vllm_image}@{own}"
    coder = container(deployments[f"{RELEASE}-conductor-worker-coder"], "vllm")
    assert coder["image"] == f"{vllm_image}@{DIGESTS['vllm']}"

    docs = render(
        helm,
        home,
        *digest_args("vllm"),
        *worker,
        *("--set", "pool.workers[0].deploy.image.repository=registry.example/vllm"),
        *("--set", "pool.workers[0].deploy.image.tag=v0.28.0"),
        *("--set", f"pool.workers[0].deploy.image.digest={own}"),
    )
    coder = container(vllm_deployments(docs)[f"{RELEASE}-conductor-worker-coder"], "vllm")
    assert coder["image"] == f"registry.example/vllm:v0.28.0@{own}"

    stderr = render_error(
        helm, home, *digest_args("vllm"), "--set", "conductorModel.image.tag=v0.28.0"
    )
    assert "conductorModel.image" in stderr and "vllm.image.digest" in stderr, stderr
    docs = render(
        helm,
        home,
        *digest_args("vllm"),
        *("--set", "conductorModel.image.tag=v0.28.0", "--set", "conductorModel.image.digest="),
    )
    model = container(vllm_deployments(docs)[f"{RELEASE}-conductor-model"], "vllm")
    assert model["image"] == "vllm/vllm-openai:v0.28.0"


BAD_DIGESTS = [
    "sha256:abc",  # too short
    "md5:" + "0" * 32,  # another algorithm
    "sha512:" + "0" * 128,  # another algorithm
    "sha256:" + "A" * 64,  # upper case
    "sha256:" + "0" * 65,  # too long
    "0" * 64,  # no algorithm
    "sha256:" + "g" * 64,  # not hex
    f"@sha256:{'0' * 64}",  # the separator is the chart's
    f"sha256:{'0' * 64}\n",  # a line break after it
]
DIGEST_PATHS = [
    "gateway.image.digest",
    "vllm.image.digest",
    "vllm.fetcher.image.digest",
    "conductorModel.image.digest",
    "pool.workers[0].deploy.image.digest",
]


@pytest.mark.parametrize("path", DIGEST_PATHS)
@pytest.mark.parametrize("digest", BAD_DIGESTS)
def test_values_schema_refuses_a_malformed_digest(helm, home, path, digest) -> None:
    args = ["--set-string", f"{path}={digest}"]
    if path.startswith("pool."):
        args += [
            "--set",
            "pool.workers[0].name=coder",
            "--set",
            "pool.workers[0].deploy.source=x/y",
        ]
    error = render_error(helm, home, *args)
    assert "values don't meet the specifications of the schema" in error, error
    assert "digest" in error and "Additional property" not in error, error  # a known key


@pytest.mark.parametrize("digest", ["sha256:abc", "md5:" + "0" * 32])
def test_a_malformed_digest_fails_lint_too(helm, home, digest) -> None:
    done = run_helm(
        helm,
        ["lint", "--strict", str(CHART), *MINIMAL, "--set-string", f"vllm.image.digest={digest}"],
        home,
    )
    assert done.returncode != 0
    assert "vllm.image.digest" in done.stdout + done.stderr


def test_lint_passes_with_digests(helm, home) -> None:
    done = run_helm(
        helm,
        ["lint", "--strict", str(CHART), *value_args("workers"), *digest_args(*DIGESTS)],
        home,
    )
    assert done.returncode == 0, done.stdout + done.stderr
