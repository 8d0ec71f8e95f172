"""``curate(config)``: the whole curation run, with an all-or-nothing output folder.

Output folder ``DIR`` (on success only)::

    DIR/train.parquet        DIR/validation.parquet     (tasks.problem.write_parquet)
    DIR/report.md            DIR/report.html            (the Great Expectations gate, readable)
    DIR/stats.json           DIR/config.yaml            (counts, removals; the resolved config)

Everything is written into a temporary folder beside ``DIR`` and renamed into place only when the
gate passed, so ``DIR`` is never half-written: a previous ``DIR`` stays as it was until the new one
is complete. When an expectation fails, nothing is written to ``DIR``; the report of the failure
goes beside it as ``DIR.failed-report.md`` and ``DIR.failed-report.html`` (removed again by the next
successful run), and :class:`CurationFailed` is raised.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from conductor_core.data.config import CurationConfig, load_config
from conductor_core.data.difficulty import difficulty_filter
from conductor_core.data.expectations import ValidationOutcome, validate
from conductor_core.data.mixture import mix, split
from conductor_core.data.records import Removal, difficulty_of, source_of
from conductor_core.data.report import render_html, render_markdown
from conductor_core.data.steps import decontaminate, deduplicate, load_sources, normalise
from conductor_core.errors import ConductorError, ConfigError
from conductor_core.tasks.problem import Problem, write_parquet
from conductor_core.tasks.sources.local import check_local_copies

STAT_EXAMPLES = 5
"""Removed ids listed per filter in stats.json."""


class CurationFailed(ConductorError):
    """The Great Expectations gate failed; nothing was written to the output folder."""

    def __init__(self, outcome: ValidationOutcome, report_md: Path, report_html: Path) -> None:
        super().__init__(
            f"curated data failed {len(outcome.failing)} expectation(s); "
            f"report: {report_md}\n{outcome.summary()}"
        )
        self.outcome = outcome
        self.report_md = report_md
        self.report_html = report_html


@dataclass
class CurationResult:
    """Paths written by a successful run, and its stats."""

    out_dir: Path
    train_path: Path
    validation_path: Path
    report_md: Path
    report_html: Path
    stats_path: Path
    stats: dict[str, Any]
    outcome: ValidationOutcome


def failed_report_paths(out_dir: str | Path) -> tuple[Path, Path]:
    """Where the report of a failed run goes: beside ``out_dir``, never inside it."""
    out = Path(out_dir)
    return (
        out.parent / f"{out.name}.failed-report.md",
        out.parent / f"{out.name}.failed-report.html",
    )


def counts(problems: Iterable[Problem]) -> dict[str, Any]:
    """Counts per source, domain and difficulty."""
    items = list(problems)
    return {
        "total": len(items),
        "by_source": dict(sorted(Counter(source_of(p) for p in items).items())),
        "by_domain": dict(sorted(Counter(p.domain.value for p in items).items())),
        "by_difficulty": dict(sorted(Counter(difficulty_of(p) for p in items).items())),
    }


def removal_stats(removed: Sequence[Removal]) -> dict[str, Any]:
    """How many a filter removed, with a few example ids and reasons."""
    return {
        "removed": len(removed),
        "examples": [r.model_dump() for r in removed[:STAT_EXAMPLES]],
    }


def curate(
    config: CurationConfig | str | Path,
    *,
    out_dir: str | Path | None = None,
    progress: bool = True,
    pool: object | None = None,
) -> CurationResult:
    """Run every step and write the output folder (see the module docstring).

    ``config`` is a config object or a YAML path (``"example"`` for the bundled one); ``out_dir``
    overrides ``config.output_dir``; ``pool`` injects a worker pool for the difficulty filter.
    Raises :class:`CurationFailed` when an expectation fails.
    """
    if not isinstance(config, CurationConfig):
        config = load_config(config)
    out = Path(out_dir if out_dir is not None else config.output_dir).resolve()
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output_dir: {out} exists and is not a folder; choose another path")

    config = _local_copies(config)
    problems = load_sources(config.sources)
    stats: dict[str, Any] = {"name": config.name, "loaded": counts(problems), "filters": {}}
    filters = stats["filters"]

    problems, removed = normalise(problems)
    filters["normalise"] = removal_stats(removed)

    problems, removed = deduplicate(problems, config.dedup)
    exact = [r for r in removed if r.reason.startswith("exact")]
    near = [r for r in removed if not r.reason.startswith("exact")]
    filters["dedup_exact"] = removal_stats(exact)
    filters["dedup_near"] = removal_stats(near)

    eval_problems = (
        normalise(load_sources(config.eval_benchmarks)).kept if config.eval_benchmarks else []
    )
    problems, removed = decontaminate(problems, eval_problems, config.decontamination)
    filters["decontaminate"] = {**removal_stats(removed), "eval_problems": len(eval_problems)}

    if config.difficulty is not None:
        problems, removed = difficulty_filter(
            problems, config.difficulty, pool=pool, progress=progress
        )
        filters["difficulty"] = removal_stats(removed)

    problems, removed = mix(problems, config.mixture, config.sources)
    filters["mixture"] = removal_stats(removed)
    stats["target_size"] = config.mixture.target_size
    stats["short_by"] = max(0, config.mixture.target_size - len(problems))

    train, validation = split(problems, config.split)
    stats["final"] = counts([*train, *validation])
    stats["train"] = counts(train)
    stats["validation"] = counts(validation)

    outcome = validate([*train, *validation], config.expectations)
    stats["validation_passed"] = outcome.success
    title = f"Curation report: {config.name}"
    if not outcome.success:
        md_path, html_path = failed_report_paths(out)
        md_path.parent.mkdir(parents=True, exist_ok=True)
        _write_text(md_path, render_markdown(outcome, title=title, stats=stats))
        _write_text(html_path, render_html(outcome, title=title, stats=stats))
        raise CurationFailed(outcome, md_path, html_path)

    _publish(out, config, train, validation, outcome, stats, title)
    for stale in failed_report_paths(out):
        stale.unlink(missing_ok=True)
    return CurationResult(
        out_dir=out,
        train_path=out / "train.parquet",
        validation_path=out / "validation.parquet",
        report_md=out / "report.md",
        report_html=out / "report.html",
        stats_path=out / "stats.json",
        stats=stats,
        outcome=outcome,
    )


def _local_copies(config: CurationConfig) -> CurationConfig:
    """Benchmark sources whose local ``path`` is missing load from the hub when it is reachable;
    when it is not, one error names every missing source (see tasks.sources.local)."""
    specs = [*config.sources, *config.eval_benchmarks]
    hub = check_local_copies(
        [(s.name, s.path) for s in specs if s.benchmark is not None], what=config.name
    )
    if not hub:
        return config

    def fix(s):
        return s.model_copy(update={"path": None}) if s.name in hub and s.benchmark else s

    return config.model_copy(
        update={
            "sources": [fix(s) for s in config.sources],
            "eval_benchmarks": [fix(s) for s in config.eval_benchmarks],
        }
    )


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def _publish(
    out: Path,
    config: CurationConfig,
    train: list[Problem],
    validation: list[Problem],
    outcome: ValidationOutcome,
    stats: dict[str, Any],
    title: str,
) -> None:
    """Write everything into a temp folder beside ``out``, then swap it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = uuid.uuid4().hex[:8]
    tmp = out.parent / f".{out.name}.tmp-{tag}"
    old = out.parent / f".{out.name}.old-{tag}"
    try:
        tmp.mkdir()
        write_parquet(train, tmp / "train.parquet")
        write_parquet(validation, tmp / "validation.parquet")
        (tmp / "report.md").write_text(render_markdown(outcome, title=title), encoding="utf-8")
        (tmp / "report.html").write_text(render_html(outcome, title=title), encoding="utf-8")
        (tmp / "stats.json").write_text(json.dumps(stats, indent=2) + "\n", encoding="utf-8")
        (tmp / "config.yaml").write_text(config.to_yaml(), encoding="utf-8")
        if out.exists():
            out.rename(old)
        tmp.rename(out)
    except BaseException:
        if old.exists() and not out.exists():
            old.rename(out)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
