"""Worker pool configuration (YAML): an ordered list of workers, id = position.

A worker names the environment variable that holds its key (``api_key_env``), never the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from conductor_core.errors import ConfigError

ProviderName = Literal["openai", "anthropic", "gemini", "transformers", "simulated"]


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


class SimulationProfile(BaseModel):
    """Behaviour of a simulated worker.

    ``skills`` maps a domain (``math``, ``mcq``, ``code``, ``freeform``) to the chance of a right
    answer when solving alone; ``verify_skill`` is the chance of ending right when a right answer
    is visible among the earlier steps it may read. ``hedge_when_wrong`` / ``hedge_when_right``
    are the chances that an answer ends with a sentence of doubt: a calibration cue like the one
    real models give (they hedge more often when wrong), which a Conductor can learn to read in
    a recursion round. Latency and output length are drawn from normal distributions (clipped at
    zero). Same seed, same answers.
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
    source_ids: list[int] | None = Field(
        default=None, description="For a subset: the original id of each worker (kept mapping)."
    )

    def __len__(self) -> int:
        return len(self.workers)

    def subset(self, ids: list[int]) -> PoolConfig:
        """A pool of the given workers, renumbered 0..k-1; ``source_ids`` keeps the mapping."""
        if not ids:
            raise ConfigError("a pool subset needs at least one worker id")
        bad = [i for i in ids if not 0 <= i < len(self.workers)]
        if bad:
            raise ConfigError(f"worker ids {bad} are not in the pool (ids 0..{len(self) - 1})")
        base = self.source_ids or list(range(len(self.workers)))
        return self.model_copy(
            update={"workers": [self.workers[i] for i in ids], "source_ids": [base[i] for i in ids]}
        )

    def with_profile(self, name: str) -> PoolConfig:
        """A copy in which every worker uses its generation profile ``name`` (if it has one)."""
        workers = [
            w.model_copy(update={"params": w.profiles[name]}) if name in w.profiles else w
            for w in self.workers
        ]
        return self.model_copy(update={"workers": workers})

    def public_dict(self) -> dict[str, Any]:
        """A dict safe to log: key env var names are kept, no secret values exist in the config."""
        return self.model_dump(mode="json")


def load_pool(path: str | Path) -> PoolConfig:
    """Load and validate a pool YAML file. Errors name the field and the fix."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"pool config not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    return parse_pool(data, origin=str(path))


def parse_pool(data: Any, origin: str = "pool config") -> PoolConfig:
    """Validate a pool config given as a dict (e.g. parsed YAML)."""
    if isinstance(data, list):
        data = {"workers": data}
    if not isinstance(data, dict):
        raise ConfigError(f"{origin}: expected a mapping with a 'workers' list")
    # Top-level keys starting with "x-" hold YAML anchors to reuse (as in docker-compose files).
    data = {k: v for k, v in data.items() if not str(k).startswith("x-")}
    try:
        return PoolConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{origin}: " + format_validation_error(exc)) from exc


def format_validation_error(exc: ValidationError) -> str:
    """One line per problem: ``field.path: message``."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "(root)"
        parts.append(f"{loc}: {err['msg']}")
    return "; ".join(parts)
