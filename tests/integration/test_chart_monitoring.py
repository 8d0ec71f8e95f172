"""The conductor chart's monitoring, rendered by helm: the Grafana dashboard ConfigMap, the
PrometheusRule with the alerts docs/serving.md recommends, and the NetworkPolicy rules that let
Prometheus scrape; all off by default. ``promtool`` (Debian's ``prometheus`` package), where
installed, checks the rendered rules and the dashboard's queries and runs the alerts on
synthetic series (they fire for this release's gateway only, at their thresholds). (The
dashboard's series against the gateway's metrics: tests/unit/test_chart_metadata.py.)
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.helm import run_helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "conductor"
DASHBOARD = CHART / "dashboards" / "conductor-gateway.json"
K8S_VERSION = "1.33.0"
RELEASE, NAMESPACE = "rel", "team-a"
GATEWAY = f"{RELEASE}-conductor"
SELECTOR = f'namespace="{NAMESPACE}",job="{GATEWAY}"'
OPEN = ["--set", "allowUnauthenticated=true", "--set", "conductorModel.source=models:/conductor/1"]
MONITORED = [
    *OPEN,
    "--set",
    "monitoring.serviceMonitor.enabled=true",
    "--set",
    "monitoring.grafanaDashboard.enabled=true",
    "--set",
    "monitoring.prometheusRule.enabled=true",
    "--set",
    "monitoring.prometheusRule.labels.release=prometheus",
    "--set",
    "monitoring.prometheusRule.alertLabels.team=ml-platform",
]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


def template(helm: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_helm(helm, ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, *args], home)


def render(helm: Path, home: Path, *args: str) -> list[dict[str, Any]]:
    done = template(helm, home, *args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def objects(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def alerts(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    rule = objects(docs, "PrometheusRule")[GATEWAY]
    (group,) = rule["spec"]["groups"]
    return {r.get("alert") or r.get("record"): r for r in group["rules"]}


@pytest.fixture(scope="module")
def monitored(helm, home) -> list[dict[str, Any]]:
    return render(helm, home, *MONITORED)


@pytest.fixture(scope="module")
def plain(helm, home) -> list[dict[str, Any]]:
    return render(helm, home, *OPEN)


# ---- off by default, valid when on ------------------------------------------------------------


def test_monitoring_is_off_by_default(plain) -> None:
    assert not objects(plain, "PrometheusRule") and not objects(plain, "ServiceMonitor")
    assert f"{GATEWAY}-dashboard" not in objects(plain, "ConfigMap")
    for policy in objects(plain, "NetworkPolicy").values():
        assert len(policy["spec"]["ingress"]) == 1  # no scraper rule without the ServiceMonitor


def test_monitored_release_lints_and_validates(helm, home, monitored) -> None:
    done = run_helm(helm, ["lint", "--strict", str(CHART), *MONITORED], home)
    assert done.returncode == 0, done.stdout + done.stderr
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    kinds = set()
    for doc in monitored:
        kinds.add(doc["kind"])
        if doc["apiVersion"] == "monitoring.coreos.com/v1":
            # No schema for the Prometheus Operator's CRDs here: the shape it reads.
            assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    assert {"ServiceMonitor", "PrometheusRule", "ConfigMap", "NetworkPolicy"} <= kinds


# ---- the Grafana dashboard --------------------------------------------------------------------


def test_dashboard_config_map_for_the_grafana_sidecar(monitored) -> None:
    config_map = objects(monitored, "ConfigMap")[f"{GATEWAY}-dashboard"]
    assert config_map["metadata"]["namespace"] == NAMESPACE
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["metadata"]["labels"]["app.kubernetes.io/part-of"] == "conductor"
    (key,) = config_map["data"]
    assert key.endswith(".json")
    shipped = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    assert json.loads(config_map["data"][key]) == shipped


def test_dashboard_label_namespace_and_annotations_are_settable(helm, home) -> None:
    docs = render(
        helm,
        home,
        *OPEN,
        "--set",
        "monitoring.grafanaDashboard.enabled=true",
        "--set",
        "monitoring.grafanaDashboard.namespace=grafana",
        "--set",
        "monitoring.grafanaDashboard.labels.grafana_dashboard=null",
        "--set",
        "monitoring.grafanaDashboard.labels.dashboards=conductor",
        "--set",
        "monitoring.grafanaDashboard.annotations.grafana_folder=LLM",
    )
    config_map = objects(docs, "ConfigMap")[f"{GATEWAY}-dashboard"]
    assert config_map["metadata"]["namespace"] == "grafana"
    assert config_map["metadata"]["labels"]["dashboards"] == "conductor"
    assert "grafana_dashboard" not in config_map["metadata"]["labels"]
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "LLM"}


# ---- the PrometheusRule -----------------------------------------------------------------------


def test_prometheus_rule_has_the_recommended_alerts(monitored) -> None:
    """docs/serving.md: alert on conductor_up, worker_up and worker_errors_total; each on this
    release's gateway series (its namespace and the job its ServiceMonitor gives)."""
    rule = objects(monitored, "PrometheusRule")[GATEWAY]
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    found = alerts(monitored)
    assert set(found) == {"ConductorUnreachable", "ConductorWorkerDown", "ConductorWorkerErrors"}
    down, worker_down, errors = (
        found["ConductorUnreachable"],
        found["ConductorWorkerDown"],
        found["ConductorWorkerErrors"],
    )
    assert f"conductor_gateway_conductor_up{{{SELECTOR}}} == 0" in down["expr"]
    assert f"conductor_gateway_worker_up{{{SELECTOR}}}" in worker_down["expr"]
    assert f"conductor_gateway_worker_errors_total{{{SELECTOR}}}[10m]" in errors["expr"]
    assert f"conductor_gateway_worker_calls_total{{{SELECTOR}}}[10m]" in errors["expr"]
    assert errors["expr"].rstrip().endswith("> 0.1")
    assert (down["for"], worker_down["for"], errors["for"]) == ("5m", "10m", "10m")
    assert down["labels"] == {"severity": "critical", "team": "ml-platform"}
    assert worker_down["labels"]["severity"] == errors["labels"]["severity"] == "warning"
    for alert in found.values():
        assert set(alert["annotations"]) == {"summary", "description"}
        assert "{{ $labels." in alert["annotations"]["summary"]  # Prometheus's, not helm's
    # the ServiceMonitor's job is the gateway Service's name
    service = objects(monitored, "Service")[GATEWAY]
    assert service["metadata"]["name"] == GATEWAY


def test_alert_thresholds_selector_and_extra_rules_are_values(helm, home) -> None:
    docs = render(
        helm,
        home,
        *OPEN,
        "--set",
        "monitoring.prometheusRule.enabled=true",
        "--set-json",
        "monitoring.prometheusRule.workerErrors.threshold=0.25",
        "--set",
        "monitoring.prometheusRule.workerErrors.window=30m",
        "--set",
        "monitoring.prometheusRule.workerErrors.severity=critical",
        "--set",
        "monitoring.prometheusRule.conductorDown.for=2m",
        "--set",
        "monitoring.prometheusRule.workerDown.enabled=false",
        "--set",
        'monitoring.prometheusRule.selector=service="gw"',
        "--set-json",
        'monitoring.prometheusRule.extraRules=[{"alert":"GatewaySlow","expr":"vector(1)",'
        '"for":"1m","labels":{"severity":"info"}}]',
    )
    found = alerts(docs)
    assert set(found) == {"ConductorUnreachable", "ConductorWorkerErrors", "GatewaySlow"}
    errors = found["ConductorWorkerErrors"]
    assert errors["expr"].rstrip().endswith("> 0.25") and "[30m]" in errors["expr"]
    assert 'conductor_gateway_worker_errors_total{service="gw"}' in errors["expr"]
    assert errors["labels"]["severity"] == "critical"
    assert found["ConductorUnreachable"]["for"] == "2m"
    assert found["GatewaySlow"] == {
        "alert": "GatewaySlow",
        "expr": "vector(1)",
        "for": "1m",
        "labels": {"severity": "info"},
    }


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("monitoring.prometheusRule.workerErrors.threshold=2", "threshold"),
        ("monitoring.prometheusRule.workerErrors.threshold=0", "threshold"),
        ("monitoring.prometheusRule.conductorDown.for=5 minutes", "for"),
        ("monitoring.prometheusRule.workerDown.severty=page", "Additional property severty"),
        ("monitoring.grafanaDashboard.label.x=1", "Additional property label is"),
        ("monitoring.prometheusRule.extraRules[0].expr=up", "extraRules.0"),
        ("networkPolicy.metricsIngressFrom[0].podSelecter.x=y", "Additional property"),
    ],
)
def test_monitoring_values_are_typed(helm, home, setting, named) -> None:
    done = template(helm, home, *OPEN, "--set", setting)
    assert done.returncode != 0, setting
    assert "values don't meet the specifications of the schema" in done.stderr, done.stderr
    assert named in done.stderr, done.stderr


def test_a_prometheus_rule_without_rules_is_refused(helm, home) -> None:
    args = [*OPEN, "--set", "monitoring.prometheusRule.enabled=true"]
    for alert in ("conductorDown", "workerDown", "workerErrors"):
        args += ["--set", f"monitoring.prometheusRule.{alert}.enabled=false"]
    done = template(helm, home, *args)
    assert done.returncode != 0
    assert "every alert is off and extraRules is empty" in done.stderr


# ---- promtool: the rules and the dashboard's queries, and the alerts firing --------------------


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not found (Debian: apt-get install prometheus)")
    return found


def run_promtool(promtool: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def test_promtool_accepts_the_rules(promtool, monitored, tmp_path) -> None:
    rule = objects(monitored, "PrometheusRule")[GATEWAY]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule["spec"]), encoding="utf-8")
    done = run_promtool(promtool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 3 rules found" in done.stdout


def test_promtool_accepts_every_dashboard_query(promtool, tmp_path) -> None:
    """Each panel's query, with Grafana's variables filled in as Grafana would, parses as PromQL
    (written as recording rules for `promtool check rules`)."""
    board = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    filled = {
        "$__rate_interval": "2m",
        "$__range": "6h",
        "$namespace": NAMESPACE,
        "$job": f"({GATEWAY})",
        "$vllm_job": f"({GATEWAY}-model)",
    }
    rules = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for variable, value in filled.items():
                expr = expr.replace(variable, value)
            rules.append(
                {"record": f"dashboard:panel{panel['id']}:{target['refId']}", "expr": expr}
            )
    assert len(rules) >= 25
    spec = {"groups": [{"name": "dashboard", "rules": rules}]}
    (tmp_path / "queries.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    done = run_promtool(promtool, "check", "rules", "queries.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr


def series(metric: str, values: str, **labels: str) -> dict[str, str]:
    every = {"namespace": NAMESPACE, "job": GATEWAY, **labels}
    text = ",".join(f'{k}="{v}"' for k, v in every.items())
    return {"series": f"{metric}{{{text}}}", "values": values}


def test_alerts_fire_for_this_release_at_their_thresholds(promtool, monitored, tmp_path) -> None:
    """`promtool test rules` on synthetic series: the Conductor unreachable from one replica
    (and another release's gateway, which must not alert), a worker down from every replica and
    one down from a single replica only, a worker failing 20% of its calls and one failing 5%."""
    rule = objects(monitored, "PrometheusRule")[GATEWAY]
    spec = json.loads(json.dumps(rule["spec"]))
    for alert in spec["groups"][0]["rules"]:
        alert.pop("annotations")  # their wording is checked by promtool check rules above
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    labels = {"team": "ml-platform", "namespace": NAMESPACE, "job": GATEWAY}
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    series("conductor_gateway_conductor_up", "1 1 0x20", pod="gw-a"),
                    series("conductor_gateway_conductor_up", "1x22", pod="gw-b"),
                    series("conductor_gateway_conductor_up", "0x22", pod="x", namespace="other"),
                    series("conductor_gateway_worker_up", "0x30", pod="gw-a", worker="gpt"),
                    series("conductor_gateway_worker_up", "0x30", pod="gw-b", worker="gpt"),
                    series("conductor_gateway_worker_up", "0x30", pod="gw-a", worker="qwen"),
                    series("conductor_gateway_worker_up", "1x30", pod="gw-b", worker="qwen"),
                    series("conductor_gateway_worker_calls_total", "0+10x40", worker="gpt"),
                    series(
                        "conductor_gateway_worker_errors_total",
                        "0+2x40",
                        worker="gpt",
                        kind="timeout",
                    ),
                    series("conductor_gateway_worker_calls_total", "0+20x40", worker="qwen"),
                    series(
                        "conductor_gateway_worker_errors_total", "0+1x40", worker="qwen", kind="x"
                    ),
                ],
                "alert_rule_test": [
                    {"eval_time": "5m", "alertname": "ConductorUnreachable", "exp_alerts": []},
                    {
                        "eval_time": "10m",
                        "alertname": "ConductorUnreachable",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    **labels,
                                    "severity": "critical",
                                    "pod": "gw-a",
                                }
                            }
                        ],
                    },
                    {"eval_time": "9m", "alertname": "ConductorWorkerDown", "exp_alerts": []},
                    {
                        "eval_time": "15m",
                        "alertname": "ConductorWorkerDown",
                        "exp_alerts": [
                            {"exp_labels": {**labels, "severity": "warning", "worker": "gpt"}}
                        ],
                    },
                    {
                        "eval_time": "30m",
                        "alertname": "ConductorWorkerErrors",
                        "exp_alerts": [
                            {"exp_labels": {**labels, "severity": "warning", "worker": "gpt"}}
                        ],
                    },
                ],
            }
        ],
    }
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests), encoding="utf-8")
    done = run_promtool(promtool, "test", "rules", "tests.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


# ---- the scraper through the NetworkPolicies --------------------------------------------------


def ingress_rules(docs: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return objects(docs, "NetworkPolicy")[name]["spec"]["ingress"]


PROMETHEUS = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}


def test_the_scraper_is_let_in_on_the_metrics_port(monitored) -> None:
    """With the ServiceMonitor, Prometheus (networkPolicy.metricsIngressFrom) reaches the
    gateway's port and, with scrapeModels, the vLLM servers' port: the ports the ServiceMonitor's
    endpoints name (`http`)."""
    monitor = objects(monitored, "ServiceMonitor")[GATEWAY]
    (endpoint,) = monitor["spec"]["endpoints"]
    for name in (GATEWAY, f"{GATEWAY}-models"):
        rules = ingress_rules(monitored, name)
        assert len(rules) == 2, name
        assert rules[1]["from"] == [PROMETHEUS]
        assert rules[1]["ports"] == [{"port": endpoint["port"], "protocol": "TCP"}]
    # the Services' and pods' port named http is the one /metrics is served on
    for service in objects(monitored, "Service").values():
        assert any(p["name"] == "http" for p in service["spec"]["ports"])


def test_the_scraper_rule_follows_the_values(helm, home) -> None:
    on = ["--set", "monitoring.serviceMonitor.enabled=true"]
    custom = render(
        helm,
        home,
        *OPEN,
        *on,
        "--set",
        "monitoring.serviceMonitor.scrapeModels=false",
        "--set-json",
        'networkPolicy.metricsIngressFrom=[{"namespaceSelector":{"matchLabels":'
        '{"kubernetes.io/metadata.name":"observability"}},"podSelector":{"matchLabels":'
        '{"app":"vmagent"}}}]',
    )
    gateway_rules = ingress_rules(custom, GATEWAY)
    assert gateway_rules[1]["from"][0]["podSelector"] == {"matchLabels": {"app": "vmagent"}}
    assert len(ingress_rules(custom, f"{GATEWAY}-models")) == 1  # its /metrics not scraped
    none = render(helm, home, *OPEN, *on, "--set-json", "networkPolicy.metricsIngressFrom=[]")
    assert len(ingress_rules(none, GATEWAY)) == 1
    assert len(ingress_rules(none, f"{GATEWAY}-models")) == 1
