"""The gateway pod's lifecycle as the chart renders it (real ``helm template``): a preStop hook
that makes ``/readyz`` fail before the listener closes, and a grace period that covers the
longest request allowed, or the chart refuses to render. The rendered hook is also run against a
real gateway on loopback: while it sleeps, the replica is unready and still serves.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from conductor_core.serve.app import create_app
from conductor_core.serve.config import GatewayConfig
from conductor_core.simulation.server import running_app
from tests.support.helm import run_helm

pytest.importorskip("prometheus_client")

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "conductor"
RELEASE = "rel"
OPEN = ["--set", "allowUnauthenticated=true", "--set", "conductorModel.source=models:/conductor/1"]


@pytest.fixture(scope="module")
def home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("helm-home")


def template(helm: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_helm(helm, ["template", RELEASE, str(CHART), *OPEN, *args], home)


def render(helm: Path, home: Path, *args: str) -> list[dict[str, Any]]:
    done = template(helm, home, *args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def gateway_pod(docs: list[dict[str, Any]]) -> tuple[dict[str, Any], GatewayConfig]:
    """The gateway's pod spec and the GatewayConfig of its config file."""
    deployment = next(
        d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == "rel-conductor"
    )
    config_map = next(
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "rel-conductor-gateway"
    )
    config = GatewayConfig.model_validate(yaml.safe_load(config_map["data"]["gateway.yaml"]))
    return deployment["spec"]["template"]["spec"], config


def option(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


def test_the_prestop_hook_drains_through_readyz_and_the_grace_covers_the_longest_request(
    helm, home
) -> None:
    pod, config = gateway_pod(render(helm, home))
    gateway = pod["containers"][0]
    drain_file = option(gateway["args"], "--drain-file")
    assert drain_file and drain_file.startswith("/tmp/")  # /tmp is a writable emptyDir
    assert any(m["mountPath"] == "/tmp" for m in gateway["volumeMounts"])
    command = gateway["lifecycle"]["preStop"]["exec"]["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    assert f"touch {drain_file}" in command[2] and "sleep 15" in command[2]
    # the kubelet sees the replica unready before SIGTERM, too
    probe = gateway["readinessProbe"]
    assert probe["httpGet"]["path"] == "/readyz"
    assert probe["periodSeconds"] * probe["failureThreshold"] <= 15
    assert probe["timeoutSeconds"] > config.readiness_timeout_s
    # the longest request: started just before the hook, it ends within request_timeout_s;
    # after the hook's sleep, uvicorn lets it run for drain_timeout_s, within the grace period
    assert config.drain_timeout_s >= config.request_timeout_s
    assert pod["terminationGracePeriodSeconds"] > 15 + config.drain_timeout_s


def test_no_prestop_sleep_means_no_hook(helm, home) -> None:
    pod, _ = gateway_pod(
        render(
            helm,
            home,
            "--set",
            "gateway.preStopSleepSeconds=0",
            "--set",
            "gateway.terminationGracePeriodSeconds=301",
        )
    )
    assert "lifecycle" not in pod["containers"][0]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--set", "gateway.config.request_timeout_s=600"],
            "gateway.config.drain_timeout_s (300) is below gateway.config.request_timeout_s (600)",
        ),
        (
            ["--set", "gateway.config.drain_timeout_s=30"],
            "gateway.config.drain_timeout_s (30) is below gateway.config.request_timeout_s (300)",
        ),
        (
            ["--set", "gateway.terminationGracePeriodSeconds=315"],
            "gateway.terminationGracePeriodSeconds (315) must exceed "
            "gateway.config.drain_timeout_s + gateway.preStopSleepSeconds (300 + 15)",
        ),
        (
            ["--set", "gateway.preStopSleepSeconds=60"],
            "gateway.terminationGracePeriodSeconds (330) must exceed "
            "gateway.config.drain_timeout_s + gateway.preStopSleepSeconds (300 + 60)",
        ),
    ],
)
def test_a_grace_period_shorter_than_the_longest_request_is_refused(
    helm, home, args, message
) -> None:
    done = template(helm, home, *args)
    assert done.returncode != 0, "rendered although the longest request would be killed"
    assert message in done.stderr, done.stderr


def test_the_rendered_hook_makes_a_running_gateway_unready_while_it_still_serves(
    helm, home, tmp_path
) -> None:
    pod, config = gateway_pod(render(helm, home, "--set", "gateway.preStopSleepSeconds=2"))
    gateway = pod["containers"][0]
    drain_file = option(gateway["args"], "--drain-file")
    assert drain_file
    local_file = tmp_path / "draining"  # the pod's /tmp, here
    command = [
        part.replace(drain_file, str(local_file))
        for part in gateway["lifecycle"]["preStop"]["exec"]["command"]
    ]
    app = create_app(config.model_copy(update={"drain_file": str(local_file)}))
    with running_app(app, lifespan="on") as url:
        root = url.removesuffix("/v1")
        assert httpx.get(root + "/readyz", timeout=5).status_code == 200
        hook = subprocess.Popen(command)
        try:
            deadline = time.monotonic() + 1.5
            while (ready := httpx.get(root + "/readyz", timeout=5)).status_code == 200:
                assert time.monotonic() < deadline, "the hook did not make /readyz fail"
                time.sleep(0.05)
            assert ready.status_code == 503 and ready.json()["checks"] == {"gateway": "draining"}
            assert hook.poll() is None  # still sleeping: SIGTERM has not come yet
            with openai.OpenAI(base_url=url, api_key="unused", max_retries=0) as client:
                reply = client.chat.completions.create(
                    model="conductor", messages=[{"role": "user", "content": "What is 6 times 7?"}]
                )
            assert reply.choices[0].message.content  # the listener still serves
        finally:
            assert hook.wait(timeout=10) == 0
