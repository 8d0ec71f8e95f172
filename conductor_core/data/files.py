"""Path-in, path-out wrappers of the curation steps, for pipeline components.

A component reads a problem file (JSONL or Parquet, by extension), runs one step with the settings
of a curation config and writes the result; what the step removed comes back as a small dict
(``{"removed": n, "examples": [...]}``) that a component can log or pass on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conductor_core.data.config import CurationConfig, load_config
from conductor_core.errors import ConfigError
from conductor_core.tasks.problem import Problem, read_problems, write_jsonl, write_parquet

STEPS = ("normalise", "deduplicate", "decontaminate", "difficulty", "mix")
"""Step names accepted by :func:`run_step_files`."""


def write_problems(problems: list[Problem], path: str | Path) -> int:
    """Write problems by extension: ``.parquet`` as Parquet, anything else as JSONL."""
    if Path(path).suffix.lower() == ".parquet":
        return write_parquet(problems, path)
    return write_jsonl(problems, path)


def _config(config: CurationConfig | str | Path) -> CurationConfig:
    return config if isinstance(config, CurationConfig) else load_config(config)


def run_step_files(
    step: str,
    input_path: str | Path,
    output_path: str | Path,
    config: CurationConfig | str | Path,
    *,
    eval_path: str | Path | None = None,
) -> dict[str, Any]:
    """Run one step on a problem file and write the kept problems to ``output_path``.

    ``decontaminate`` compares against ``eval_path`` when given, else the config's
    ``eval_benchmarks``; ``difficulty`` needs a ``difficulty`` section in the config.
    """
    from conductor_core.data import curation, difficulty, mixture, steps

    if step not in STEPS:
        raise ConfigError(f"step '{step}' is unknown; use one of: {', '.join(STEPS)}")
    cfg = _config(config)
    problems = read_problems(input_path)
    if step == "normalise":
        result = steps.normalise(problems)
    elif step == "deduplicate":
        result = steps.deduplicate(problems, cfg.dedup)
    elif step == "decontaminate":
        evals = (
            read_problems(eval_path)
            if eval_path is not None
            else steps.load_sources(cfg.eval_benchmarks)
            if cfg.eval_benchmarks
            else []
        )
        result = steps.decontaminate(problems, steps.normalise(evals).kept, cfg.decontamination)
    elif step == "difficulty":
        if cfg.difficulty is None:
            raise ConfigError("difficulty: the config has no difficulty section; add one")
        result = difficulty.difficulty_filter(problems, cfg.difficulty, progress=False)
    else:
        result = mixture.mix(problems, cfg.mixture, cfg.sources)
    write_problems(result.kept, output_path)
    return {"step": step, "kept": len(result.kept), **curation.removal_stats(result.removed)}


def split_files(
    input_path: str | Path,
    train_path: str | Path,
    validation_path: str | Path,
    config: CurationConfig | str | Path,
) -> dict[str, int]:
    """Split a problem file into train and validation files; returns both counts."""
    from conductor_core.data.mixture import split

    train, validation = split(read_problems(input_path), _config(config).split)
    write_problems(train, train_path)
    write_problems(validation, validation_path)
    return {"train": len(train), "validation": len(validation)}


def validate_files(
    input_paths: list[str | Path],
    report_md: str | Path,
    report_html: str | Path,
    config: CurationConfig | str | Path,
) -> bool:
    """Run the expectations on the union of problem files, write both reports, return success."""
    from conductor_core.data.expectations import validate
    from conductor_core.data.report import render_html, render_markdown

    cfg = _config(config)
    problems = [p for path in input_paths for p in read_problems(path)]
    outcome = validate(problems, cfg.expectations)
    title = f"Curation report: {cfg.name}"
    for path, text in (
        (report_md, render_markdown(outcome, title=title)),
        (report_html, render_html(outcome, title=title)),
    ):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")
    return outcome.success
