"""The gateway's configuration: one typed model, every field described."""

from __future__ import annotations

import ipaddress

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from conductor_core.sample_streams import MAX_ROUNDS
from conductor_core.workflow.model import AccessMode
from conductor_core.workflow.prompts import PromptStyle

API_KEYS_FILE_ENV = "CONDUCTOR_API_KEYS_FILE"
"""Environment variable naming the API-keys file when ``api_keys_file`` is not set."""

API_KEYS_ENV = "CONDUCTOR_API_KEYS"
"""Default environment variable holding API keys (comma- or newline-separated)."""

MODEL_VERSION_ENV = "CONDUCTOR_MODEL_VERSION"
"""Environment variable naming the version of the served Conductor model (e.g. the registry
version a deployment pinned; the Helm chart sets it to the pinned source): the ``model_version``
label of the metric ``conductor_gateway_build_info`` (unset: ``unknown``) and
``conductor.model_version`` of ``/v1/models`` (unset: null)."""


class GatewayConfig(BaseModel):
    """Settings of the OpenAI-compatible Conductor gateway (``conductor serve``).

    The pool and the plan source are not part of it: they are loaded by the caller (the CLI's
    ``--pool``/``--conductor``) and handed to :func:`conductor_core.serve.app.create_app`.
    """

    model_config = ConfigDict(extra="forbid")

    model_name: str = Field(
        default="conductor",
        min_length=1,
        description="The model id served at /v1/models; requests naming another model get 404.",
    )
    api_keys_file: str | None = Field(
        default=None,
        description=f"File of API keys, one per line ('#' comments and blank lines ignored), "
        f"e.g. a mounted Kubernetes Secret. None: the file named by ${API_KEYS_FILE_ENV}, if set.",
    )
    api_keys_env: str = Field(
        default=API_KEYS_ENV,
        description="NAME of the environment variable holding API keys (comma- or "
        "newline-separated), added to those of the file. With no key at all the gateway is "
        "open (a warning is logged at startup).",
    )
    max_body_bytes: int = Field(
        default=1_000_000, ge=1024, description="Largest accepted request body; larger: 413."
    )
    rate_limit_per_minute: float | None = Field(
        default=None,
        gt=0,
        description="Requests per minute per API key (per client address when open), as a "
        "token bucket; over it: 429 with Retry-After. Failed authentications are limited the "
        "same way per client address (see forwarded_allow_ips): once its bucket is empty, a "
        "wrong or missing key from that address gets 429 instead of 401; a valid key is never "
        "refused by it. None: no rate limit.",
    )
    rate_limit_burst: int = Field(
        default=10, ge=1, description="Token-bucket capacity: requests allowed in a burst."
    )
    spend_quota: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Dollars each API key (each client address when open) may spend per "
        "spend_quota_period_s, on this replica; a request of a key that has spent it gets 429 "
        "insufficient_quota until the period ends. Checked before a request runs and charged "
        "with its cost when it ends, so requests in flight may overshoot it by at most their "
        "max_cost each. None: no quota.",
    )
    spend_quota_period_s: float = Field(
        default=86_400.0,
        gt=0,
        allow_inf_nan=False,
        description="Length of a spend_quota period in seconds (periods start at multiples of "
        "it since the Unix epoch: 86400 = each UTC day).",
    )
    forwarded_allow_ips: list[str] = Field(
        default_factory=lambda: ["127.0.0.1", "::1"],
        description="Addresses or CIDR ranges of the proxies trusted to tell the client's "
        "address in X-Forwarded-For (uvicorn's forwarded_allow_ips); a request from any other "
        "peer keeps the peer's address. That address keys the failed-authentication throttle "
        "(and the open gateway's per-client limits), so behind an ingress list the ingress "
        "controller's pod range, else every client shares its address. '*' trusts any peer.",
    )
    max_concurrent_requests: int | None = Field(
        default=256,
        ge=1,
        description="Chat completions in flight at once on this replica (streams until their "
        "end); one more: 429 with Retry-After. None: no limit.",
    )
    max_concurrent_requests_per_key: int | None = Field(
        default=64,
        ge=1,
        description="Chat completions in flight at once per API key (per client address when "
        "open), so one caller cannot take every slot; one more: 429 with Retry-After. "
        "None: no limit.",
    )
    request_timeout_s: float = Field(
        default=300.0, gt=0, description="Wall-clock limit of one workflow; over it: 504."
    )
    drain_timeout_s: float = Field(
        default=30.0,
        ge=0,
        description="On shutdown, how long in-flight workflows may finish before they are "
        "cancelled (uvicorn's graceful-shutdown timeout and the lifespan's drain). Below "
        "request_timeout_s, the longest requests allowed can be cut by a shutdown (the Helm "
        "chart refuses that combination).",
    )
    readiness_timeout_s: float = Field(
        default=3.0,
        gt=0,
        description="Time limit of one check that the Conductor's endpoint answers (readiness) "
        "and of one worker endpoint's health check.",
    )
    readiness_cache_s: float = Field(
        default=10.0,
        ge=0,
        description="How long the result of a Conductor check is reused by /readyz: the "
        "Conductor's endpoint is asked at most once per window (concurrent probes share one "
        "check), however often the replica is probed. 0: a check per probe.",
    )
    worker_health_interval_s: float | None = Field(
        default=30.0,
        gt=0,
        description="Seconds between the background health checks of the pool's "
        "OpenAI-compatible worker endpoints (GET /models with the worker's key), reported as "
        "the metric conductor_gateway_worker_up{worker}; never on the /readyz path, and a "
        "worker down does not make the replica unready. None: no checks.",
    )
    drain_file: str | None = Field(
        default=None,
        description="While this file exists and is newer than the process, /readyz answers 503 "
        "(draining) and the replica keeps serving: the chart's preStop hook creates it before "
        "the pod gets SIGTERM, so load balancers stop sending before the listener closes. A "
        "file older than the process (left by an earlier container of the pod) is ignored. "
        "None: no such file.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="Time a client has to send a request's headers, counted from the "
        "connection's opening (or from the first byte of the next request on a kept-alive "
        "connection); over it the connection gets 408 (or, if it sent nothing, is just "
        "closed). Bounds connections held open with partial or no headers.",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="Time a client has to send a request's whole body once its headers are in; "
        "over it: 408 and the connection is closed.",
    )
    keep_alive_timeout_s: float = Field(
        default=5.0,
        gt=0,
        description="An idle kept-alive connection is closed after this many seconds "
        "(uvicorn's timeout_keep_alive).",
    )
    max_connections: int | None = Field(
        default=1024,
        ge=1,
        description="Open connections (and requests in progress) on this replica; a request "
        "arriving beyond it is answered 503 and its connection closed (uvicorn's "
        "limit_concurrency). Keep it well above max_concurrent_requests so that probes and "
        "/metrics still get through. None: no limit.",
    )
    max_header_bytes: int = Field(
        default=16 * 1024,
        ge=1024,
        description="Largest request line plus headers; larger: 400 and the connection is "
        "closed (h11's max_incomplete_event_size).",
    )
    trace_sample_rate: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Fraction of requests logged as MLflow traces (log_solve_trace; the "
        "tracking URI comes from MLFLOW_TRACKING_URI). 0: none.",
    )
    max_rounds: int = Field(
        default=1,
        ge=1,
        le=MAX_ROUNDS,
        description="Default Conductor rounds per request.",
    )
    max_rounds_limit: int = Field(
        default=3,
        ge=1,
        le=MAX_ROUNDS,
        description="Largest conductor.max_rounds a request may ask for (at most the rounds a "
        "sample index can number, `sample_streams.MAX_ROUNDS`).",
    )
    max_steps: int = Field(
        default=5,
        ge=1,
        le=20,
        description="Steps per plan: the default, and the most a request's conductor.max_steps "
        "may ask for.",
    )
    access_mode: AccessMode = Field(
        default=AccessMode.BINARY, description="Access scheme the Conductor writes (binary|index)."
    )
    descriptors: bool = Field(
        default=False, description="Show the workers' descriptions to the Conductor."
    )
    prompt_style: PromptStyle = Field(
        default=PromptStyle.FULL,
        description="How a Conductor of unknown training is asked (a trained model folder "
        "carries its own).",
    )
    sample_index: int = Field(
        default=0,
        ge=0,
        description="Sample index of a request that gives neither sample_index nor seed.",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Worker-token budget per request: the default, and the most a request's "
        "conductor.budget.max_tokens may ask for (None: unlimited).",
    )
    max_cost: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Dollar budget per request: the default, and the most a request's "
        "conductor.budget.max_cost may ask for (None: unlimited).",
    )
    deadline_s: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description="Wall-clock budget per request, in seconds; steps not started by then are "
        "skipped. The default, and the most a request's conductor.budget.deadline_s may ask "
        "for (None: no default; requests may ask up to request_timeout_s).",
    )

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _check_forwarded_allow_ips(cls, value: list[str]) -> list[str]:
        # uvicorn silently treats a malformed entry as a literal that never matches
        for entry in value:
            if entry == "*":
                continue
            try:
                ipaddress.ip_network(entry)
            except ValueError:
                raise ValueError(
                    f"{entry!r} is neither an IP address nor a CIDR range (e.g. 10.0.0.0/8) nor '*'"
                ) from None
        return value

    @model_validator(mode="after")
    def _check_rounds(self) -> GatewayConfig:
        if self.max_rounds > self.max_rounds_limit:
            raise ValueError(
                f"max_rounds ({self.max_rounds}) exceeds max_rounds_limit "
                f"({self.max_rounds_limit}); raise the limit or lower the default"
            )
        if not self.api_keys_env.replace("_", "").isalnum():
            raise ValueError(
                "api_keys_env must be the NAME of an environment variable, not a key itself"
            )
        return self
