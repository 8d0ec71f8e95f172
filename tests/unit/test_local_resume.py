"""The records a local run leaves for ``--resume``, the parameter check of a resumed run, and the
task cache that lets it reuse finished tasks (the whole path, killed and resumed:
tests/integration/test_pipeline_resume.py)."""

from __future__ import annotations

import json

import pytest

from conductor_core.errors import ConfigError
from conductor_pipeline_runner.local_resume import (
    cache_every_task,
    cached_run_dirs,
    check_backend,
    find_record,
    new_record,
    resumed_params,
)


def test_the_newest_run_of_the_pipeline_is_resumed_unless_one_is_named(tmp_path):
    older = new_record(tmp_path, "training", {"profile": "tiny"})
    newer = new_record(tmp_path, "training", {"profile": "small"})
    new_record(tmp_path, "curation", {})
    record = json.loads((tmp_path / "local-runs" / f"{newer.run_id}.json").read_text())
    assert record["params"] == {"profile": "small"}
    assert older.started < newer.started
    assert find_record(tmp_path, "training") == newer
    assert find_record(tmp_path, "training", older.run_id).run_id == older.run_id
    with pytest.raises(ConfigError, match="--resume nope: no local run of training by that id"):
        find_record(tmp_path, "training", "nope")
    with pytest.raises(ConfigError, match="--resume: no local run of evaluation under"):
        find_record(tmp_path, "evaluation")


def test_a_resumed_run_keeps_its_parameters(tmp_path):
    record = new_record(tmp_path, "training", {"profile": "tiny", "base_steps": 3})
    assert resumed_params(record, {}) == {"profile": "tiny", "base_steps": 3}
    assert resumed_params(record, {"base_steps": 3}) == {"profile": "tiny", "base_steps": 3}
    with pytest.raises(ConfigError) as err:
        resumed_params(record, {"base_steps": 5, "seed": 1})
    assert str(err.value) == (
        f"--resume {record.run_id}: a resumed run keeps its parameters; changed: "
        "base_steps=5 (the run had 3), seed=1 (the run had '<its default>')"
    )


def test_every_task_but_the_exit_handler_may_be_reused():
    """Training and registration are uncached on a cluster (side effects); a resumed local run
    must reuse them once finished, and must run the exit handler that closes the run."""
    from kfp.pipeline_spec import pipeline_spec_pb2

    from conductor_pipeline_runner.local import local_settings
    from conductor_pipelines.registry import build

    pipeline = build("training", settings=local_settings())
    exit_strategy = pipeline_spec_pb2.PipelineTaskSpec.TriggerPolicy.ALL_UPSTREAM_TASKS_COMPLETED

    def caching() -> dict[str, bool]:
        spec = pipeline.pipeline_spec
        return {
            name: task.caching_options.enable_cache
            for component in [spec.root, *spec.components.values()]
            for name, task in component.dag.tasks.items()
        }

    assert not caching()["train"]  # as built: uncached
    cache_every_task(pipeline.pipeline_spec)
    after = caching()
    exits = [
        name
        for component in [pipeline.pipeline_spec.root]
        for name, task in component.dag.tasks.items()
        if task.trigger_policy.strategy == exit_strategy
    ]
    assert exits == ["close-run"]
    assert after == {name: name != "close-run" for name in after}


def test_the_reused_outputs_are_found_in_the_folders_the_cache_names(tmp_path):
    record = new_record(tmp_path, "curation", {})
    kfp_root = tmp_path / "kfp"
    dataset = kfp_root / "conductor-curation-1" / "curate" / "dataset"
    dataset.parent.mkdir(parents=True)
    dataset.write_text("rows")
    cache = record.cache_root(tmp_path)
    cache.mkdir(parents=True)
    artifact = {"__kfp_artifact__": True, "uri": str(dataset), "name": "dataset"}
    (cache / "a.json").write_text(json.dumps({"Output": "{}", "dataset": artifact}))
    (cache / "b.json").write_text('{"half written')  # killed while writing: not a finished task
    assert cached_run_dirs(record, tmp_path, kfp_root) == [kfp_root / "conductor-curation-1"]


def test_a_run_resumes_only_on_the_backend_and_services_it_ran_on(tmp_path):
    services = {"mlflow": "http://127.0.0.1:5000", "s3": "http://127.0.0.1:9000"}
    record = new_record(tmp_path, "training", {"profile": "tiny"}, "docker", services)
    assert find_record(tmp_path, "training") == record
    check_backend(record, "docker", dict(services))
    with pytest.raises(ConfigError, match="that run ran with --docker; resume it with --docker"):
        check_backend(record, "local")
    moved = {**services, "s3": "http://127.0.0.1:9001"}
    with pytest.raises(ConfigError) as err:
        check_backend(record, "docker", moved)
    assert "now: s3 'http://127.0.0.1:9001' (the run had 'http://127.0.0.1:9000')" in str(err.value)
    # a record written before backends were recorded is a local run's
    old = {"pipeline": "curation", "run_id": "local-0a", "params": {}, "started": "2026-12-01"}
    (tmp_path / "local-runs" / "local-0a.json").write_text(json.dumps(old))
    check_backend(find_record(tmp_path, "curation"), "local")


def test_a_docker_run_on_its_own_loopback_servers_cannot_be_resumed(tmp_path, monkeypatch):
    """Its S3 (in memory) ended with it: the checkpoints and weights it wrote are gone."""
    from conductor_pipeline_runner.local import run_local

    for key in ("MLFLOW_TRACKING_URI", "AWS_ENDPOINT_URL", "MLFLOW_S3_ENDPOINT_URL"):
        monkeypatch.delenv(key, raising=False)
    with pytest.raises(ConfigError, match="--resume of a --docker run needs the MLflow server"):
        run_local("curation", root=tmp_path, containers=True, resume=True, echo=print)
    assert not (tmp_path / "local-runs").exists()


def test_a_run_without_the_task_cache_cannot_be_resumed(tmp_path):
    """``--no-cache`` keeps no finished task: its record says so, and a resume is refused."""
    from conductor_pipeline_runner.local import run_local

    record = new_record(tmp_path, "curation", {}, caching=False)
    saved = json.loads((tmp_path / "local-runs" / f"{record.run_id}.json").read_text())
    assert saved["caching"] is False and find_record(tmp_path, "curation") == record
    with pytest.raises(ConfigError, match="that run ran with --no-cache, so none of its tasks"):
        check_backend(record, "local")
    check_backend(new_record(tmp_path, "curation", {}), "local")  # the default keeps them
    with pytest.raises(
        ConfigError, match="reuses its finished tasks from the cache: no --no-cache"
    ):
        run_local("curation", root=tmp_path, resume=True, caching=False, echo=print)
