"""The evaluation steps: shard specs, one shard, and the aggregate with the comparison of the
trained Conductor against the best single worker and MoA."""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError
from conductor_core.evaluate.aggregate import OVERALL
from conductor_core.evaluate.config import parse_eval_config
from conductor_core.evaluate.mlflow_logging import log_evaluation
from conductor_core.evaluate.records import read_record_sources
from conductor_core.evaluate.report import aggregate_report
from conductor_core.evaluate.shard_job import run_shard
from conductor_core.pipeline_steps.context import (
    TRAINING_PIPELINE,
    Log,
    parent_run,
    pool_path,
    print_line,
)
from conductor_core.pipeline_steps.manifest import local_weights, read_manifest
from conductor_core.pipeline_steps.params import profile_placement
from conductor_core.track.registry import resolve_model_uri
from conductor_core.workers.bundled import bundled_train_problems_path

CONDUCTOR_METHOD = "conductor"
"""The trained Conductor's method name in records, reports and MLflow."""


def shard_specs(count: int) -> list[str]:
    """The shard specs ``["0/N", ..., "N-1/N"]`` of an evaluation split into ``count`` shards."""
    if count < 1:
        raise ConfigError(f"eval_shards: {count}; give at least 1")
    return [f"{i}/{count}" for i in range(count)]


def eval_shard_step(
    *,
    shard: str,
    out_dir: str | Path,
    benchmark: str,
    split: str | None = None,
    model_manifest: str | Path | None = None,
    conductor: str | None = None,
    baselines: Sequence[str] | str = (),
    pool: str | None = None,
    repeats: int = 1,
    rounds: int = 1,
    limit: int | None = None,
    log: Log = print_line,
) -> dict[str, Any]:
    """Evaluate one shard: the trained Conductor (``model_manifest``) or another plan source
    (``conductor``: a model URI, folder or URL), and the baselines; records and the shard's
    report go to ``out_dir``. Resumable (the records file is the checkpoint)."""
    source = conductor
    if model_manifest:
        source = str(local_weights(read_manifest(model_manifest)))
    config = parse_eval_config(
        {
            "benchmark": _benchmark_path(benchmark),
            "split": split,
            "limit": limit,
            "pool": pool_path(pool),
            "conductor": source or "scripted",
            "conductor_name": CONDUCTOR_METHOD if source else None,
            "evaluate_conductor": bool(source),
            "baselines": baselines,
            "repeats": repeats,
            "rounds": rounds,
            "shard": shard,
            "output_dir": str(out_dir),
        },
        origin="evaluation step",
    )
    result = run_shard(config, progress=False, log=log)
    log(f"shard {shard}: {result.problems} problems, {result.new_records} new records")
    return result.to_dict()


def _benchmark_path(benchmark: str) -> str:
    """``held-out`` names the bundled training problems file (its ``test`` split is held out)."""
    if benchmark == "held-out":
        return str(bundled_train_problems_path())
    return benchmark


def aggregate_step(
    shard_dirs: Sequence[str | Path],
    out_dir: str | Path,
    *,
    title: str = "Evaluation",
    run_id: str = "",
    pipeline: str = TRAINING_PIPELINE,
    tracking_uri: str | None = None,
    params: dict[str, Any] | None = None,
    log: Log = print_line,
) -> dict[str, Any]:
    """Merge the records of every shard folder (a record repeated across or within shards counts
    once: :func:`~conductor_core.evaluate.report.aggregate_report`), write the report (Markdown,
    HTML, ``summary.json``, plots) into ``out_dir``, and return the comparison
    (:func:`comparison`) with the overall figures per method, the report's paths and the number
    of records aggregated. With a ``run_id`` the evaluation goes to the pipeline run's ``evaluate``
    run, with one nested run per method (the same metric names in each, for MLflow's compare
    view); ``params`` (pool, profile, model version, ...) go on each."""
    report = aggregate_report(read_record_sources(shard_dirs), out_dir, title=title)
    table = comparison(report.summary)
    (Path(out_dir) / "comparison.json").write_text(json.dumps(table, indent=2) + "\n")
    parent = parent_run(run_id, pipeline, tracking_uri)
    if parent is not None:
        log_evaluation(
            report.summary,
            report.records,
            report.paths,
            params=params,
            method_params={
                m: {"kind": "conductor" if m == CONDUCTOR_METHOD else "baseline"}
                for m in report.summary.methods
            },
            parent_run_id=parent,
            stage="evaluate",
            tracking_uri=tracking_uri,
        )
    log(
        f"aggregated {len(report.records)} records of {len(shard_dirs)} shard(s): "
        f"{report.paths['markdown']}"
    )
    return {"comparison": table, "paths": report.paths, "records": len(report.records)}


def comparison(summary: Any) -> dict[str, Any]:
    """The Conductor against the best single worker and MoA (overall figures).

    Returns ``{"rows": [{"method", "label", "accuracy", "stderr", "calls_per_question",
    "cost_per_question", "tokens_per_question"}, ...], "conductor_ahead": bool | None}``;
    ``conductor_ahead`` compares the Conductor's accuracy with the best single worker's.
    """
    overall = {m: summary.get(m, OVERALL) for m in summary.methods}
    singles = [m for m in overall if m.startswith("single:")]
    best_single = max(singles, key=lambda m: overall[m].accuracy) if singles else None
    moa = next((m for m in overall if m.startswith("moa")), None)
    conductor = next((m for m in overall if m == CONDUCTOR_METHOD), None) or next(
        (m for m in overall if m.startswith("conductor")), None
    )
    rows = []
    single_label = f"best single worker ({best_single.split(':', 1)[1]})" if best_single else ""
    for method, label in (
        (conductor, "trained Conductor"),
        (best_single, single_label),
        (moa, "mixture of agents"),
    ):
        if method is None:
            continue
        s = overall[method]
        rows.append(
            {
                "method": method,
                "label": label,
                "accuracy": s.accuracy,
                "stderr": s.stderr,
                "calls_per_question": s.calls_per_question,
                "cost_per_question": s.cost_per_question,
                "tokens_per_question": s.tokens_per_question,
            }
        )
    ahead = None
    if conductor and best_single:
        ahead = overall[conductor].accuracy > overall[best_single].accuracy
    return {"rows": rows, "conductor_ahead": ahead}


_IMAGE_LINK = re.compile(r"!\[(?P<alt>[^\]]*)\]\((?P<target>[^)\s]+)\)")
_IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml", ".jpg": "image/jpeg"}


def inline_images(markdown: str, folder: str | Path) -> str:
    """``markdown`` with every image link to a file in ``folder`` (``![alt](plot.png)``) made
    an inline ``data:`` URI. The Kubeflow UI shows a Markdown artifact on its own, where a link
    relative to the report's folder points nowhere; links to anything else stay as they are."""

    def embed(m: re.Match[str]) -> str:
        target = m["target"]
        path = Path(folder) / target
        kind = _IMAGE_TYPES.get(path.suffix.lower())
        if kind is None or "://" in target or target.startswith("data:") or not path.is_file():
            return m[0]
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f"![{m['alt']}](data:{kind};base64,{data})"

    return _IMAGE_LINK.sub(embed, markdown)


def summary_markdown(result: dict[str, Any]) -> str:
    """The Markdown artifact of an aggregate (:func:`aggregate_step`'s result): the comparison
    table, then the whole report with its plots inline, so that both render in the UI."""
    report = Path(result["paths"]["markdown"])
    body = inline_images(report.read_text(encoding="utf-8"), report.parent)
    return comparison_markdown(result["comparison"]) + "\n" + body


def resolve_conductor_step(
    conductor: str, *, tracking_uri: str | None = None, log: Log = print_line
) -> str:
    """The Conductor an evaluation evaluates, made concrete: a registry alias
    (``models:/NAME@ALIAS``) becomes the version it points at now (``models:/NAME/VERSION``);
    anything else is returned as it is. The evaluation pipeline runs this uncached, before its
    cached shards, so that a moved alias is evaluated afresh rather than answered from cache."""
    resolved = resolve_model_uri(conductor, tracking_uri=tracking_uri) if conductor else ""
    if resolved != conductor:
        log(f"{conductor} is {resolved}")
    return resolved


def evaluation_target(
    conductor: str, profile: str, *, tracking_uri: str | None = None, log: Log = print_line
) -> tuple[str, str]:
    """What the evaluation pipeline evaluates and where: the Conductor made concrete
    (:func:`resolve_conductor_step`) and the placement of the profile its model was trained
    with (``cpu`` or ``gpu``: :func:`~conductor_core.pipeline_steps.params.profile_placement`),
    so that a GPU profile's model is evaluated on GPU pods, as the training pipeline does."""
    placement = profile_placement(profile)  # an unknown profile stops before the registry
    return resolve_conductor_step(conductor, tracking_uri=tracking_uri, log=log), placement


def comparison_markdown(table: dict[str, Any]) -> str:
    """The comparison as a Markdown table."""
    lines = [
        "| method | accuracy | calls / question | cost / question (USD) |",
        "|---|---|---|---|",
    ]
    for r in table["rows"]:
        lines.append(
            f"| {r['label']} | {100 * r['accuracy']:.1f}% ± {100 * r['stderr']:.1f} | "
            f"{r['calls_per_question']:.2f} | {r['cost_per_question']:.5f} |"
        )
    return "\n".join(lines) + "\n"
