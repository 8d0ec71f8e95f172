"""``conductor_pipeline_runner.submit.submit`` drives the official ``kfp.Client`` against a KFP API
stand-in.

The stand-in (``tests/support/kfp_standin.py``) speaks the KFP v2beta1 REST protocol on loopback
and records every request, so these tests check what a real server would receive: the exact
uploaded bytes, names, the experiment, run parameters and the version reference of the run.

No ``from __future__ import annotations`` here: kfp reads the component's annotations as types.
"""

import hashlib
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conductor_core.cluster.images import BASE_IMAGE
from conductor_core.errors import ConductorError
from conductor_core.track.loopback import free_port
from conductor_pipeline_runner.submit import SubmitError, SubmitResult, default_version_name, submit
from tests.support.kfp_standin import API, KfpStandIn

PIPELINE = "conductor-tiny-add"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A one-component pipeline compiled by kfp to YAML."""
    from kfp import compiler, dsl

    @dsl.component(base_image=BASE_IMAGE, install_kfp_package=False)
    def add(a: int, b: int) -> int:
        return a + b

    @dsl.pipeline(name="tiny-add", description="adds two numbers")
    def tiny_add(a: int = 1, b: int = 2) -> None:
        add(a=a, b=b)

    path = tmp_path_factory.mktemp("pkg") / "tiny_add.yaml"
    compiler.Compiler().compile(pipeline_func=tiny_add, package_path=str(path))
    return path


@pytest.fixture
def standin() -> Iterator[KfpStandIn]:
    with KfpStandIn() as server:
        yield server


def test_first_submit_uploads_the_pipeline_and_runs_that_version(
    package: Path, standin: KfpStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    result = submit(
        package,
        host=standin.host,
        pipeline_name=PIPELINE,
        experiment="conductor-test",
        run_name="first run",
        params={"a": 5, "b": 7},
    )

    uploads = standin.requests_to("POST", f"{API}/pipelines/upload")
    assert len(uploads) == 1
    filename, data = uploads[0].files["uploadfile"]
    assert data == package.read_bytes()
    assert filename == package.name
    assert uploads[0].param("name") == PIPELINE
    assert not standin.requests_to("POST", f"{API}/pipelines/upload_version")

    experiments = standin.requests_to("POST", f"{API}/experiments")
    assert [r.json()["display_name"] for r in experiments] == ["conductor-test"]

    (run_req,) = standin.requests_to("POST", f"{API}/runs")
    body = run_req.json()
    assert body["display_name"] == "first run"
    assert body["experiment_id"] == result.experiment_id
    assert body["runtime_config"]["parameters"] == {"a": 5, "b": 7}
    assert body["pipeline_version_reference"] == {
        "pipeline_id": result.pipeline_id,
        "pipeline_version_id": result.version_id,
    }
    assert "pipeline_spec" not in body  # the run is of the uploaded version, not an inline spec

    (pipeline,) = standin.pipelines.values()
    (version,) = standin.versions.values()
    assert isinstance(result, SubmitResult)
    assert result.created_pipeline is True
    assert result.pipeline_id == pipeline["pipeline_id"]
    assert result.version_id == version["pipeline_version_id"]
    assert result.version_name == PIPELINE  # KFP names a pipeline's first version after it
    assert result.run_id in standin.runs
    assert result.run_url == f"{standin.host}/#/runs/details/{result.run_id}"
    assert result.package_sha256 == hashlib.sha256(package.read_bytes()).hexdigest()
    assert result.to_dict()["run_id"] == result.run_id
    assert capsys.readouterr().out == ""  # kfp.Client's printed links are kept off stdout


def test_second_submit_uploads_a_new_version_and_reuses_the_experiment(
    package: Path, standin: KfpStandIn
) -> None:
    first = submit(package, host=standin.host, pipeline_name=PIPELINE, params={"a": 1})
    second = submit(package, host=standin.host, pipeline_name=PIPELINE, params={"a": 2})

    assert len(standin.requests_to("POST", f"{API}/pipelines/upload")) == 1
    (upload_version,) = standin.requests_to("POST", f"{API}/pipelines/upload_version")
    assert upload_version.param("pipelineid") == first.pipeline_id
    assert upload_version.files["uploadfile"][1] == package.read_bytes()
    sha = hashlib.sha256(package.read_bytes()).hexdigest()
    assert re.fullmatch(rf"\d{{8}}-\d{{6}}-{sha[:12]}", second.version_name)
    assert upload_version.param("name") == second.version_name

    assert second.created_pipeline is False
    assert second.pipeline_id == first.pipeline_id
    assert second.version_id != first.version_id
    assert len(standin.versions) == 2
    assert standin.versions[second.version_id]["name"] == second.version_name

    # the experiment was created once and found the second time
    assert len(standin.requests_to("POST", f"{API}/experiments")) == 1
    assert second.experiment_id == first.experiment_id
    runs = [r.json() for r in standin.requests_to("POST", f"{API}/runs")]
    assert [r["pipeline_version_reference"]["pipeline_version_id"] for r in runs] == [
        first.version_id,
        second.version_id,
    ]
    assert [r["runtime_config"]["parameters"] for r in runs] == [{"a": 1}, {"a": 2}]


def test_a_taken_version_name_is_a_clear_error(package: Path, standin: KfpStandIn) -> None:
    submit(package, host=standin.host, pipeline_name=PIPELINE)
    submit(package, host=standin.host, pipeline_name=PIPELINE, version_name="v1")
    with pytest.raises(SubmitError) as info:
        submit(package, host=standin.host, pipeline_name=PIPELINE, version_name="v1")
    message = str(info.value)
    assert "'v1'" in message and "already exists" in message and "\n" not in message
    assert len(standin.runs) == 2  # no run was started for the refused upload


def test_unreachable_host_gives_one_clear_line(package: Path) -> None:
    host = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    with pytest.raises(SubmitError) as info:
        submit(package, host=host, pipeline_name=PIPELINE)
    assert time.monotonic() - start < 10  # no retry loop
    message = str(info.value)
    assert isinstance(info.value, ConductorError)
    assert message.startswith(f"cannot reach Kubeflow Pipelines at {host}")
    assert "\n" not in message


def test_rejected_upload_gives_the_servers_reason(tmp_path: Path, standin: KfpStandIn) -> None:
    bad = tmp_path / "not_a_pipeline.yaml"
    bad.write_text("hello: world\n")
    with pytest.raises(SubmitError) as info:
        submit(bad, host=standin.host, pipeline_name=PIPELINE)
    message = str(info.value)
    assert message.startswith(f"uploading pipeline {PIPELINE!r}: rejected by Kubeflow Pipelines")
    assert "HTTP 400" in message and "not a KFP pipeline spec" in message
    assert "\n" not in message
    assert not standin.pipelines and not standin.runs


def test_unknown_run_parameter_is_rejected_by_the_server(
    package: Path, standin: KfpStandIn
) -> None:
    with pytest.raises(SubmitError) as info:
        submit(package, host=standin.host, pipeline_name=PIPELINE, params={"c": 3})
    assert "starting run" in str(info.value)
    assert "Unrecognized input parameter: c" in str(info.value)


def test_missing_package_is_a_clear_error(tmp_path: Path, standin: KfpStandIn) -> None:
    with pytest.raises(SubmitError, match="pipeline package not found"):
        submit(tmp_path / "absent.yaml", host=standin.host, pipeline_name=PIPELINE)
    assert standin.requests == []


def test_token_is_sent_but_never_printed_or_logged(
    package: Path, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    token = "s3cr3t-token-value-0123456789"
    caplog.set_level(logging.DEBUG)
    with KfpStandIn(token=token) as server:
        result = submit(package, host=server.host, pipeline_name=PIPELINE, existing_token=token)
        assert server.requests and all(r.authorized for r in server.requests)
        assert result.run_id in server.runs

        with pytest.raises(SubmitError) as info:
            submit(package, host=server.host, pipeline_name=PIPELINE, existing_token="wrong-tok")
        assert "rejected the credentials (HTTP 401)" in str(info.value)
        assert "wrong-tok" not in str(info.value)
    out = capsys.readouterr()
    for text in (out.out, out.err, caplog.text, repr(result.to_dict())):
        assert token not in text


def test_namespace_reaches_the_server_in_multi_user_mode(package: Path) -> None:
    with KfpStandIn(multi_user=True) as server:
        first = submit(package, host=server.host, pipeline_name=PIPELINE, namespace="team-a")
        second = submit(package, host=server.host, pipeline_name=PIPELINE, namespace="team-a")
        (upload,) = server.requests_to("POST", f"{API}/pipelines/upload")
        assert upload.param("namespace") == "team-a"
        assert [r.param("namespace") for r in server.requests_to("GET", f"{API}/pipelines")] == [
            "team-a",
            "team-a",
        ]
        (exp_req,) = server.requests_to("POST", f"{API}/experiments")
        assert exp_req.json()["namespace"] == "team-a"
        assert second.pipeline_id == first.pipeline_id and not second.created_pipeline


def test_default_version_name_is_time_and_content_hash() -> None:
    from datetime import UTC, datetime

    when = datetime(2026, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert default_version_name("ab" * 32, when) == "20260304-050607-abababababab"


def test_conductor_pipeline_submit_uploads_the_compiled_training_pipeline(
    standin: KfpStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from conductor_core.cli import main
    from conductor_pipelines.registry import COMPILED_DIR

    main(
        [
            "pipeline",
            "submit",
            "training",
            "--host",
            standin.host,
            "--set",
            "base_steps=50",
            "--set",
            "profile=tiny",
        ]
    )
    printed = json.loads(capsys.readouterr().out)
    (upload,) = standin.requests_to("POST", f"{API}/pipelines/upload")
    assert upload.files["uploadfile"][1] == (COMPILED_DIR / "training.yaml").read_bytes()
    assert upload.param("name") == "conductor-training"
    (run_req,) = standin.requests_to("POST", f"{API}/runs")
    assert run_req.json()["runtime_config"]["parameters"] == {"base_steps": 50, "profile": "tiny"}
    assert printed["run_id"] in standin.runs


# -- the run's service account (issue 24, 3.4) --------------------------------------------------


def test_service_account_reaches_the_run_request(package: Path, standin: KfpStandIn) -> None:
    result = submit(
        package, host=standin.host, pipeline_name=PIPELINE, service_account="default-editor"
    )
    (run_req,) = standin.requests_to("POST", f"{API}/runs")
    assert run_req.json()["service_account"] == "default-editor"
    assert standin.runs[result.run_id]["service_account"] == "default-editor"
    assert result.service_account == "default-editor"


def test_without_a_service_account_the_run_leaves_it_to_kfp(
    package: Path, standin: KfpStandIn
) -> None:
    result = submit(package, host=standin.host, pipeline_name=PIPELINE)
    (run_req,) = standin.requests_to("POST", f"{API}/runs")
    assert "service_account" not in run_req.json()  # KFP's default: pipeline-runner etc.
    assert result.service_account == ""


def test_an_invalid_service_account_is_refused_before_anything_is_sent(
    package: Path, standin: KfpStandIn
) -> None:
    with pytest.raises(SubmitError, match="not a valid Kubernetes name"):
        submit(package, host=standin.host, pipeline_name=PIPELINE, service_account="Bad_Name")
    assert standin.requests == []


def test_conductor_pipeline_submit_passes_the_service_account(
    standin: KfpStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from conductor_core.cli import main

    main(
        [
            "pipeline",
            "submit",
            "curation",
            "--host",
            standin.host,
            "--service-account",
            "pipeline-runner",
        ]
    )
    printed = json.loads(capsys.readouterr().out)
    (run_req,) = standin.requests_to("POST", f"{API}/runs")
    assert run_req.json()["service_account"] == "pipeline-runner"
    assert printed["service_account"] == "pipeline-runner"
    assert printed["server_version"] == "2.17.2"


# -- the server's version (issue 24, 3.6) -------------------------------------------------------


@pytest.mark.parametrize("via_ui", [False, True], ids=["api-server", "ui-server"])
def test_an_older_kfp_backend_is_refused_with_the_reason(package: Path, via_ui: bool) -> None:
    with KfpStandIn(tag_name="2.16.1", via_ui=via_ui) as server:
        with pytest.raises(SubmitError) as info:
            submit(package, host=server.host, pipeline_name=PIPELINE)
        message = str(info.value)
        assert message.startswith(f"Kubeflow Pipelines at {server.host} is version 2.16.1")
        assert "2.17.0 or newer" in message and "OneOf" in message
        assert "\n" not in message
        # nothing but the healthz probe reached the server
        assert [r.path for r in server.requests] == [f"{API}/healthz"]
        assert not server.pipelines and not server.runs


@pytest.mark.parametrize(
    ("tag", "via_ui"),
    [("2.17.0", False), ("2.17.0", True), ("v2.17.2", False), ("2.18.0", True)],
)
def test_the_minimum_and_newer_backends_are_accepted(package: Path, tag: str, via_ui: bool) -> None:
    with KfpStandIn(tag_name=tag, via_ui=via_ui) as server:
        result = submit(package, host=server.host, pipeline_name=PIPELINE)
        assert result.run_id in server.runs
        assert result.server_version == tag


def test_a_backend_without_a_version_gets_a_warning_and_the_run(
    package: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="conductor_pipeline_runner.submit")
    with KfpStandIn(tag_name=None) as server:
        result = submit(package, host=server.host, pipeline_name=PIPELINE)
        assert result.run_id in server.runs
    assert result.server_version == ""
    (record,) = [
        r
        for r in caplog.records
        if r.name == "conductor_pipeline_runner.submit" and r.levelname == "WARNING"
    ]
    assert "reports no version ('unknown')" in record.getMessage()
    assert "2.17.0 or newer" in record.getMessage()


def test_the_standin_answers_healthz_as_the_kfp_servers_do() -> None:
    """The shapes of backend/src/apiserver/main.go and frontend/server/handlers/healthz.ts."""
    import json
    import urllib.request

    def get(server: KfpStandIn, path: str) -> dict:
        with urllib.request.urlopen(server.host + path, timeout=5) as resp:
            return json.loads(resp.read())

    with KfpStandIn(tag_name="2.17.2") as api, KfpStandIn(tag_name="2.17.2", via_ui=True) as ui:
        v2 = get(api, f"{API}/healthz")
        assert set(v2) == {"commit_sha", "tag_name", "multi_user", "pipeline_store"}
        assert v2["tag_name"] == "2.17.2"
        assert set(get(api, "/apis/v1beta1/healthz")) == {"commit_sha", "tag_name", "multi_user"}
        from_ui = get(ui, f"{API}/healthz")
        assert from_ui["apiServerTagName"] == "2.17.2" and from_ui["apiServerReady"] is True
        assert "tag_name" not in from_ui
    with KfpStandIn(tag_name=None) as dev:
        assert get(dev, f"{API}/healthz")["tag_name"] == "unknown"
