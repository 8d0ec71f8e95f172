"""The training step: one GRPO stage, in this process or as a Kubeflow Trainer TrainJob."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conductor_core.cluster import launcher as trainjob_launcher
from conductor_core.cluster.settings import ClusterSettings, load_cluster_settings
from conductor_core.cluster.trainjob import TrainJobRequest
from conductor_core.configfiles import deep_merge
from conductor_core.errors import ConfigError, format_validation_error
from conductor_core.pipeline_steps.context import (
    TRAINING_PIPELINE,
    Log,
    local_workdir,
    parent_run,
    pool_path,
    print_line,
    run_folder,
)
from conductor_core.pipeline_steps.manifest import ModelManifest, local_weights, read_manifest
from conductor_core.tasks.problem import read_problems
from conductor_core.track.storage import Storage, is_s3, join
from conductor_core.train.config import build_config
from conductor_core.train.data import problems_digest
from conductor_core.train.grpo import run_stage


def train_config(
    *,
    stage: str,
    profile: str,
    dataset_dir: str | Path,
    pool: str,
    output_dir: str | Path,
    init_from: str | None = None,
    steps: int = 0,
    warmup_steps: int = 0,
    expert_start_steps: int = 0,
    seed: int | None = None,
    checkpoint_dir: str | None = None,
    model_uri: str | None = None,
    tracking_uri: str | None = None,
    parent_run_id: str | None = None,
    run_name: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> Any:
    """The :class:`~conductor_core.train.config.StageConfig` of one pipeline training step
    (``steps``, ``warmup_steps``, ``expert_start_steps``: 0 keeps the profile's; ``seed``: None
    keeps the profile's)."""
    dataset = str(dataset_dir)
    problems = (
        str(Path(dataset) / "train.parquet")
        if not is_s3(dataset) and Path(dataset).is_dir()
        else dataset
    )
    data: dict[str, Any] = {
        "output_dir": str(output_dir),
        "data": {"problems": problems, "pool": pool_path(pool)},
        "tracking": {
            "run_name": run_name,
            "tracking_uri": tracking_uri,
            "parent_run_id": parent_run_id,
        },
    }
    for key, value in (
        ("init_from", init_from),
        ("steps", steps),
        ("model_uri", model_uri),
    ):
        if value:
            data[key] = value
    if checkpoint_dir:
        data["checkpoint"] = {"dir": checkpoint_dir}
    if warmup_steps:
        data["warmup"] = {"steps": warmup_steps}
    if expert_start_steps:
        data["expert_start"] = {"steps": expert_start_steps}
    if seed is not None:  # a random tiny model's weights too (ignored for other models)
        data["seed"] = seed
        data["model"] = {"tiny": {"seed": seed}}
    data = deep_merge(data, overrides or {})
    return build_config(data, stage=stage, profile=profile, origin=f"pipeline step {stage}")


def train_step(
    *,
    stage: str,
    profile: str,
    dataset_dir: str | Path,
    run_id: str,
    manifest_path: str | Path,
    pool: str = "bundled",
    init_manifest: str | Path | None = None,
    steps: int = 0,
    warmup_steps: int = 0,
    expert_start_steps: int = 0,
    seed: int | None = None,
    launcher: str = "pod",
    task_id: str = "",
    root: str = "",
    pipeline: str = TRAINING_PIPELINE,
    tracking_uri: str | None = None,
    overrides: dict[str, Any] | None = None,
    progress: bool = False,
    log: Log = print_line,
    cluster_settings: str | dict[str, Any] | None = None,
) -> ModelManifest:
    """Run one GRPO stage and write the model manifest to ``manifest_path``.

    ``launcher="pod"`` trains here: in ``<root>/<run id>/<stage>`` when the root is a folder, or
    in a local work folder with checkpoints and the final model under that ``s3://`` prefix. A
    second call with the same run id resumes from the last checkpoint. ``launcher="trainjob"``
    runs the same stage as a Kubeflow Trainer TrainJob (:mod:`conductor_core.cluster.launcher`)
    and waits for it; it needs an ``s3://`` root, where the job's nodes put the model. The job
    is built from ``cluster_settings`` (JSON text or a mapping: the settings the pipeline was
    compiled with, which the pipeline hands its launcher task), else from
    :func:`~conductor_core.cluster.settings.load_cluster_settings` (the bundled defaults and
    ``$CONDUCTOR_CLUSTER_SETTINGS``).
    """
    if launcher not in ("pod", "trainjob"):
        raise ConfigError(f"launcher: {launcher!r} is not one of pod, trainjob")
    target = run_folder(root, run_id, stage)
    remote = is_s3(target)
    if launcher == "trainjob" and not remote:
        raise ConfigError(
            "launcher=trainjob: the TrainJob's nodes hand the model on through S3; set "
            "artifact_root to an s3:// prefix"
        )
    init = read_manifest(init_manifest) if init_manifest else None
    parent = parent_run(run_id, pipeline, tracking_uri)
    common = {
        "stage": stage,
        "profile": profile,
        "dataset_dir": dataset_dir,
        "pool": pool,
        "steps": steps,
        "warmup_steps": warmup_steps,
        "expert_start_steps": expert_start_steps,
        "seed": seed,
        "tracking_uri": tracking_uri,
        "parent_run_id": parent,
        "run_name": stage,
        "overrides": overrides,
    }
    if launcher == "trainjob":
        settings = _cluster_settings(cluster_settings)
        return _train_in_trainjob(
            common, target, init, run_id, task_id or stage, manifest_path, settings, log
        )
    if remote:
        output_dir: str | Path = local_workdir(run_id, stage)
        checkpoint_dir: str | None = join(target, "checkpoints")
        model_uri: str | None = join(target, "model")
    else:
        output_dir, checkpoint_dir, model_uri = target, None, None
    config = train_config(
        **common,
        output_dir=output_dir,
        init_from=str(local_weights(init)) if init is not None else None,
        checkpoint_dir=checkpoint_dir,
        model_uri=model_uri,
    )

    log(f"{stage}: {config.steps} steps of the {config.profile or 'default'} profile -> {target}")
    result = run_stage(config, progress=progress, log=log)
    manifest = ModelManifest(
        weights_uri=model_uri or str(result.model_dir),
        stage=stage,
        prompt_style=config.data.prompt_style,
        run_id=result.run_id,
        profile=config.profile,
        dataset_digest=result.dataset_digest,
        steps=result.steps,
        seconds=round(result.seconds, 1),
    )
    manifest.write(manifest_path)
    log(f"{stage}: {result.steps} steps in {result.seconds:.0f} s; weights {manifest.weights_uri}")
    return manifest


def _train_in_trainjob(
    common: dict[str, Any],
    target: str,
    init: ModelManifest | None,
    run_id: str,
    task_id: str,
    manifest_path: str | Path,
    settings: Any,
    log: Log,
) -> ModelManifest:
    """Run the stage as a TrainJob (built from the cluster ``settings``) whose nodes read the
    dataset and the starting weights from S3 and write checkpoints and the final model there."""
    # The nodes read the dataset from S3: upload this task's copy next to the stage's outputs.
    digest = _dataset_digest(common["dataset_dir"])
    data_uri = join(target, "data")
    Storage().upload_dir(common["dataset_dir"], data_uri)
    common = {**common, "dataset_dir": join(data_uri, "train.parquet")}
    workdir = settings.gpu.workspace.mount_path if settings.gpu.workspace else "/tmp"
    config = train_config(
        **common,
        output_dir=f"{workdir}/{common['stage']}",
        init_from=init.weights_uri if init is not None else None,
        checkpoint_dir=join(target, "checkpoints"),
        model_uri=join(target, "model"),
    )
    request = TrainJobRequest(
        run_id=run_id, task_id=task_id, stage=config.stage, stage_config=config.to_yaml()
    )
    outcome = trainjob_launcher.launch_and_wait(request, settings, log=log)
    manifest = ModelManifest(
        weights_uri=join(target, "model"),
        stage=config.stage,
        prompt_style=config.data.prompt_style,
        profile=config.profile,
        dataset_digest=digest,
        steps=config.steps,
        seconds=round(outcome.duration_s, 1),
    )
    manifest.write(manifest_path)
    log(f"{config.stage}: TrainJob {outcome.name} {outcome.condition} ({outcome.duration_s:.0f} s)")
    return manifest


def _dataset_digest(dataset_dir: str | Path) -> str | None:
    """The content digest of the dataset's ``train.parquet`` (what the TrainJob's stage run
    records as its dataset input), or None when there is no such local file."""
    path = Path(dataset_dir) / "train.parquet"
    return problems_digest(read_problems(path)) if path.is_file() else None


def _cluster_settings(value: str | dict[str, Any] | None) -> Any:
    """The :class:`~conductor_core.cluster.settings.ClusterSettings` a TrainJob is built from:
    ``value`` (JSON text or a mapping, as the pipeline compiled it) or, without one, the bundled
    defaults with ``$CONDUCTOR_CLUSTER_SETTINGS`` merged over them."""
    import json

    from pydantic import ValidationError

    if not value:
        return load_cluster_settings()
    try:
        data = json.loads(value) if isinstance(value, str) else value
        return ClusterSettings.model_validate(data)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"cluster_settings: not valid JSON ({exc})") from exc
    except ValidationError as exc:
        raise ConfigError(f"cluster_settings: {format_validation_error(exc)}") from exc
