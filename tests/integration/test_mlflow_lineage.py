"""MLflow lineage on a real MLflow server (SQLite store, artifacts in moto S3): a pipeline's tiny
base stage logs the curated dataset it trains on as a dataset input (source and a content digest,
the same in a second run) and system metrics; the register step registers the model with an
input example and tags the version with the git commit, the KFP run id, the training profile and
the dataset's digest."""

from __future__ import annotations

import json
import uuid

import pytest

pytestmark = pytest.mark.slow

SMALL = {
    "questions_per_step": 4,
    "plans_per_question": 2,
    "model": {"tiny": {"hidden": 64, "heads": 2, "kv_heads": 1, "layers": 1, "vocab": 400}},
    "generation": {"max_completion_length": 24},
    "warmup": {"enabled": False},
    "data": {"max_problems": 12},
    "tracking": {"log_model": False},
}


def _dataset(folder, problems):
    """A curated dataset folder (``train.parquet``) holding ``problems``."""
    from conductor_core.tasks.problem import write_parquet

    folder.mkdir(parents=True)
    write_parquet(problems, folder / "train.parquet")
    return folder


def test_training_and_registration_lineage(mlflow_env, tmp_path, monkeypatch):
    from mlflow import MlflowClient
    from mlflow.models import Model

    from conductor_core.pipeline_steps.register_step import register_step
    from conductor_core.pipeline_steps.train_steps import train_step
    from conductor_core.tasks.problem import read_problems
    from conductor_core.workers.bundled import bundled_train_problems_path

    monkeypatch.setenv("CONDUCTOR_GIT_COMMIT", "0123abc")
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.5")
    problems = [
        p for p in read_problems(bundled_train_problems_path()) if p.metadata["split"] == "train"
    ][:40]
    kfp_run_id = f"lineage-{uuid.uuid4().hex[:8]}"

    def train(run_id, dataset):
        return train_step(
            stage="base",
            profile="tiny",
            dataset_dir=str(dataset),
            run_id=run_id,
            manifest_path=str(tmp_path / f"{run_id}.json"),
            steps=1,
            root=str(tmp_path / "runs"),
            tracking_uri=mlflow_env.uri,
            overrides=SMALL,
            log=lambda _: None,
        )

    manifest = train(kfp_run_id, _dataset(tmp_path / "a" / "dataset", problems))
    # the same problems curated again, written elsewhere: the same digest
    again = train(f"{kfp_run_id}-2", _dataset(tmp_path / "b" / "dataset", problems))
    assert manifest.dataset_digest and manifest.dataset_digest == again.dataset_digest
    assert manifest.profile == "tiny"

    client = MlflowClient(mlflow_env.uri)
    run = client.get_run(manifest.run_id)
    assert run.data.tags["conductor.stage"] == "base"
    inputs = run.inputs.dataset_inputs
    assert len(inputs) == 1
    dataset = inputs[0].dataset
    assert dataset.digest == manifest.dataset_digest
    assert json.loads(dataset.source)["uri"] == str(tmp_path / "a" / "dataset" / "train.parquet")
    tags = {t.key: t.value for t in inputs[0].tags}
    assert tags["mlflow.data.context"] == "training"
    assert tags["conductor.problems"] == "40"
    # system metrics were sampled while the stage ran, and no monitor is left running
    system = [k for k in run.data.metrics if k.startswith("system/")]
    assert "system/cpu_utilization_percentage" in system, sorted(run.data.metrics)

    # registration: an input example, and the version tagged with its lineage
    (tmp_path / "cmp.json").write_text(
        json.dumps({"rows": [{"label": "trained Conductor", "accuracy": 0.5}]})
    )
    name = f"it-lineage-{kfp_run_id}"
    decision = register_step(
        model_manifest=tmp_path / f"{kfp_run_id}.json",
        comparison_file=tmp_path / "cmp.json",
        name=name,
        tracking_uri=mlflow_env.uri,
        run_id=kfp_run_id,
        log=lambda _: None,
    )
    version = client.get_model_version(name, decision["version"])
    assert version.run_id == manifest.run_id
    assert version.tags["conductor.git_commit"] == "0123abc"
    assert version.tags["conductor.kfp_run_id"] == kfp_run_id
    assert version.tags["conductor.training_profile"] == "tiny"
    assert version.tags["conductor.dataset_digest"] == manifest.dataset_digest
    model = Model.load(f"models:/{name}/{decision['version']}")
    example = model.load_input_example()
    messages = json.loads(example[0])
    assert messages[0]["role"] == "user" and messages[0]["content"].endswith("?")


def test_system_metrics_can_be_turned_off(mlflow_env, tmp_path):
    from mlflow import MlflowClient

    from conductor_core.train.config import build_config
    from conductor_core.train.stage_tracker import make_tracker

    config = build_config(
        {
            "output_dir": str(tmp_path / "out"),
            "tracking": {"tracking_uri": mlflow_env.uri, "system_metrics": False},
        },
        stage="base",
        profile="tiny",
    )
    assert build_config({}, stage="base", profile="tiny").tracking.system_metrics
    tracker = make_tracker(config, resume=False)
    tracker.start()
    tracker.log_metrics({"reward": 1.0}, step=1)
    tracker.finish()
    metrics = MlflowClient(mlflow_env.uri).get_run(tracker.run_id).data.metrics
    assert metrics == {"reward": 1.0}
