"""``conductor serve``: the OpenAI-compatible Conductor gateway (uvicorn).

With no options it serves the bundled simulated pool with the embedded ``scripted`` plan source,
so it runs with no keys: ``conductor serve`` then point any OpenAI client at
``http://127.0.0.1:8000/v1`` with model ``conductor``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from conductor_core.cli._common import conductor_options, load_pool, make_plan_source
from conductor_core.configfiles import read_yaml_file
from conductor_core.errors import ConfigError, format_validation_error, require
from conductor_core.serve.config import GatewayConfig
from conductor_core.serve.logs import configure_json_logging


def gateway_config(
    config_path: Path | None, overrides: dict[str, Any]
) -> Any:  # -> GatewayConfig (imported lazily)
    """The gateway settings: the YAML file (if any), then the command line's non-None values.

    Raises:
        ConfigError: the file is missing or invalid, or a value is out of range (naming it).
    """
    from pydantic import ValidationError

    data: dict[str, Any] = {}
    if config_path is not None:
        loaded = read_yaml_file(config_path, f"--config: no such file {config_path}")
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"--config: {config_path} must hold a mapping of gateway settings")
        data = dict(loaded or {})
    data.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return GatewayConfig.model_validate(data)
    except ValidationError as exc:
        where = f" ({config_path})" if config_path else ""
        raise ConfigError(f"gateway config{where}: {format_validation_error(exc)}") from None


@click.command("serve")
@conductor_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8000, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Gateway settings YAML (fields of GatewayConfig; see docs/serving.md). Command-line "
    "options override it.",
)
@click.option("--model-name", default=None, help="Model id served at /v1/models [conductor].")
@click.option(
    "--api-keys-file",
    default=None,
    help="File of API keys, one per line [$CONDUCTOR_API_KEYS_FILE]. Keys are also read "
    "from $CONDUCTOR_API_KEYS. None at all: the gateway is open.",
)
@click.option("--rounds", default=None, type=int, help="Default Conductor rounds per request.")
@click.option(
    "--max-tokens",
    default=None,
    type=int,
    help="Worker-token budget per request: the default and the most a request may ask.",
)
@click.option(
    "--max-cost",
    default=None,
    type=float,
    help="Dollar budget per request: the default and the most a request may ask.",
)
@click.option(
    "--deadline",
    default=None,
    type=float,
    help="Seconds budget per request: the default and the most a request may ask.",
)
@click.option("--request-timeout", default=None, type=float, help="Seconds before a 504 [300].")
@click.option(
    "--rate-limit-per-minute",
    default=None,
    type=float,
    help="Requests per minute per key; failed authentications per client address too.",
)
@click.option(
    "--spend-quota",
    default=None,
    type=click.FloatRange(min=0, min_open=True),
    help="Dollars per key (per address when open) per spend_quota_period_s (a day); then 429.",
)
@click.option(
    "--forwarded-allow-ips",
    default=None,
    help="Comma-separated proxy addresses/CIDR ranges whose X-Forwarded-For gives the client's "
    "address [127.0.0.1,::1].",
)
@click.option(
    "--max-concurrent-requests",
    default=None,
    type=click.IntRange(min=1),
    help="Chat completions in flight at once; more: 429 [256; null in --config: no limit].",
)
@click.option(
    "--max-concurrent-requests-per-key",
    default=None,
    type=click.IntRange(min=1),
    help="Chat completions in flight at once per key (per address when open) [64].",
)
@click.option("--trace-sample-rate", default=None, type=float, help="Share traced to MLflow.")
@click.option(
    "--header-timeout",
    default=None,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a client has to send a request's headers; then 408 and closed [10].",
)
@click.option(
    "--body-timeout",
    default=None,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a client has to send a request's body; then 408 and closed [30].",
)
@click.option(
    "--keep-alive-timeout",
    default=None,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds before an idle kept-alive connection is closed [5].",
)
@click.option(
    "--max-connections",
    default=None,
    type=click.IntRange(min=1),
    help="Open connections on this replica; beyond: 503 [1024; null in --config: no limit].",
)
@click.option(
    "--max-header-bytes",
    default=None,
    type=click.IntRange(min=1024),
    help="Largest request line plus headers; larger: 400 [16384].",
)
@click.option(
    "--drain-file",
    default=None,
    help="While this file exists (newer than the process), /readyz answers 503: draining "
    "(the chart's preStop hook creates it).",
)
@click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False),
)
def command(
    pool_path: Path | None,
    conductor: str,
    conductor_model: str | None,
    plan_grammar: bool,
    conductor_temperature: float | None,
    conductor_max_tokens: int | None,
    conductor_key_env: str | None,
    problems_path: Path | None,
    max_steps: int,
    access_mode: str,
    descriptors: bool,
    prompt_style: str,
    sample_index: int,
    host: str,
    port: int,
    config_path: Path | None,
    model_name: str | None,
    api_keys_file: str | None,
    rounds: int | None,
    max_tokens: int | None,
    max_cost: float | None,
    deadline: float | None,
    request_timeout: float | None,
    rate_limit_per_minute: float | None,
    spend_quota: float | None,
    forwarded_allow_ips: str | None,
    max_concurrent_requests: int | None,
    max_concurrent_requests_per_key: int | None,
    trace_sample_rate: float | None,
    header_timeout: float | None,
    body_timeout: float | None,
    keep_alive_timeout: float | None,
    max_connections: int | None,
    max_header_bytes: int | None,
    drain_file: str | None,
    log_level: str,
) -> None:
    """Serve the Conductor as an OpenAI-compatible API at http://HOST:PORT/v1."""
    # lazy: conductor --help imports every command module; this adds ~169 ms (httpx, rich)
    from conductor_core.serve.app import create_app
    from conductor_core.serve.auth import load_api_keys
    from conductor_core.serve.server import uvicorn_options

    ctx = click.get_current_context()

    def given(name: str, value: Any) -> Any:
        """A value only when the user set it (defaults must not override the config file)."""
        source = ctx.get_parameter_source(name)
        return value if source is click.core.ParameterSource.COMMANDLINE else None

    config = gateway_config(
        config_path,
        {
            "model_name": model_name,
            "api_keys_file": api_keys_file,
            "max_rounds": rounds,
            "max_steps": given("max_steps", max_steps),
            "access_mode": given("access_mode", access_mode),
            "descriptors": given("descriptors", descriptors),
            "prompt_style": given("prompt_style", prompt_style),
            "sample_index": given("sample_index", sample_index),
            "max_tokens": max_tokens,
            "max_cost": max_cost,
            "deadline_s": deadline,
            "request_timeout_s": request_timeout,
            "rate_limit_per_minute": rate_limit_per_minute,
            "spend_quota": spend_quota,
            "forwarded_allow_ips": (
                None
                if forwarded_allow_ips is None
                else [ip.strip() for ip in forwarded_allow_ips.split(",") if ip.strip()]
            ),
            "max_concurrent_requests": max_concurrent_requests,
            "max_concurrent_requests_per_key": max_concurrent_requests_per_key,
            "trace_sample_rate": trace_sample_rate,
            "header_timeout_s": header_timeout,
            "body_timeout_s": body_timeout,
            "keep_alive_timeout_s": keep_alive_timeout,
            "max_connections": max_connections,
            "max_header_bytes": max_header_bytes,
            "drain_file": drain_file,
        },
    )
    uvicorn = require("uvicorn", extra="serve", purpose="the Conductor gateway")
    pool = load_pool(pool_path, problems_path)
    keys = load_api_keys(config)
    configure_json_logging(log_level.upper(), secrets=keys)
    source = make_plan_source(
        conductor,
        conductor_model,
        conductor_key_env,
        plan_grammar=plan_grammar,
        temperature=conductor_temperature,
        plan_tokens=conductor_max_tokens,
    )
    app = create_app(config, pool=pool, plan_source=source)
    click.echo(
        f"Conductor gateway: http://{host}:{port}/v1 (model {config.model_name}, "
        f"{len(pool.workers)} workers, conductor {conductor}, "
        f"{'API keys required' if keys else 'OPEN: no API keys configured'})",
        err=True,
    )
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_config=None,
        access_log=False,
        lifespan="on",
        timeout_graceful_shutdown=config.drain_timeout_s,
        **uvicorn_options(config, app.state.metrics),  # read timeouts, connection limit
    )
