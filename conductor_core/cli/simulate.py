"""``conductor simulate``: the OpenAI-compatible worker simulator and pools that point at it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from conductor_core.errors import ConfigError
from conductor_core.simulation.problem_bank import known_problems
from conductor_core.workers.bundled import bundled_pool_path
from conductor_core.workers.config import load_pool, parse_pool


@click.group("simulate")
def command() -> None:
    """Simulated worker pool (OpenAI-compatible server)."""


@command.command("serve")
@click.option(
    "--pool",
    "pool_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Pool YAML (default: the bundled simulated pool).",
)
@click.option(
    "--problems",
    "problems_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Problems the workers know, JSONL or Parquet, replacing the pool's "
    "simulation.problems (default: those of the pool; the bundled pool knows the bundled demo "
    "problems).",
)
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", default=8100, show_default=True, type=int, help="Port to listen on.")
@click.option(
    "--hang-s",
    default=30.0,
    show_default=True,
    type=float,
    help="How long an injected timeout makes a request hang.",
)
def serve_command(
    pool_path: str | None, problems_path: str | None, host: str, port: int, hang_s: float
) -> None:
    """Serve the pool's simulated workers at http://HOST:PORT/v1 (one model per worker)."""
    # lazy: conductor --help imports every command module; this adds ~38 ms
    from conductor_core.simulation.server import serve

    pool = load_pool(pool_path or bundled_pool_path())
    if problems_path is not None:
        pool = pool.with_simulation_problems([problems_path], replace=True)
    known = known_problems(pool)
    models = [w.model for w in pool.workers if w.provider == "simulated"]
    n_known = len(known) if known is not None else 0
    click.echo(f"worker simulator: http://{host}:{port}/v1 ({n_known} known problems)")
    for model in models:
        click.echo(f"  model: {model}")
    serve(pool, host=host, port=port, hang_s=hang_s)


@command.command("pool-for-endpoint")
@click.option("--url", required=True, help="The simulator's URL, e.g. http://127.0.0.1:8100/v1.")
@click.option(
    "--out", "out_path", required=True, type=click.Path(dir_okay=False), help="Pool YAML to write."
)
@click.option(
    "--pool",
    "pool_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Pool the server runs, to copy names and prices (default: the bundled pool).",
)
def pool_for_endpoint_command(url: str, out_path: str, pool_path: str | None) -> None:
    """Write a pool whose workers are the simulator's models reached through provider 'openai'."""
    endpoint = normalise_endpoint(url)
    models = fetch_models(endpoint)
    reference = load_pool(pool_path or bundled_pool_path())
    data = pool_for_models(endpoint, models, reference)
    write_pool_yaml(data, Path(out_path))
    click.echo(f"wrote {out_path}: {len(models)} workers at {endpoint}")


def normalise_endpoint(url: str) -> str:
    """The OpenAI base URL for ``url`` (``http://h:p`` and ``http://h:p/v1/`` give ``.../v1``)."""
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise ConfigError(
            f"--url: {url!r} is not an http(s) URL; use e.g. http://127.0.0.1:8100/v1"
        )
    return url if url.endswith("/v1") else url + "/v1"


def fetch_models(endpoint: str, timeout_s: float = 10.0) -> list[str]:
    """The model ids served at ``endpoint`` (``GET /models``)."""
    import httpx

    try:
        response = httpx.get(endpoint + "/models", timeout=timeout_s)
        response.raise_for_status()
        data = response.json()["data"]
        models = [str(m["id"]) for m in data]
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        raise ConfigError(
            f"--url: could not list models at {endpoint}/models ({exc}); "
            "start the simulator with: conductor simulate serve"
        ) from exc
    if not models:
        raise ConfigError(f"--url: {endpoint} serves no models")
    return models


def pool_for_models(endpoint: str, models: list[str], reference: Any) -> dict[str, Any]:
    """A pool dict of ``openai`` workers, one per model, copying names and prices from
    ``reference`` (a PoolConfig) where a worker there has the same model."""
    known = {w.model: w for w in reference.workers}
    workers = []
    for model in models:
        worker: dict[str, Any] = {"provider": "openai", "model": model, "endpoint": endpoint}
        ref = known.get(model)
        if ref is not None:
            worker.update(
                name=ref.name or model,
                description=ref.description,
                concurrency=ref.concurrency,
                timeout_s=ref.timeout_s,
                price=ref.price.model_dump(),
            )
        else:
            worker["name"] = model
        workers.append(worker)
    return {"workers": workers}


def write_pool_yaml(data: dict[str, Any], path: Path) -> None:
    """Validate ``data`` as a pool and write it as YAML."""
    import yaml

    parse_pool(data, origin="generated pool")
    path.parent.mkdir(parents=True, exist_ok=True)
    header = "# Pool of simulator models reached through the OpenAI-compatible provider.\n"
    path.write_text(header + yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
