"""The parameter check's look at the TrainJob's Kubeflow Trainer runtime, against a loopback HTTP
server answering as a Kubernetes API server that refuses the read (403) or fails (500), and from
a pod with no Kubernetes credentials. (An installed and a missing runtime, on kmock:
tests/integration/test_trainjob_kmock.py.)"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

kubernetes = pytest.importorskip("kubernetes")

from conductor_core.cluster.runtime import check_runtime  # noqa: E402
from conductor_core.errors import ConfigError  # noqa: E402
from conductor_core.pipeline_steps.params import check_training_params  # noqa: E402

RUNTIME = "ClusterTrainingRuntime/torch-distributed"


def _api_server(status: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.server.paths.append(self.path)  # type: ignore[attr-defined]
            body = json.dumps({"kind": "Status", "code": status, "message": "no"}).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.paths = []  # type: ignore[attr-defined]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.fixture()
def api_at() -> Iterator:
    servers: list[ThreadingHTTPServer] = []
    clients: list = []

    def start(status: int):
        from kubernetes import client

        server = _api_server(status)
        servers.append(server)
        cfg = client.Configuration()
        cfg.host = f"http://127.0.0.1:{server.server_port}"
        clients.append(client.ApiClient(cfg))
        return server, clients[-1]

    yield start
    for api in clients:
        api.close()
    for server in servers:
        server.shutdown()
        server.server_close()


def test_a_runtime_the_service_account_may_not_read_is_a_warning(api_at) -> None:
    server, api = api_at(403)
    result = check_runtime(RUNTIME, api, "team")
    assert result.problem is None
    assert "may not read it (HTTP 403" in result.warning
    assert "readTrainingRuntimes=true" in result.warning
    assert server.paths == [
        "/apis/trainer.kubeflow.org/v1alpha1/clustertrainingruntimes/torch-distributed"
    ]


def test_a_namespaced_runtime_is_looked_up_in_the_namespace_and_a_failure_stops_the_run(
    api_at,
) -> None:
    server, api = api_at(500)
    result = check_runtime("TrainingRuntime/mine", api, "team")
    assert result.problem == (
        "trainjob: reading the TrainingRuntime 'mine' in namespace 'team' failed (HTTP 500)"
    )
    assert (
        server.paths[0]
        == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/team/trainingruntimes/mine"
    )
    assert check_runtime("Runtime/x", api, "team").problem.startswith(
        "trainjob: runtime 'Runtime/x'"
    )


def test_the_parameter_check_stops_a_trainjob_run_that_reaches_no_cluster(
    tmp_path, monkeypatch
) -> None:
    from conductor_core.train.config import bundled_pool

    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    params = {
        "profile": "paper",
        "launcher": "trainjob",
        "metric": "accuracy",
        "baselines": "single",
        "pool": bundled_pool("paper"),
        "trainjob_runtime": RUNTIME,
    }
    with pytest.raises(ConfigError, match="launcher: trainjob needs the Kubernetes API: no Kube"):
        check_training_params(**params)
    assert check_training_params(**{**params, "launcher": "pod"})["placement"] == "gpu"
