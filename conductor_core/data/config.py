"""Typed curation configuration (YAML in and out).

Relative paths inside a config file (problem files, benchmark data paths, the pool YAML, the output
folder) are resolved against the folder of the config file by :func:`load_config`, so a config and
its fixtures can move together. ``conductor curate --config example`` loads the bundled example.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from conductor_core.configfiles import read_yaml_file
from conductor_core.errors import ConfigError, format_validation_error
from conductor_core.tasks.sources.local import expand_env

EXAMPLE_NAME = "example"
"""``--config example`` means the bundled example config."""

EXAMPLE_OUTPUT = "curated-example"
"""Output folder of the bundled example, relative to the current directory."""


class SourceSpec(BaseModel):
    """One input: a benchmark name for ``load_benchmark`` or a Problem JSONL/Parquet file.

    ``quota`` asks for exactly that many problems of this source in the mixture (fewer if fewer
    survive the filters); sources without a quota share the rest of the target size in proportion
    to ``weight``.
    """

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", description="Label in stats and mixture (default: derived).")
    benchmark: str | None = Field(default=None, description="A name known to load_benchmark.")
    file: str | None = Field(default=None, description="A Problem .jsonl or .parquet file.")
    path: str | None = Field(default=None, description="Local data for a benchmark (optional).")
    split: str | None = Field(
        default=None,
        description="A benchmark's split; for a problem file, keep only problems whose "
        "`metadata.split` equals it (a problem without one counts as `train`).",
    )
    limit: int | None = Field(default=None, ge=1)
    options: dict[str, Any] = Field(default_factory=dict)
    quota: int | None = Field(default=None, ge=0)
    weight: float = Field(default=1.0, ge=0.0)

    @model_validator(mode="after")
    def _one_kind(self) -> SourceSpec:
        if (self.benchmark is None) == (self.file is None):
            raise ValueError("give exactly one of 'benchmark' (a benchmark name) or 'file'")
        if self.file is not None and self.path is not None:
            raise ValueError("'path' is only for benchmarks; for a problem file use 'file' alone")
        if not self.name:
            self.name = self.benchmark or Path(self.file or "source").stem
        return self


class DedupConfig(BaseModel):
    """Exact and near-duplicate removal (MinHash over word shingles, verified by Jaccard)."""

    model_config = ConfigDict(extra="forbid")

    exact: bool = True
    near: bool = True
    threshold: float = Field(default=0.8, gt=0.0, le=1.0, description="Jaccard similarity.")
    shingle_size: int = Field(default=3, ge=1, description="Words per shingle.")
    num_perm: int = Field(default=128, ge=8, le=1024, description="MinHash permutations.")


class DecontaminationConfig(BaseModel):
    """Remove training problems that share a word n-gram with an evaluation problem."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    n: int = Field(default=13, ge=1, description="Words per n-gram (normalised text).")


class DifficultyConfig(BaseModel):
    """Keep problems whose solve rate on the reference worker(s) is strictly inside (min, max)."""

    model_config = ConfigDict(extra="forbid")

    pool: str = Field(description="Pool YAML path.")
    workers: list[int] = Field(default_factory=lambda: [0], min_length=1)
    samples: int = Field(default=4, ge=1, description="Samples per problem and worker.")
    min_rate: float = Field(default=0.0, ge=0.0, le=1.0)
    max_rate: float = Field(default=1.0, ge=0.0, le=1.0)
    cache_path: str | None = Field(
        default=None, description="Response cache file (default: the pool's, enabled)."
    )
    concurrency: int = Field(default=8, ge=1, description="Problems rated at the same time.")
    subtask: str = "Solve the problem. End with the final answer."

    @model_validator(mode="after")
    def _range(self) -> DifficultyConfig:
        if self.min_rate >= self.max_rate:
            raise ValueError("min_rate must be below max_rate (kept: min_rate < rate < max_rate)")
        return self


class MixtureConfig(BaseModel):
    """Stratified mixture to a target size."""

    model_config = ConfigDict(extra="forbid")

    target_size: int = Field(default=960, ge=1)
    seed: int = 0


class SplitConfig(BaseModel):
    """Train/validation split (stratified by domain)."""

    model_config = ConfigDict(extra="forbid")

    validation_fraction: float = Field(default=0.1, ge=0.0, lt=1.0)
    seed: int = 0


class LengthBounds(BaseModel):
    """Sensible question lengths in characters."""

    model_config = ConfigDict(extra="forbid")

    min: int = Field(default=10, ge=1)
    max: int = Field(default=20000, ge=1)


class ExpectationsConfig(BaseModel):
    """Settings of the Great Expectations gate."""

    model_config = ConfigDict(extra="forbid")

    domains: list[str] = Field(default_factory=lambda: ["math", "mcq", "code", "freeform"])
    question_length: LengthBounds = Field(default_factory=LengthBounds)
    max_examples: int = Field(default=5, ge=1, description="Failing examples listed per check.")


class CurationConfig(BaseModel):
    """The whole curation run."""

    model_config = ConfigDict(extra="forbid")

    name: str = "curation"
    sources: list[SourceSpec] = Field(min_length=1)
    eval_benchmarks: list[SourceSpec] = Field(default_factory=list)
    dedup: DedupConfig = Field(default_factory=DedupConfig)
    decontamination: DecontaminationConfig = Field(default_factory=DecontaminationConfig)
    difficulty: DifficultyConfig | None = None
    mixture: MixtureConfig = Field(default_factory=MixtureConfig)
    split: SplitConfig = Field(default_factory=SplitConfig)
    expectations: ExpectationsConfig = Field(default_factory=ExpectationsConfig)
    output_dir: str = "curated"

    @model_validator(mode="after")
    def _unique_names(self) -> CurationConfig:
        names = [s.name for s in self.sources]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"source names must be unique, repeated: {dup} (set 'name' on each)")
        return self

    def to_yaml(self) -> str:
        """The config as YAML (round-trips through :func:`parse_config`)."""
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def bundled_config_path(name: str) -> Path | None:
    """The bundled curation config called ``name`` (``example``, ``pipeline``), or None."""
    path = Path(__file__).resolve().parent.parent / "resources" / "curation" / f"{name}.yaml"
    return path if name.replace("-", "_").isidentifier() and path.is_file() else None


def example_config_path() -> Path:
    """The bundled example config (uses bundled fixture problem files)."""
    path = bundled_config_path(EXAMPLE_NAME)
    assert path is not None
    return path


def load_config(path: str | Path) -> CurationConfig:
    """Load a curation config: a YAML file, or the name of a bundled one (``example``, whose
    output goes to ``./curated-example``; ``pipeline``, the training pipeline's default data).
    Errors name the field."""
    bundled = bundled_config_path(str(path))
    if bundled is not None and not Path(path).exists():
        config = load_config(bundled)
        # never write into the installed package: a bundled config's output goes to the current
        # folder
        out = EXAMPLE_OUTPUT if str(path) == EXAMPLE_NAME else f"curated-{path}"
        return config.model_copy(update={"output_dir": str(Path(out).resolve())})
    path = Path(path)
    missing = (
        f"curation config not found: {path} (give a YAML file, or the name of a bundled one: "
        "'example', 'pipeline', 'paper-train', 'paper-recursion')"
    )
    config = parse_config(read_yaml_file(path, missing), origin=str(path))
    return resolve_paths(config, path.resolve().parent)


def parse_config(data: Any, origin: str = "curation config") -> CurationConfig:
    """Validate a config given as a dict; one message lists every bad field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping with a 'sources' list")
    try:
        return CurationConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {format_validation_error(exc)}") from exc


def resolve_paths(config: CurationConfig, base: Path) -> CurationConfig:
    """A copy whose relative paths are made absolute against ``base``."""

    def fix(p: str | None) -> str | None:
        if p is None:
            return None

        q = Path(expand_env(p)).expanduser()
        return str(q if q.is_absolute() else (base / q).resolve())

    def fix_source(s: SourceSpec) -> SourceSpec:
        return s.model_copy(update={"file": fix(s.file), "path": fix(s.path)})

    update: dict[str, Any] = {
        "sources": [fix_source(s) for s in config.sources],
        "eval_benchmarks": [fix_source(s) for s in config.eval_benchmarks],
        "output_dir": fix(config.output_dir),
    }
    if config.difficulty is not None:
        update["difficulty"] = config.difficulty.model_copy(
            update={
                "pool": fix(config.difficulty.pool),
                "cache_path": fix(config.difficulty.cache_path),
            }
        )
    return config.model_copy(update=update)
