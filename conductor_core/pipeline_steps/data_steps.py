"""The data steps: curate a dataset, and the Great Expectations gate on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conductor_core.data.config import CurationConfig, ExpectationsConfig, load_config
from conductor_core.data.curation import curate
from conductor_core.data.expectations import validate
from conductor_core.data.report import render_html, render_markdown
from conductor_core.errors import ConductorError, ConfigError
from conductor_core.pipeline_steps.context import TRAINING_PIPELINE, Log, log_stage, print_line
from conductor_core.tasks.problem import read_problems


def curate_step(
    config: str,
    out_dir: str | Path,
    *,
    run_id: str = "",
    pipeline: str = TRAINING_PIPELINE,
    tracking_uri: str | None = None,
    log: Log = print_line,
) -> dict[str, Any]:
    """Curate a dataset (``config``: a curation YAML or a bundled name such as ``pipeline``)
    into ``out_dir``; returns the curation stats. Raises on a failed expectation (nothing is
    written). With a ``run_id`` the counts go to the ``curate`` run of the pipeline run."""
    result = curate(load_config(config), out_dir=out_dir, progress=False)
    stats = result.stats
    log(
        f"curated {stats['final']['total']} problems: train {stats['train']['total']}, "
        f"validation {stats['validation']['total']}, by domain {stats['final']['by_domain']}"
    )
    log_stage(
        run_id,
        pipeline,
        "curate",
        params={"curation_config": config},
        metrics={
            "problems": stats["final"]["total"],
            "train": stats["train"]["total"],
            "validation": stats["validation"]["total"],
            **{f"removed/{k}": v["removed"] for k, v in stats["filters"].items()},
        },
        artifacts=[result.stats_path, result.report_md],
        tracking_uri=tracking_uri,
    )
    return stats


def validate_step(
    dataset_dir: str | Path,
    report_html: str | Path,
    report_md: str | Path,
    *,
    run_id: str = "",
    pipeline: str = TRAINING_PIPELINE,
    tracking_uri: str | None = None,
    log: Log = print_line,
    raise_on_failure: bool = True,
) -> dict[str, Any]:
    """The Great Expectations gate on a curated dataset folder (``train.parquet``,
    ``validation.parquet`` and the ``config.yaml`` whose ``expectations`` apply). Writes the
    reports either way, then raises :class:`ConductorError` when an expectation fails, or with
    ``raise_on_failure`` False returns the verdict for :func:`gate_step` to act on (a KFP task
    that fails uploads none of its outputs, so the pipeline's validate task succeeds with its
    report and the gate task after it fails).

    Returns ``{"problems", "checks", "passed", "reason"}``; ``reason`` is the one line a failed
    gate raises (empty when the data passed)."""
    folder = Path(dataset_dir)
    missing = [n for n in ("train.parquet", "validation.parquet") if not (folder / n).is_file()]
    if missing:
        raise ConfigError(f"dataset {folder}: missing {', '.join(missing)} (not a curated dataset)")
    expectations = None
    if (folder / "config.yaml").is_file():
        import yaml

        data = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8")) or {}
        expectations = CurationConfig.model_validate(data).expectations
    if expectations is None:
        expectations = ExpectationsConfig()
    problems = read_problems(folder / "train.parquet") + read_problems(
        folder / "validation.parquet"
    )
    outcome = validate(problems, expectations)
    title = f"Data validation: {folder.name}"
    for path, text in (
        (report_html, render_html(outcome, title=title)),
        (report_md, render_markdown(outcome, title=title)),
    ):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    log(outcome.summary())
    log_stage(
        run_id,
        pipeline,
        "validate",
        metrics={
            "problems": len(problems),
            "checks": len(outcome.checks),
            "failing": len(outcome.failing),
        },
        artifacts=[report_md],
        tracking_uri=tracking_uri,
    )
    reason = ""
    if not outcome.success:
        failing = ", ".join(f"[{c.suite}] {c.label}" for c in outcome.failing)
        reason = (
            f"dataset {folder.name} failed {len(outcome.failing)} expectation(s): {failing}; "
            "the data gate's report has the failing examples"
        )
        if raise_on_failure:
            raise ConductorError(f"{reason} ({report_md})")
    return {
        "problems": len(problems),
        "passed": outcome.success,
        "checks": len(outcome.checks),
        "reason": reason,
    }


def gate_step(passed: bool, reason: str = "", *, log: Log = print_line) -> None:
    """Stop the run when a check before it failed: raises :class:`ConductorError` with
    ``reason`` (one line) unless ``passed``."""
    if not passed:
        raise ConductorError(reason or "the check before this gate failed")
    log("gate passed")
