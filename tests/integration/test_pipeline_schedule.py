"""``conductor pipeline schedule`` and ``--no-cache`` drive the official ``kfp.Client`` against the
KFP API stand-in (``tests/support/kfp_standin.py``), which checks a recurring run as the API
server does: the recurring run it receives, the version it refers to, and the uploaded package
with the cache off.

No ``from __future__ import annotations`` here: kfp reads the component's annotations as types.
"""

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from conductor_core.cluster.images import BASE_IMAGE
from conductor_pipeline_runner.submit import (
    ScheduleResult,
    SubmitError,
    schedule,
    submit,
    without_caching,
)
from conductor_pipelines.registry import COMPILED_DIR
from tests.support.kfp_standin import API, KfpStandIn

PIPELINE = "conductor-tiny-add"


@pytest.fixture(scope="module")
def package(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A pipeline with a loop (a nested DAG), compiled by kfp to YAML."""
    from kfp import compiler, dsl

    @dsl.component(base_image=BASE_IMAGE, install_kfp_package=False)
    def add(a: int, b: int) -> int:
        return a + b

    @dsl.pipeline(name="tiny-add", description="adds numbers")
    def tiny_add(a: int = 1, b: int = 2) -> None:
        add(a=a, b=b)
        with dsl.ParallelFor([1, 2]) as item:
            add(a=a, b=item)

    path = tmp_path_factory.mktemp("pkg") / "tiny_add.yaml"
    compiler.Compiler().compile(pipeline_func=tiny_add, package_path=str(path))
    return path


@pytest.fixture
def standin() -> Iterator[KfpStandIn]:
    with KfpStandIn() as server:
        yield server


def _tasks(spec: dict) -> list[dict]:
    dags = [spec["root"]["dag"]] + [c["dag"] for c in spec["components"].values() if "dag" in c]
    return [t for dag in dags for t in dag["tasks"].values()]


def test_a_cron_schedule_becomes_a_recurring_run_of_the_uploaded_version(
    package: Path, standin: KfpStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    result = schedule(
        package,
        host=standin.host,
        pipeline_name=PIPELINE,
        cron="0 2 * * *",
        max_concurrency=2,
        params={"a": 5},
        service_account="pipeline-runner",
        start_time="2030-01-01T00:00:00",
    )
    (req,) = standin.requests_to("POST", f"{API}/recurringruns")
    body = req.json()
    assert body["trigger"]["cron_schedule"]["cron"] == "0 0 2 * * *"  # seconds first, for KFP
    assert body["trigger"]["cron_schedule"]["start_time"] == "2030-01-01T00:00:00Z"
    assert "periodic_schedule" not in body["trigger"]
    assert body["max_concurrency"] == 2 and body["no_catchup"] is True
    assert body["mode"] == "ENABLE" and body["service_account"] == "pipeline-runner"
    assert body["runtime_config"]["parameters"] == {"a": 5}
    assert body["pipeline_version_reference"] == {
        "pipeline_id": result.pipeline_id,
        "pipeline_version_id": result.version_id,
    }
    assert body["display_name"] == f"{PIPELINE} cron 0 0 2 * * *"
    assert not standin.runs  # nothing started now

    assert isinstance(result, ScheduleResult)
    stored = standin.recurring_runs[result.recurring_run_id]
    assert stored["status"] == "ENABLED" and stored["max_concurrency"] == "2"
    assert result.recurring_run_url == (
        f"{standin.host}/#/recurringrun/details/{result.recurring_run_id}"
    )
    assert (result.cron, result.interval_s, result.max_concurrency) == ("0 0 2 * * *", 0, 2)
    assert result.created_pipeline and result.caching and not result.catchup
    assert result.server_version == "2.17.2" and result.start_time == "2030-01-01T00:00:00Z"
    assert json.loads(json.dumps(result.to_dict()))["recurring_run_id"] in standin.recurring_runs
    assert capsys.readouterr().out == ""


def test_an_interval_paused_with_catchup(package: Path, standin: KfpStandIn) -> None:
    result = schedule(
        package,
        host=standin.host,
        pipeline_name=PIPELINE,
        interval_s="6h",
        catchup=True,
        enabled=False,
        name="every six hours",
    )
    body = standin.requests_to("POST", f"{API}/recurringruns")[0].json()
    assert body["trigger"]["periodic_schedule"]["interval_second"] == 21600
    assert "cron_schedule" not in body["trigger"]
    assert body["no_catchup"] is False and body["mode"] == "DISABLE"
    assert body["display_name"] == "every six hours" and body["max_concurrency"] == 1
    assert standin.recurring_runs[result.recurring_run_id]["status"] == "DISABLED"
    assert (result.cron, result.interval_s, result.enabled) == ("", 21600, False)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cron": "0 2 * *"}, "4 fields"),
        ({"cron": "0 25 * * *"}, "hour field '25'"),
        ({"interval_s": "soon"}, "--every 'soon'"),
        ({}, "a cron schedule or an interval"),
        ({"cron": "@daily", "interval_s": 60}, "exactly one"),
        ({"cron": "@daily", "max_concurrency": 11}, "allows 1 to 10"),
        ({"cron": "@daily", "start_time": "tomorrow"}, "not ISO 8601"),
        (
            {"cron": "@daily", "start_time": "2030-01-02", "end_time": "2030-01-01"},
            "is not after the start",
        ),
    ],
)
def test_a_schedule_kfp_would_refuse_is_refused_before_anything_is_sent(
    package: Path, standin: KfpStandIn, kwargs: dict, message: str
) -> None:
    with pytest.raises(SubmitError, match=message) as info:
        schedule(package, host=standin.host, pipeline_name=PIPELINE, **kwargs)
    assert str(info.value).startswith(f"scheduling {PIPELINE!r}: ")
    assert standin.requests == []  # no version uploaded for a schedule that cannot be made


def test_the_standin_refuses_what_the_kfp_api_server_refuses(
    package: Path, standin: KfpStandIn
) -> None:
    """Straight through kfp.Client, past our own checks: the server's messages."""
    import kfp
    import kfp_server_api

    client = kfp.Client(host=standin.host)
    exp = client.create_experiment(name="e")
    pipeline = client.upload_pipeline(str(package), pipeline_name=PIPELINE)
    version = client.list_pipeline_versions(pipeline.pipeline_id).pipeline_versions[0]
    target = {
        "experiment_id": exp.experiment_id,
        "pipeline_id": pipeline.pipeline_id,
        "version_id": version.pipeline_version_id,
    }
    cases = [
        ({"cron_expression": "0 2 * *"}, "Schedule cron is not a supported format"),
        ({"cron_expression": "0 0 * * * 9"}, "above maximum (6)"),
        ({"cron_expression": "@daily", "max_concurrency": 11}, "at most 10. Received 11"),
        ({"cron_expression": "@daily", "params": {"c": 1}}, "Unrecognized input parameter: c"),
    ]
    for kwargs, message in cases:
        with pytest.raises(kfp_server_api.ApiException) as info:
            client.create_recurring_run(job_name="r", **target, **kwargs)
        assert info.value.status == 400 and message in info.value.body
    made = client.create_recurring_run(job_name="r", cron_expression="0 2 * * *", **target)
    assert made.recurring_run_id in standin.recurring_runs  # five fields parse (as second..month)
    assert client.get_recurring_run(made.recurring_run_id).max_concurrency == "1"


def test_no_cache_uploads_a_version_with_the_cache_off_for_every_task(
    package: Path, standin: KfpStandIn
) -> None:
    cached = submit(package, host=standin.host, pipeline_name=PIPELINE)
    uncached = submit(package, host=standin.host, pipeline_name=PIPELINE, caching=False)
    assert cached.caching and not uncached.caching
    specs = {v: yaml.safe_load(d) for v, d in standin.version_specs.items()}
    runs_a_container = [t for t in _tasks(specs[cached.version_id]) if "cachingOptions" in t]
    assert len(runs_a_container) == 2  # the loop's task too, in the loop's DAG
    assert all(t["cachingOptions"] == {"enableCache": True} for t in runs_a_container)
    tasks = _tasks(specs[uncached.version_id])
    assert all(t["cachingOptions"]["enableCache"] is False for t in tasks)
    (upload,) = standin.requests_to("POST", f"{API}/pipelines/upload_version")
    assert upload.files["uploadfile"][0] == package.name
    assert "execution cache off" in upload.param("description")
    run = standin.requests_to("POST", f"{API}/runs")[1].json()
    assert run["pipeline_version_reference"]["pipeline_version_id"] == uncached.version_id
    assert uncached.package_sha256 != cached.package_sha256


def test_without_caching_keeps_every_other_document_and_field() -> None:
    text = (COMPILED_DIR / "training.yaml").read_text()
    before, after = list(yaml.safe_load_all(text)), list(yaml.safe_load_all(without_caching(text)))
    assert len(before) == len(after) == 2 and after[1] == before[1]  # the platform spec
    for task in _tasks(after[0]):
        assert task.pop("cachingOptions")["enableCache"] is False
    for task in _tasks(before[0]):
        task.pop("cachingOptions", None)
    assert after[0] == before[0]


def test_conductor_pipeline_schedule_and_submit_no_cache(
    standin: KfpStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    from conductor_core.cli import main

    argv = ["pipeline", "schedule", "curation", "--host", standin.host, "--cron", "@weekly"]
    main([*argv, "--max-concurrency", "3", "--no-cache", "--set", "curation_config=example"])
    printed = json.loads(capsys.readouterr().out)
    (req,) = standin.requests_to("POST", f"{API}/recurringruns")
    body = req.json()
    assert body["trigger"]["cron_schedule"]["cron"] == "@weekly"
    assert body["max_concurrency"] == 3
    assert body["runtime_config"]["parameters"] == {"curation_config": "example"}
    assert printed["recurring_run_id"] in standin.recurring_runs and printed["caching"] is False
    spec = next(yaml.safe_load_all(standin.version_specs[printed["version_id"]]))
    assert all(t["cachingOptions"]["enableCache"] is False for t in _tasks(spec))

    main(["pipeline", "submit", "curation", "--host", standin.host, "--no-cache"])
    printed = json.loads(capsys.readouterr().out)
    assert printed["run_id"] in standin.runs and printed["caching"] is False

    for bad in ([], ["--cron", "@daily", "--every", "1h"]):
        with pytest.raises(SystemExit) as info:
            main(["pipeline", "schedule", "curation", "--host", standin.host, *bad])
        assert info.value.code == 2
        assert "give --cron or --every" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*argv, "--max-concurrency", "11"])
    assert "11 is not in the range 1<=x<=10" in capsys.readouterr().err
