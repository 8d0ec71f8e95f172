"""Typed configuration of one evaluation shard (YAML in and out).

Precedence, lowest first: the class defaults (those of ``conductor eval run``), the YAML file, then
overrides (the command-line options that were given). Every error names the field. Relative paths
(``benchmark`` file, ``path``, ``pool``, ``problems``, ``output_dir``) are relative to the working
directory of the run, so the ``config-IofN.yaml`` a run writes beside its records runs again as is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from conductor_core.configfiles import deep_merge, read_yaml_file
from conductor_core.errors import ConfigError, format_validation_error
from conductor_core.track.pipeline_runs import PIPELINE_EXPERIMENT


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ShardSpec(_Strict):
    """Which shard to run: problems are assigned to ``count`` shards by a hash of their id.

    YAML accepts ``{index: 0, count: 8}`` or the command line's ``"0/8"``.
    """

    index: int = Field(default=0, ge=0, description="0-based shard number.")
    count: int = Field(default=1, ge=1, description="Number of shards.")

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, data: Any) -> Any:
        if isinstance(data, str):
            index, _, count = data.partition("/")
            try:
                return {"index": int(index), "count": int(count)}
            except ValueError:
                raise ValueError(
                    f"expected 'i/n' (e.g. 0/4) or {{index, count}}, got {data!r}"
                ) from None
        return data

    @model_validator(mode="after")
    def _in_range(self) -> ShardSpec:
        if self.index >= self.count:
            raise ValueError(f"index ({self.index}) must be below count ({self.count})")
        return self

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def tag(self) -> str:
        """``IofN``, as in the names of the shard's files."""
        return f"{self.index}of{self.count}"


EXPERIMENT = "conductor-eval"
"""The MLflow experiment of an evaluation run on its own (``conductor eval run --mlflow``); under
a pipeline an evaluation logs into the pipeline's run instead."""

EVALUATION_EXPERIMENTS = (EXPERIMENT, PIPELINE_EXPERIMENT)
"""The experiments that hold evaluations: those run on their own (:data:`EXPERIMENT`) and those
of the pipelines (under each pipeline run, in
:data:`~conductor_core.track.pipeline_runs.PIPELINE_EXPERIMENT`). ``conductor eval compare``
without a run or an experiment reads these."""


class MlflowSpec(_Strict):
    """Logging to MLflow (tracking URI: ``$MLFLOW_TRACKING_URI``, else a local SQLite store)."""

    enabled: bool = Field(
        default=False, description="Log figures, reports and sampled traces to MLflow."
    )
    experiment: str = Field(default=EXPERIMENT, description="MLflow experiment name.")
    run_name: str | None = Field(
        default=None,
        description="MLflow run name (default: <benchmark>-<setting>-shard<I>of<N>).",
    )
    trace_sample: int = Field(
        default=20, ge=0, description="Workflows logged as MLflow traces (a seeded sample)."
    )


class EvalConfig(_Strict):
    """One evaluation shard: problems, pool, methods, repeats and where the results go."""

    benchmark: str = Field(
        description="'demo' (the bundled slice), a benchmark name (see `conductor tasks list`), "
        "or a Problem .jsonl/.parquet file."
    )
    path: str | None = Field(
        default=None, description="Local copy of the benchmark data (in the published schema)."
    )
    split: str | None = Field(
        default=None,
        description="Benchmark split; for `demo` and Problem files, the `metadata.split` to keep "
        "(a problem without one counts as `test`; demo's default is `test`).",
    )
    limit: int | None = Field(default=None, ge=1, description="First N problems only.")
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Options of the benchmark loader, e.g. {version: v5} for LiveCodeBench.",
    )
    pool: str | None = Field(
        default=None, description="Worker pool YAML (null: the bundled simulated pool)."
    )
    problems: str | None = Field(
        default=None,
        description="Problem file the simulated workers know instead of their pool's "
        "simulation.problems (the shard's own problems are always added).",
    )
    setting: str | None = Field(
        default=None,
        description="Generation profile of the pool's workers (profiles:), e.g. constrained.",
    )
    conductor: str = Field(
        default="scripted",
        description="Plan source: 'scripted', 'tiny', 'smollm2-135m-instruct' (the bundled "
        "pretrained SmolLM2-135M-Instruct, offline), a model directory, or an OpenAI-compatible "
        "URL serving the Conductor.",
    )
    conductor_name: str | None = Field(
        default=None,
        description="The Conductor's method name in records and reports (null: "
        "`conductor:<conductor>`).",
    )
    conductor_model: str | None = Field(
        default=None, description="Model name at a Conductor URL (null: the only one served)."
    )
    conductor_key_env: str | None = Field(
        default=None,
        description="NAME of the environment variable holding the Conductor endpoint's key.",
    )
    plan_grammar: bool = Field(
        default=True,
        description="A local model Conductor ('tiny', a model directory, models:/...) decodes "
        "under the plan grammar, so every plan it finishes parses (false: it writes unaided, "
        "what it learned). No effect on 'scripted' or a URL.",
    )
    conductor_temperature: float | None = Field(
        default=None,
        ge=0,
        description="Sampling temperature of a learned Conductor (a local model or a URL); 0: "
        "greedy. null: 1.0, as GRPO sampled it in training. No effect on 'scripted'.",
    )
    conductor_max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Most tokens a learned Conductor writes for a plan (null: the plan length a "
        "model folder was trained with, else 1024). No effect on 'scripted'.",
    )
    evaluate_conductor: bool = Field(
        default=True, description="Evaluate the Conductor (false: the baselines only)."
    )
    baselines: list[str] = Field(
        default_factory=list,
        description="Baseline specs: single, single:W, moa[:L[:A]], sc:W[:N], reflect:W[:N], "
        "random[:SEED], frontier:W (a comma-separated string is accepted too).",
    )
    router_encoder: str | None = Field(
        default=None,
        description="Sentence encoder of the router baselines (smoothie, routerdc, masrouter): a "
        "model folder or name; null: $CONDUCTOR_ROUTER_ENCODER, else all-MiniLM-L6-v2. A trained "
        "router uses the encoder it was trained with unless this says otherwise.",
    )
    repeats: int = Field(default=1, ge=1, le=64, description="Runs per problem and method.")
    rounds: int = Field(default=1, ge=1, le=5, description="Most Conductor rounds per question.")
    max_steps: int = Field(default=5, ge=1, le=20, description="Most steps a plan may have.")
    access_mode: Literal["binary", "index"] = Field(
        default="binary", description="How a step's access list is written."
    )
    descriptors: bool = Field(default=False, description="Describe the workers to the Conductor.")
    prompt_style: Literal["full", "compact"] = Field(
        default="full",
        description="How the Conductor is asked: `full` (the paper's prompt with worked examples) "
        "or `compact` (tiny models). A model folder saved by training is always asked the way it "
        "learned, whatever this says; set it for a served Conductor trained on `compact`.",
    )
    seed: int = Field(
        default=0,
        description="Seed of the sample indices: the evaluation stream's seed * 1000003 + "
        "repeat (conductor_core/sample_streams.py).",
    )
    shard: ShardSpec = Field(default_factory=ShardSpec, description="The shard to run.")
    concurrency: int = Field(default=32, ge=1, description="Problems in flight.")
    output_dir: str = Field(
        default="runs/eval", description="Folder of records, reports and the shard's files."
    )
    infra_retries: int = Field(
        default=2, ge=0, description="Retries of an attempt spoiled by infrastructure."
    )
    keep_traces: bool = Field(default=True, description="Keep each attempt's trace in its record.")
    mlflow: MlflowSpec = Field(default_factory=MlflowSpec, description="MLflow logging.")

    @field_validator("baselines", mode="before")
    @classmethod
    def _split_baselines(cls, value: Any) -> Any:
        if value is None:
            return []
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list | tuple):
            return [s.strip() if isinstance(s, str) else s for s in value if s != ""]
        return value

    @field_validator("conductor_key_env")
    @classmethod
    def _key_env_is_a_name(cls, value: str | None) -> str | None:
        if value is not None and not value.replace("_", "").isalnum():
            raise ValueError(
                "must be the NAME of an environment variable (e.g. CONDUCTOR_API_KEY), "
                "not the key itself"
            )
        return value

    @model_validator(mode="after")
    def _something_to_evaluate(self) -> EvalConfig:
        if not self.evaluate_conductor and not self.baselines:
            raise ValueError(
                "nothing to evaluate: set evaluate_conductor or give baselines "
                "(--baselines on the command line)"
            )
        return self

    def output_path(self) -> Path:
        """The output folder."""
        return Path(self.output_dir).expanduser()

    def records_path(self) -> Path:
        """``<output_dir>/records-IofN.jsonl``: the shard's records (and its checkpoint)."""
        return self.output_path() / f"records-{self.shard.tag}.jsonl"

    def run_name(self) -> str:
        """The MLflow run name: ``mlflow.run_name`` or ``<benchmark>-<setting>-shard<I>of<N>``."""
        return (
            self.mlflow.run_name
            or f"{Path(self.benchmark).stem}-{self.setting or 'default'}-shard{self.shard.tag}"
        )

    def to_yaml(self, path: str | Path | None = None) -> str:
        """The config as YAML (round-trips through :func:`load_eval_config`); written to ``path``
        when given."""
        data = self.model_dump(mode="json")
        data["shard"] = str(self.shard)
        text = yaml.safe_dump(data, sort_keys=False)
        if path is not None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            Path(path).write_text(text, encoding="utf-8")
        return text


def parse_eval_config(
    data: dict[str, Any] | None = None,
    *,
    overrides: dict[str, Any] | None = None,
    origin: str = "eval config",
) -> EvalConfig:
    """Validate a config given as a dict, with ``overrides`` merged over it (nested dicts merge).
    One :class:`ConfigError` lists every bad field."""
    if data is not None and not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping of config fields at the top level")
    merged = deep_merge(data or {}, overrides or {})
    try:
        return EvalConfig.model_validate(merged)
    except ValidationError as exc:
        raise ConfigError(f"{origin}: {format_validation_error(exc)}") from exc


def load_eval_config(path: str | Path, overrides: dict[str, Any] | None = None) -> EvalConfig:
    """Load an evaluation config YAML file; ``overrides`` (e.g. command-line options) win."""
    missing = f"--config: file not found: {path} (give an evaluation YAML file)"
    data = read_yaml_file(path, missing)
    return parse_eval_config(data, overrides=overrides, origin=str(path))
