"""MLflow runs: where to track, opening (or reusing) a run, and logging params, metrics, tables,
figures and artifacts with secrets scrubbed.

``mlflow`` is imported on first use, never at module import.

- :func:`tracking_uri`: ``$MLFLOW_TRACKING_URI``, else a local SQLite store
  ``sqlite:///<runs dir>/mlflow.db`` (never a plain ``./mlruns`` file store, which MLflow 3.13+
  refuses).
- :func:`start_run`: reuses ``$MLFLOW_RUN_ID`` (as Kubeflow's MLflow integration injects) instead
  of starting a new run; ends the run ``FAILED`` when the block raises, ``FINISHED`` otherwise.
- :func:`reopen_run`: re-open a run that something else ended (TRL's ``report_to="mlflow"`` ends
  its run when training ends) to log more into it.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError, require
from conductor_core.track.scrub import (
    REDACTED,
    is_secret_key,
    scrub_obj,
    scrub_value,
    secret_values,
)

RUNS_DIR_ENV = "CONDUCTOR_RUNS_DIR"
"""Environment variable naming the local runs folder (default ``./runs``)."""

DEFAULT_RUNS_DIR = "runs"
MAX_PARAM_CHARS = 6000
"""MLflow's limit on one param value; longer values are truncated (ending in ``...``)."""

MAX_PARAM_KEY_CHARS = 250
PARAMS_PER_BATCH = 100
_BAD_NAME = re.compile(r"[^A-Za-z0-9_\-. /:]")


def mlflow_module() -> Any:
    """The ``mlflow`` module, or a one-line error naming the extra to install."""
    return require("mlflow", "train", "MLflow tracking")


def runs_dir() -> Path:
    """The local runs folder: ``$CONDUCTOR_RUNS_DIR`` or ``./runs`` (absolute, not created)."""
    return Path(os.environ.get(RUNS_DIR_ENV) or DEFAULT_RUNS_DIR).expanduser().resolve()


def tracking_uri(runs: str | Path | None = None) -> str:
    """``$MLFLOW_TRACKING_URI`` when set, else ``sqlite:///<runs dir>/mlflow.db``.

    Args:
        runs: the local runs folder (default :func:`runs_dir`); created when the SQLite default
            is used.
    """
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        if env.startswith("file:") or env in ("mlruns", "./mlruns"):
            raise ConfigError(
                f"MLFLOW_TRACKING_URI={env!r}: plain file stores are refused by MLflow 3; "
                "use sqlite:///PATH/mlflow.db or an http(s):// tracking server"
            )
        return env
    folder = Path(runs).expanduser().resolve() if runs is not None else runs_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


def configure(uri: str | None = None) -> Any:
    """Point MLflow at ``uri`` (default :func:`tracking_uri`) and return the ``mlflow`` module.

    MLflow keeps this process-wide (and copies it to ``$MLFLOW_TRACKING_URI``): call it only
    inside a function wrapped by :func:`restores_tracking_uri`.
    """
    mlflow = mlflow_module()
    mlflow.set_tracking_uri(uri or tracking_uri())
    return mlflow


_URI_ENV = "MLFLOW_TRACKING_URI"


def _tracking_state() -> tuple[str | None, str | None]:
    utils = sys.modules.get("mlflow.tracking._tracking_service.utils")
    return getattr(utils, "_tracking_uri", None), os.environ.get(_URI_ENV)


def _restore_tracking_state(state: tuple[str | None, str | None]) -> None:
    if _tracking_state() == state:
        return
    set_uri, env = state
    mlflow_module().set_tracking_uri(set_uri)  # also resets MLflow's tracer provider
    if env is None:
        os.environ.pop(_URI_ENV, None)
    else:
        os.environ[_URI_ENV] = env


@contextmanager
def _tracking_kept() -> Iterator[None]:
    """MLflow's tracking URI and ``$MLFLOW_TRACKING_URI`` after the block are what they were."""
    state = _tracking_state()
    try:
        yield
    finally:
        _restore_tracking_state(state)


@contextmanager
def tracking_at(uri: str | None = None) -> Iterator[Any]:
    """Point MLflow at ``uri`` (default :func:`tracking_uri`) within the block and yield the
    ``mlflow`` module; afterwards its process-wide tracking URI and ``$MLFLOW_TRACKING_URI`` are
    what they were before."""
    with _tracking_kept():
        yield configure(uri)


def restores_tracking_uri(func: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a function (or a generator behind ``@contextmanager``) that calls :func:`configure`,
    so that MLflow's process-wide tracking URI and ``$MLFLOW_TRACKING_URI`` are what they were
    once it returns (or its block ends): a library call never re-points the caller's MLflow."""
    if inspect.isgeneratorfunction(func):

        @functools.wraps(func)
        def generator(*args: Any, **kwargs: Any) -> Iterator[Any]:
            with _tracking_kept():
                return (yield from func(*args, **kwargs))

        return generator

    @functools.wraps(func)
    def call(*args: Any, **kwargs: Any) -> Any:
        with _tracking_kept():
            return func(*args, **kwargs)

    return call


def store_missing(uri: str) -> bool:
    """Whether ``uri`` names a SQLite store that does not exist yet: nothing was ever logged
    there, and reading it would create an empty store."""
    return uri.startswith("sqlite:///") and not Path(uri.removeprefix("sqlite:///")).is_file()


def _local_artifact_root(uri: str, experiment: str) -> str | None:
    """For a local SQLite store, ``mlartifacts/<experiment>`` next to the database (else None)."""
    if not uri.startswith("sqlite:///"):
        return None
    db = Path(uri[len("sqlite:///") :])
    folder = re.sub(r"[^A-Za-z0-9_.-]+", "_", experiment).strip("._") or "default"
    return (db.parent / "mlartifacts" / folder).resolve().as_uri()


def ensure_experiment(experiment: str, *, artifact_location: str | None = None) -> str:
    """The id of ``experiment``, created if missing.

    With a local SQLite store the experiment's artifacts go to ``mlartifacts/`` next to the
    database unless ``artifact_location`` says otherwise; with a server, the server's default
    artifact root is used.
    """
    mlflow = mlflow_module()
    found = mlflow.get_experiment_by_name(experiment)
    if found is not None:
        return found.experiment_id
    location = artifact_location or _local_artifact_root(mlflow.get_tracking_uri(), experiment)
    try:
        return mlflow.create_experiment(experiment, artifact_location=location)
    except Exception:
        # Another process may have created it at the same moment.
        found = mlflow.get_experiment_by_name(experiment)
        if found is None:
            raise
        return found.experiment_id


@contextmanager
def _run_block(run: Any, *, owned: bool) -> Iterator[Any]:
    mlflow = mlflow_module()
    try:
        yield run
    except BaseException:
        if owned:
            mlflow.end_run(status="FAILED")
        raise
    else:
        if owned:
            mlflow.end_run(status="FINISHED")


@contextmanager
@restores_tracking_uri
def start_run(
    experiment: str,
    run_name: str | None = None,
    tags: Mapping[str, Any] | None = None,
    *,
    uri: str | None = None,
    log_system_metrics: bool | None = None,
) -> Iterator[Any]:
    """Open an MLflow run for a block; yields the ``mlflow.ActiveRun``.

    An ``MLFLOW_RUN_ID`` in the environment is reused (and re-opened if it was ended) instead of
    starting a new run, and ``experiment``/``run_name`` are then ignored. If that same run is
    already active in this process, it is yielded and left open for its owner to end. The run is
    ended ``FAILED`` when the block raises (the exception propagates) and ``FINISHED`` otherwise.

    Args:
        experiment: experiment name (created if missing).
        run_name: name of a new run.
        tags: tags set on the run (new or reused); values are stringified and scrubbed.
        uri: tracking URI (default :func:`tracking_uri`).
        log_system_metrics: sample CPU, memory, disk, network (and GPU with ``pynvml``) into
            the run's ``system/*`` metrics while it is open (a run this call opens; None:
            MLflow's ``MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING``).
    """
    mlflow = configure(uri)
    injected = os.environ.get("MLFLOW_RUN_ID") or None
    active = mlflow.active_run()
    system = {"log_system_metrics": log_system_metrics}
    if injected and active is not None and active.info.run_id == injected:
        run, owned = active, False
    elif injected:
        run, owned = mlflow.start_run(run_id=injected, **system), True
    else:
        run = mlflow.start_run(
            experiment_id=ensure_experiment(experiment), run_name=run_name, **system
        )
        owned = True
    try:
        if tags:
            secrets = secret_values()
            mlflow.set_tags(
                {
                    str(k): scrub_value(str(v), secrets)
                    for k, v in tags.items()
                    if not is_secret_key(str(k))
                }
            )
    except BaseException:
        if owned:
            mlflow.end_run(status="FAILED")
        raise
    with _run_block(run, owned=owned) as r:
        yield r


@contextmanager
@restores_tracking_uri
def reopen_run(
    run_id: str, *, uri: str | None = None, log_system_metrics: bool | None = None
) -> Iterator[Any]:
    """Re-open an ended run (for example after TRL's ``report_to="mlflow"`` ended it) to log more.

    Ends it again ``FINISHED``, or ``FAILED`` when the block raises. If the run is already active
    in this process it is yielded and left open. ``log_system_metrics``: as in
    :func:`start_run` (a re-opened run continues its ``system/*`` steps).
    """
    mlflow = configure(uri)
    active = mlflow.active_run()
    if active is not None and active.info.run_id == run_id:
        with _run_block(active, owned=False) as r:
            yield r
        return
    if active is not None:
        raise ConfigError(
            f"cannot re-open run {run_id}: run {active.info.run_id} is active in this process; "
            "end it first (mlflow.end_run())"
        )
    run = mlflow.start_run(run_id=run_id, log_system_metrics=log_system_metrics)
    with _run_block(run, owned=True) as r:
        yield r


def _param_key(key: str) -> str:
    return _BAD_NAME.sub("_", key)[:MAX_PARAM_KEY_CHARS]


def _truncate(text: str, limit: int = MAX_PARAM_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _param_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None or isinstance(value, bool | int | float):
        return str(value)
    return json.dumps(value, default=str)


def _as_plain(config: Any) -> Any:
    """A pydantic model (or anything with ``model_dump``) as plain JSON-like data."""
    if hasattr(config, "model_dump"):
        return config.model_dump(mode="json")
    return config


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    value = _as_plain(value)
    if isinstance(value, Mapping):
        if not value and prefix:
            out[prefix] = "{}"
        for key, item in value.items():
            if is_secret_key(str(key)):
                continue
            _flatten(item, f"{prefix}.{key}" if prefix else str(key), out)
    elif isinstance(value, list | tuple) and any(
        isinstance(_as_plain(v), Mapping | list | tuple) for v in value
    ):
        for i, item in enumerate(value):
            _flatten(item, f"{prefix}.{i}" if prefix else str(i), out)
    elif prefix:
        out[prefix] = value


def flatten_params(config: Any, prefix: str = "") -> dict[str, str]:
    """Flatten a config for MLflow params, with secrets scrubbed (pure: no MLflow needed).

    Nested mappings become dotted keys (``workers.0.params.max_tokens``); lists of mappings are
    indexed; lists of scalars are kept as one value. Keys that look like secrets are dropped;
    values that equal a secret environment value (one named by an ``*_env`` field, or one whose
    variable name looks like a secret) or that look like a credential become ``"***"``. Values
    are stringified (``None`` as ``"None"``) and truncated to MLflow's limit.

    Args:
        config: a mapping or a pydantic model.
        prefix: prepended to every key (``prefix.key``).
    """
    plain = _as_plain(config)
    if not isinstance(plain, Mapping):
        raise ConfigError(
            f"log_params_flat: expected a mapping or a pydantic model, got {type(config).__name__}"
        )
    flat: dict[str, Any] = {}
    _flatten(plain, prefix, flat)
    secrets = secret_values(plain)
    out: dict[str, str] = {}
    for key, value in flat.items():
        out[_param_key(key)] = _truncate(scrub_value(_param_text(value), secrets))
    return out


def log_params_flat(config: Any, prefix: str = "") -> dict[str, str]:
    """Log :func:`flatten_params` of ``config`` to the active run; returns what was logged."""
    mlflow = mlflow_module()
    params = flatten_params(config, prefix)
    items = list(params.items())
    for i in range(0, len(items), PARAMS_PER_BATCH):
        mlflow.log_params(dict(items[i : i + PARAMS_PER_BATCH]))
    return params


def metric_name(name: str) -> str:
    """An MLflow-safe metric name (characters MLflow refuses become ``_``)."""
    return _BAD_NAME.sub("_", name)


def log_metrics(metrics: Mapping[str, Any], step: int | None = None) -> dict[str, float]:
    """Log the finite numeric metrics of ``metrics`` (others are skipped); returns them."""
    clean: dict[str, float] = {}
    for key, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if math.isfinite(number):
            clean[metric_name(str(key))] = number
    if clean:
        mlflow_module().log_metrics(clean, step=step)
    return clean


def _table_columns(rows: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]]) -> dict:
    if isinstance(rows, Mapping):
        return {str(k): list(v) for k, v in rows.items()}
    keys = list(dict.fromkeys(str(k) for r in rows for k in r))
    return {k: [r.get(k) for r in rows] for k in keys}


def _cell(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.dumps(_as_plain(value), default=str)


def log_table(
    rows: Sequence[Mapping[str, Any]] | Mapping[str, Sequence[Any]], name: str
) -> dict[str, list[Any]]:
    """Log a table (rows as dicts, or columns as lists) as ``name`` (``.json`` added if missing).

    Columns whose name looks like a secret are dropped; string cells are scrubbed; nested
    values are stored as JSON text. Returns the logged columns. An empty table logs nothing.
    """
    secrets = tuple(secret_values())
    columns = {
        k: [scrub_obj(_cell(v), secrets) for v in col]
        for k, col in _table_columns(rows).items()
        if not is_secret_key(k)
    }
    lengths = {len(c) for c in columns.values()}
    if len(lengths) > 1:
        raise ConfigError(f"log_table({name!r}): columns have different lengths {sorted(lengths)}")
    if not columns or lengths == {0}:
        return {}
    artifact = name if name.endswith(".json") else f"{name}.json"
    mlflow_module().log_table(data=columns, artifact_file=artifact)
    return columns


def log_figure(fig: Any, name: str) -> str:
    """Log a matplotlib/plotly figure, or an image file given by path, as ``name``.

    A figure without an extension in ``name`` is saved as PNG. Returns the artifact path.
    """
    mlflow = mlflow_module()
    if isinstance(fig, str | Path):
        path = Path(fig)
        if not path.is_file():
            raise ConfigError(f"log_figure({name!r}): no image file at {path}")
        folder, _, _ = name.rpartition("/")
        mlflow.log_artifact(str(path), artifact_path=folder or None)
        return f"{folder}/{path.name}" if folder else path.name
    artifact = name if Path(name).suffix else f"{name}.png"
    mlflow.log_figure(fig, artifact)
    return artifact


def log_artifacts(path: str | Path, artifact_path: str | None = None) -> None:
    """Log a local file or folder under ``artifact_path``; a missing path is a clear error."""
    mlflow = mlflow_module()
    path = Path(path)
    if path.is_dir():
        mlflow.log_artifacts(str(path), artifact_path=artifact_path)
    elif path.is_file():
        mlflow.log_artifact(str(path), artifact_path=artifact_path)
    else:
        raise ConfigError(f"log_artifacts: {path} does not exist")


__all__ = [
    "REDACTED",
    "configure",
    "ensure_experiment",
    "flatten_params",
    "log_artifacts",
    "log_figure",
    "log_metrics",
    "log_params_flat",
    "log_table",
    "metric_name",
    "reopen_run",
    "runs_dir",
    "start_run",
    "tracking_uri",
]
