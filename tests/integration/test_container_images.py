"""The built CPU images, run with the settings the pods use (tests/support/containers.py).

conductor-base runs the library call of every component; conductor-serve serves the OpenAI API.
The whole training pipeline in these containers: tests/e2e/test_pipeline_docker.py.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

from conductor_core.track.loopback import free_port
from tests.support.containers import POD_LIKE, docker_or_skip, image_or_skip

pytestmark = pytest.mark.slow

# Imports every component's function body makes (each body imports conductor_core and makes one
# call), executed in the image: a component whose call needs a package the image lacks fails.
COMPONENT_IMPORTS = r"""
import ast, importlib, inspect, json, pkgutil
import conductor_components
done, failed = [], {}
for mod in pkgutil.iter_modules(conductor_components.__path__):
    if not mod.ispkg:
        continue
    module = importlib.import_module(f"conductor_components.{mod.name}.component")
    tree = ast.parse(inspect.getsource(module))
    for fn in [n for n in tree.body if isinstance(n, ast.FunctionDef)]:
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom):
                try:
                    m = importlib.import_module(node.module)
                    for alias in node.names:
                        getattr(m, alias.name)
                except Exception as exc:
                    failed[f"{mod.name}: {node.module}"] = repr(exc)
        done.append(mod.name)
print(json.dumps({"components": done, "failed": failed}))
"""


@pytest.fixture(scope="module")
def client():
    docker = docker_or_skip()
    yield docker
    docker.close()


def _run(client, image: str, command: list[str]) -> str:
    """Run ``command`` in ``image`` (whatever its entrypoint) as a pod would; its output."""
    out = client.containers.run(
        image, command[1:], entrypoint=[command[0]], remove=True, **POD_LIKE
    )
    return out.decode()


@pytest.mark.parametrize("kind", ["base", "serve"])
def test_images_run_as_the_pods_do(client, kind):
    image = image_or_skip(client, kind)
    assert client.images.get(image).attrs["Config"]["User"] == "10001:10001"
    probe = (
        "import os, pathlib; print(os.getuid(), os.getgid());"
        "p = pathlib.Path('/opt/venv/x');"
        "\ntry:\n p.write_text('x'); print('root-writable')\nexcept OSError: print('read-only')"
    )
    out = _run(client, image, ["python", "-c", probe]).split()
    assert out == ["10001", "10001", "read-only"]
    caps = _run(client, image, ["python", "-c", "print(open('/proc/self/status').read())"])
    eff = next(line for line in caps.splitlines() if line.startswith("CapEff:"))
    assert int(eff.split()[1], 16) == 0  # every capability dropped


def test_base_image_runs_every_component_call(client):
    import conductor_components

    image = image_or_skip(client, "base")
    out = json.loads(_run(client, image, ["python", "-c", COMPONENT_IMPORTS]).strip())
    assert out["failed"] == {}
    folder = __import__("pathlib").Path(conductor_components.__file__).parent
    here = {p.name for p in folder.iterdir()}
    assert set(out["components"]) >= {n for n in here if not n.startswith(("_", "."))} - {
        "__pycache__"
    }
    assert len(out["components"]) >= 8


def test_base_image_has_the_conductor_command_and_bubblewrap(client):
    image = image_or_skip(client, "base")
    assert "pipeline" in _run(client, image, ["conductor", "--help"])
    assert _run(client, image, ["sh", "-c", "command -v bwrap"]).strip() == "/usr/bin/bwrap"


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as err:
        return err.code, {}


def test_serve_image_answers_the_openai_api(client):
    image = image_or_skip(client, "serve")
    port = free_port()
    container = client.containers.run(
        image,
        ["serve", "--host", "127.0.0.1", "--port", str(port)],
        detach=True,
        **POD_LIKE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if _get(f"{base}/healthz")[0] == 200:
                    break
            except OSError:
                pass
            container.reload()
            assert container.status != "exited", container.logs().decode()[-3000:]
            time.sleep(0.5)
        assert _get(f"{base}/healthz")[0] == 200
        assert _get(f"{base}/readyz")[0] == 200
        status, models = _get(f"{base}/v1/models")
        assert status == 200 and models["data"][0]["id"] == "conductor"
        body = json.dumps(
            {"model": "conductor", "messages": [{"role": "user", "content": "What is 2 + 3?"}]}
        ).encode()
        request = urllib.request.Request(
            f"{base}/v1/chat/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            answer = json.loads(resp.read())
        assert answer["object"] == "chat.completion"
        assert answer["choices"][0]["message"]["content"]
    finally:
        container.remove(force=True)


SANDBOX_MODE = (
    "import json; from conductor_core.tasks.sandbox import isolation_report; "
    "print(json.dumps(isolation_report()['mode']))"
)


def test_the_code_sandbox_keeps_its_namespaces_only_with_the_pods_sandbox_settings(
    client, tmp_path
):
    """Graders run model-written code in training and evaluation pods. With the pods' default
    security (Docker's seccomp profile, masked /proc) bwrap cannot create namespaces and the
    sandbox refuses to run code; with the sandbox settings the compiled pods ask for
    (seccomp Unconfined, procMount Unmasked), which the rehearsal maps to Docker's options, it
    keeps them."""
    from conductor_core.cluster.settings import load_cluster_settings
    from conductor_pipeline_runner.containers import sandbox_security_options
    from conductor_pipelines.registry import compile_pipeline

    image = image_or_skip(client, "base")
    sandbox = {
        "seccomp_profile": {"type": "Unconfined"},
        "proc_mount": "Unmasked",
        "host_users": False,
    }
    settings = load_cluster_settings(None, overrides={"cpu_train": {"sandbox": sandbox}})
    compiled = compile_pipeline("training", tmp_path / "training.yaml", settings=settings)
    options = sandbox_security_options(compiled)
    assert options == ["seccomp=unconfined", "systempaths=unconfined"]

    def mode(extra: list[str]) -> str:
        # The docker command line: `systempaths=unconfined` is one of its options that the
        # Docker SDK cannot express (conductor_pipeline_runner/containers.py CLI_ONLY_OPTIONS).
        command = ["docker", "run", "--rm", "--user", POD_LIKE["user"], "--read-only"]
        command += ["--tmpfs", "/tmp", "--cap-drop", "ALL", "--network", "host"]
        for option in [*POD_LIKE["security_opt"], *extra]:
            command += ["--security-opt", option]
        command += ["--entrypoint", "python", image, "-c", SANDBOX_MODE]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    assert mode([]) == "refused"
    assert mode(options) in ("bwrap", "zygote")
