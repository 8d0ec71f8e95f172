"""Worker pool configuration (YAML): an ordered list of workers, id = position.

A worker names the environment variable that holds its key (``api_key_env``), never the key.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from conductor_core.configfiles import read_yaml_file
from conductor_core.errors import ConfigError, format_validation_error

ProviderName = Literal["openai", "anthropic", "gemini", "transformers", "simulated"]

BUNDLED_PROBLEM_SETS = ("bundled", "bundled-train")
"""Special names in ``simulation.problems``: the bundled demo problems and the bundled training
problems (never resolved as paths)."""


class GenerationParams(BaseModel):
    """Sampling parameters sent with every call of a worker."""

    model_config = ConfigDict(extra="forbid")

    max_tokens: int = Field(default=4096, ge=1)
    temperature: float = Field(default=0.2, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    extra: dict[str, Any] = Field(
        default_factory=dict, description="Provider-specific request fields passed through."
    )


class Pricing(BaseModel):
    """Price in dollars per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(default=0.0, ge=0.0)
    output_per_mtok: float = Field(default=0.0, ge=0.0)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Dollar cost of one call."""
        return (input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6


class FailureRates(BaseModel):
    """Injected failure probabilities of a simulated worker (per call)."""

    model_config = ConfigDict(extra="forbid")

    rate_limit: float = Field(default=0.0, ge=0.0, le=1.0)
    server_error: float = Field(default=0.0, ge=0.0, le=1.0)
    timeout: float = Field(default=0.0, ge=0.0, le=1.0)
    malformed: float = Field(default=0.0, ge=0.0, le=1.0)


class WorkflowRules(BaseModel):
    """How a simulated worker behaves in the workflow world
    (:mod:`conductor_core.simulation.workflow_world`).

    Its ``skills`` are then the chances of a right answer at difficulty 1; each level above the
    first takes ``difficulty_drop`` off. A checking step finds a wrong answer it can see with
    ``check_skill`` (and then answers at its own skill) and overturns a right one with
    ``false_alarm``. With ``error_persistence`` a worker answering a part again within one run
    repeats its own answer to it.
    """

    model_config = ConfigDict(extra="forbid")

    difficulty_drop: float = Field(
        default=0.2,
        ge=0.0,
        le=1.0,
        description="Chance of a right answer lost per difficulty level above the first.",
    )
    check_skill: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="Chance that a checking step finds a wrong answer it can see.",
    )
    false_alarm: float = Field(
        default=0.05,
        ge=0.0,
        le=1.0,
        description="Chance that a checking step overturns a right answer it can see.",
    )
    error_persistence: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description=(
            "Chance that the worker, answering a part again within one run of a workflow, "
            "repeats its own first answer to it (right or wrong) instead of drawing afresh; "
            "1: a worker repeats its mistakes, as a real model does, so a check fixes only what "
            "another worker gets right. 0: every answer is a fresh draw."
        ),
    )


class SimulationProfile(BaseModel):
    """Behaviour of a simulated worker.

    ``skills`` maps a domain (``math``, ``mcq``, ``code``, ``freeform``) to the chance of a right
    answer when solving alone; ``verify_skill`` is the chance of ending right when a right answer
    is visible among the earlier steps it may read. ``hedge_when_wrong`` / ``hedge_when_right``
    are the chances that an answer ends with a sentence of doubt: a calibration cue like the one
    real models give (they hedge more often when wrong), which a Conductor can learn to read in
    a recursion round. Latency and output length are drawn from normal distributions (clipped at
    zero). Same seed, same answers. ``problems`` names the problem files whose questions the
    worker knows (other questions get a generic reply).
    """

    model_config = ConfigDict(extra="forbid")

    skills: dict[str, float] = Field(default_factory=lambda: {"math": 0.5, "mcq": 0.5, "code": 0.5})
    default_skill: float = Field(default=0.3, ge=0.0, le=1.0)
    verify_skill: float = Field(default=0.9, ge=0.0, le=1.0)
    hedge_when_wrong: float = Field(default=0.0, ge=0.0, le=1.0)
    hedge_when_right: float = Field(default=0.0, ge=0.0, le=1.0)
    latency_ms: float = Field(default=0.0, ge=0.0)
    latency_jitter_ms: float = Field(default=0.0, ge=0.0)
    output_tokens: int = Field(default=200, ge=1)
    output_tokens_jitter: int = Field(default=50, ge=0)
    failures: FailureRates = Field(default_factory=FailureRates)
    seed: int = 0
    problems: list[str] = Field(
        default_factory=lambda: ["bundled"],
        description="Problem files (JSONL or Parquet) whose questions this simulated worker "
        "knows. Special names: 'bundled' (the bundled demo problems, "
        "conductor_core/resources/problems/demo.jsonl) and 'bundled-train' (the bundled training "
        "problems, conductor_core/resources/train/problems.jsonl). A relative path resolves "
        "against the folder of the pool YAML file it was loaded from, else the working directory.",
    )
    workflow: WorkflowRules | None = Field(
        default=None,
        description="Rules of the workflow world: set, a question of that world (one with "
        "'world' in its metadata) is answered by them (difficulty, checking, parts, subtasks "
        "read); unset, such a question gets the domain world's behaviour of its whole text.",
    )

    @model_validator(mode="after")
    def _check_skills(self) -> SimulationProfile:
        for domain, p in self.skills.items():
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"skills.{domain} must be between 0 and 1, got {p}")
        return self


class WorkerConfig(BaseModel):
    """One worker of the pool."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", description="Display name (never shown to the Conductor).")
    provider: ProviderName
    model: str = Field(min_length=1)
    endpoint: str | None = Field(default=None, description="Base URL (openai provider).")
    api_key_env: str | None = Field(
        default=None, description="NAME of the environment variable that holds the key."
    )
    params: GenerationParams = Field(default_factory=GenerationParams)
    profiles: dict[str, GenerationParams] = Field(
        default_factory=dict,
        description="Named generation profiles (e.g. constrained, unconstrained).",
    )
    price: Pricing = Field(default_factory=Pricing)
    concurrency: int = Field(default=8, ge=1)
    timeout_s: float = Field(default=120.0, gt=0)
    max_retries: int = Field(default=4, ge=0)
    description: str = Field(default="", description="One line for the descriptor-mode prompt.")
    simulation: SimulationProfile | None = None

    @property
    def display_name(self) -> str:
        """Name for logs and traces."""
        return self.name or self.model

    @model_validator(mode="after")
    def _check_provider_fields(self) -> WorkerConfig:
        if self.provider == "openai" and not self.endpoint:
            raise ValueError(
                "endpoint is required for provider 'openai' "
                "(e.g. https://api.openai.com/v1 or http://vllm:8000/v1)"
            )
        if self.api_key_env is not None and not self.api_key_env.replace("_", "").isalnum():
            raise ValueError(
                "api_key_env must be the NAME of an environment variable (e.g. OPENAI_API_KEY), "
                "not the key itself"
            )
        return self


class RetryConfig(BaseModel):
    """Backoff and circuit-breaker settings shared by all workers of a pool."""

    model_config = ConfigDict(extra="forbid")

    backoff_base_s: float = Field(default=0.5, ge=0.0)
    backoff_max_s: float = Field(default=30.0, ge=0.0)
    circuit_failure_threshold: int = Field(default=5, ge=1)
    circuit_reset_s: float = Field(default=30.0, ge=0.0)


class CacheConfig(BaseModel):
    """Opt-in response cache."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    path: str = ".conductor-cache/responses.sqlite"


class PoolConfig(BaseModel):
    """An ordered pool of workers; a worker's id is its position."""

    model_config = ConfigDict(extra="forbid")

    workers: list[WorkerConfig] = Field(min_length=1)
    retry: RetryConfig = Field(default_factory=RetryConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    cost_reference: float | None = Field(
        default=None,
        gt=0,
        description="Typical cost in dollars of answering one question on this pool (for "
        "example the mean, over its workers, of a one-step plan's cost, which `conductor eval "
        "run --baselines single` prints): the unit of the cost-aware training reward "
        "(`reward.cost_weight`; `reward.cost_reference` overrides it). `null`: none given.",
    )
    aggregator: str | None = Field(
        default=None,
        description="Name of the worker that synthesises the answers in the mixture-of-agents "
        "baseline (`moa`; `moa:L:A` picks another). `null`: the last worker. Name the pool's "
        "strongest model: a weak aggregator understates the baseline.",
    )

    @model_validator(mode="after")
    def _aggregator_is_a_worker(self) -> PoolConfig:
        names = [w.name for w in self.workers]
        if self.aggregator is not None and self.aggregator not in names:
            raise ValueError(
                f"aggregator '{self.aggregator}' is not a worker of this pool ({', '.join(names)})"
            )
        return self

    def __len__(self) -> int:
        return len(self.workers)

    def descriptions(self) -> tuple[str, ...]:
        """Each worker's one-line description, by pool id (what descriptor mode shows)."""
        return tuple(w.description for w in self.workers)

    def aggregator_id(self) -> int:
        """The id of the mixture-of-agents aggregator (:attr:`aggregator`, else the last)."""
        names = [w.name for w in self.workers]
        return names.index(self.aggregator) if self.aggregator else len(names) - 1

    def with_profile(self, name: str) -> PoolConfig:
        """A copy in which every worker uses its generation profile ``name`` (if it has one)."""
        workers = [
            w.model_copy(update={"params": w.profiles[name]}) if name in w.profiles else w
            for w in self.workers
        ]
        return self.model_copy(update={"workers": workers})

    def with_simulation_problems(
        self, paths: Sequence[str | Path], *, replace: bool = False
    ) -> PoolConfig:
        """A copy whose simulated workers also know (``replace=True``: only know) the problem
        files ``paths`` (see :attr:`SimulationProfile.problems`; relative paths resolve against
        the working directory now). Other workers are unchanged."""
        added = [_problems_entry(p, Path.cwd()) for p in paths]
        workers = []
        for w in self.workers:
            if w.provider != "simulated":
                workers.append(w)
                continue
            profile = w.simulation or SimulationProfile()
            known = added if replace else [*profile.problems, *added]
            problems = list(dict.fromkeys(known))
            simulation = profile.model_copy(update={"problems": problems})
            workers.append(w.model_copy(update={"simulation": simulation}))
        return self.model_copy(update={"workers": workers})

    def public_dict(self) -> dict[str, Any]:
        """A dict safe to log: key env var names are kept, no secret values exist in the config."""
        return self.model_dump(mode="json")


def load_pool(path: str | Path) -> PoolConfig:
    """Load and validate a pool YAML file. Errors name the field and the fix."""
    path = Path(path)
    data = read_yaml_file(path, f"pool config not found: {path}")
    return parse_pool(data, origin=str(path), base_dir=path.parent)


def parse_pool(
    data: Any, origin: str = "pool config", *, base_dir: str | Path | None = None
) -> PoolConfig:
    """Validate a pool config given as a dict (e.g. parsed YAML).

    With ``base_dir``, relative ``simulation.problems`` paths are made absolute against it (the
    folder of the pool file); without, they stay relative (to the working directory).
    """
    if isinstance(data, list):
        data = {"workers": data}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping with a 'workers' list")
    # Top-level keys starting with "x-" hold YAML anchors to reuse (as in docker-compose files).
    data = {k: v for k, v in data.items() if not str(k).startswith("x-")}
    try:
        pool = PoolConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{origin}: " + format_validation_error(exc)) from exc
    if base_dir is not None:
        pool = _resolve_problems(pool, Path(base_dir))
    return pool


def _problems_entry(path: str | Path, base_dir: Path) -> str:
    """A ``simulation.problems`` entry: a special name as is, else an absolute path."""
    text = str(path)
    if text in BUNDLED_PROBLEM_SETS:
        return text
    return str((base_dir / Path(text).expanduser()).resolve())


def _resolve_problems(pool: PoolConfig, base_dir: Path) -> PoolConfig:
    """``pool`` with its simulated workers' relative problem paths made absolute."""
    workers = []
    for w in pool.workers:
        if w.simulation is not None:
            problems = [_problems_entry(p, base_dir) for p in w.simulation.problems]
            w = w.model_copy(
                update={"simulation": w.simulation.model_copy(update={"problems": problems})}
            )
        workers.append(w)
    return pool.model_copy(update={"workers": workers})
