"""Model registration: log a trained model folder, register it, point an alias at the new version,
and download it back by URI.

Choice: the Hugging Face folder (``save_pretrained`` output) is logged as the artifact ``model``
of a small pyfunc (:class:`~conductor_core.track.pyfunc_model.ConductorTextModel`) rather than
through ``mlflow.transformers.log_model``. The folder reaches the artifact store byte for byte
(vLLM, transformers and TRL load it directly after :func:`load_model_dir`), logging needs neither
torch nor loading the weights, and nothing tries the Hugging Face Hub. The pyfunc still serves
with ``mlflow models serve`` / ``mlflow.pyfunc.load_model`` for quick checks.

Registry stages are deprecated: versions are addressed by alias (``models:/name@champion``).
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError
from conductor_core.track.mlflow_run import (
    configure,
    reopen_run,
    restores_tracking_uri,
    start_run,
)
from conductor_core.track.storage import Storage, is_s3

DEFAULT_EXPERIMENT = "conductor-models"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_\-. ]*$")
_ALIAS = re.compile(r"^[A-Za-z0-9_\-]+$")


def _check_name(name: str) -> None:
    if not _NAME.match(name):
        raise ConfigError(
            f"model name {name!r}: use letters, digits, '_', '-', '.' or spaces "
            "(no '/', ':' or '@')"
        )


def _check_names(name: str, alias: str) -> None:
    _check_name(name)
    if not _ALIAS.match(alias) or alias.lower() == "latest" or re.fullmatch(r"[vV]\d+", alias):
        raise ConfigError(
            f"alias {alias!r}: use letters, digits, '_' or '-', not 'latest' or 'v<number>' "
            "(for example 'champion')"
        )


def _pip_requirements() -> list[str]:
    from importlib.metadata import PackageNotFoundError, version

    reqs = ["mlflow", "torch"]
    for pkg in ("transformers", "conductor-core"):
        try:
            reqs.append(f"{pkg}=={version(pkg)}")
        except PackageNotFoundError:
            reqs.append(pkg)
    return reqs


class _PyfuncUnchecked:
    """``mlflow.pyfunc`` as the flavor of ``Model.log``, minus its serving check.

    With an input example, ``Model.log`` loads the logged model and runs ``predict`` on it (its
    ``validate_serving_input``): the whole weights, and up to ``max_new_tokens`` of generation,
    in the registering process. ``pyfunc.log_model`` gives no way to turn that off, and
    ``pyfunc.save_model`` refuses the keyword, so this flavor drops it on the way through.
    """

    __name__ = "mlflow.pyfunc"

    @staticmethod
    def save_model(path: str, mlflow_model: Any, **kwargs: Any) -> None:
        import warnings

        import mlflow.pyfunc

        kwargs.pop("validate_serving_input", None)
        with warnings.catch_warnings():  # ConductorTextModel.predict has no type hints on purpose
            warnings.filterwarnings("ignore", message=".*type hints to the `predict` method")
            mlflow.pyfunc.save_model(path=path, mlflow_model=mlflow_model, **kwargs)


def _log(model_dir: Path, name: str, uri: str | None = None) -> tuple[str, str]:
    """Log and register in the active run; returns (model URI of the logged model, version).
    Its callers restore the tracking URI."""
    mlflow = configure(uri)
    from mlflow.models import Model, infer_signature

    # lazy: pyfunc_model imports mlflow at its top (about 1.5 s)
    from conductor_core.track.pyfunc_model import (
        ARTIFACT_KEY,
        DEFAULT_PARAMS,
        INPUT_EXAMPLE,
        ConductorTextModel,
    )

    signature = infer_signature(
        model_input=["a question"], model_output=["a plan"], params=dict(DEFAULT_PARAMS)
    )
    info = Model.log(
        artifact_path=None,
        name="model",
        flavor=_PyfuncUnchecked(),
        python_model=ConductorTextModel(),
        artifacts={ARTIFACT_KEY: str(model_dir)},
        pip_requirements=_pip_requirements(),
        signature=signature,
        input_example=(list(INPUT_EXAMPLE), dict(DEFAULT_PARAMS)),
        registered_model_name=name,
        validate_serving_input=False,
    )
    version = getattr(info, "registered_model_version", None)
    if version is None:
        versions = mlflow.MlflowClient().search_model_versions(f"name='{name}'")
        version = max(int(v.version) for v in versions)
    return info.model_uri, str(version)


@restores_tracking_uri
def register_version(
    model_dir: str | Path,
    name: str,
    *,
    run_id: str | None = None,
    uri: str | None = None,
) -> str:
    """Log ``model_dir`` and register it as a new version of ``name``; returns the version.

    The model is logged into run ``run_id`` (re-opened if it was ended), else into the active
    run, else into a run of the ``conductor-models`` experiment (an ``MLFLOW_RUN_ID`` from the
    environment is reused). ``uri`` is the tracking URI (default
    :func:`~conductor_core.track.mlflow_run.tracking_uri`). No alias moves.
    """
    folder = Path(model_dir).expanduser()
    if not (folder / "config.json").is_file():
        raise ConfigError(
            f"model_dir: {folder} has no config.json; pass a folder written by save_pretrained"
        )
    _check_name(name)
    mlflow = configure(uri)
    active = mlflow.active_run()
    if run_id is not None and (active is None or active.info.run_id != run_id):
        with reopen_run(run_id, uri=uri):
            _, version = _log(folder, name, uri)
    elif run_id is not None or active is not None:
        _, version = _log(folder, name, uri)
    else:
        with start_run(DEFAULT_EXPERIMENT, run_name=f"register {name}", uri=uri):
            _, version = _log(folder, name, uri)
    return version


@restores_tracking_uri
def log_and_register_model(
    model_dir: str | Path,
    name: str,
    alias: str = "champion",
    *,
    run_id: str | None = None,
    uri: str | None = None,
) -> str:
    """Log ``model_dir``, register it as a new version of ``name`` and set ``alias`` on it
    (see :func:`register_version` for where it is logged). Returns ``models:/<name>@<alias>``."""
    _check_names(name, alias)
    version = register_version(model_dir, name, run_id=run_id, uri=uri)
    configure(uri).MlflowClient().set_registered_model_alias(name, alias, version)
    return f"models:/{name}@{alias}"


def score_tag(metric: str) -> str:
    """The model-version tag holding a version's score on ``metric`` (set when registered)."""
    return f"conductor.{metric}"


@restores_tracking_uri
def promote_if_better(
    model_dir: str | Path,
    name: str,
    alias: str = "champion",
    *,
    metric: str,
    score: float,
    higher_is_better: bool = True,
    run_id: str | None = None,
    uri: str | None = None,
) -> dict[str, Any]:
    """Register ``model_dir`` as a new version (tagged with its ``score``) and move ``alias`` to
    it only when it beats the version the alias points at now (whose score is its tag; a
    champion without a score, or no champion, is beaten by any score).

    Returns ``{"promoted", "version", "score", "champion_version", "champion_score",
    "reason"}``; ``reason`` is one line saying what happened and why.
    """
    _check_names(name, alias)
    mlflow = configure(uri)
    from mlflow.exceptions import MlflowException

    client = mlflow.MlflowClient()
    try:
        current = client.get_model_version_by_alias(name, alias)
    except MlflowException:
        current = None
    champion_score = None
    if current is not None and score_tag(metric) in (current.tags or {}):
        champion_score = float(current.tags[score_tag(metric)])
    version = register_version(model_dir, name, run_id=run_id, uri=uri)
    client.set_model_version_tag(name, version, score_tag(metric), repr(float(score)))
    if champion_score is None:
        better = True
    else:
        better = score > champion_score if higher_is_better else score < champion_score
    target = f"models:/{name}@{alias}"
    if better:
        client.set_registered_model_alias(name, alias, version)
        if current is None:
            reason = f"registered {name} version {version} ({metric} {score:.4f}) as {target}"
        elif champion_score is None:
            reason = (
                f"promoted {name} version {version} ({metric} {score:.4f}) to {target}: the "
                f"champion (version {current.version}) has no recorded {metric}"
            )
        else:
            reason = (
                f"promoted {name} version {version} to {target}: {metric} {score:.4f} beats the "
                f"champion's (version {current.version}) {champion_score:.4f}"
            )
    else:
        reason = (
            f"kept {target} on version {current.version}: the new version {version} "
            f"({metric} {score:.4f}) does not beat its {champion_score:.4f}"
        )
    return {
        "promoted": better,
        "version": version,
        "score": float(score),
        "champion_version": str(current.version) if current is not None else None,
        "champion_score": champion_score,
        "reason": reason,
    }


_ALIAS_URI = re.compile(r"^models:/(?P<name>[^/@]+)@(?P<alias>[^/@]+)/?$")


@restores_tracking_uri
def resolve_model_uri(uri: str, tracking_uri: str | None = None) -> str:
    """A registry alias URI made concrete: ``models:/NAME@ALIAS`` -> ``models:/NAME/VERSION``
    (the version the alias points at now), so that what is evaluated or cached names the
    version, never an alias that may move. Any other URI (a version, ``runs:/``, ``s3://``, a
    folder, a URL, ``scripted``, empty) is returned as it is.

    Raises :class:`ConfigError` naming the model and alias when the alias is not set.
    """
    match = _ALIAS_URI.match(uri.strip())
    if match is None:
        return uri
    name, alias = match["name"], match["alias"]
    mlflow = configure(tracking_uri)
    from mlflow.exceptions import MlflowException

    try:
        version = mlflow.MlflowClient().get_model_version_by_alias(name, alias).version
    except MlflowException as exc:
        raise ConfigError(
            f"model {uri!r}: no version of the registered model {name!r} has the alias "
            f"{alias!r} ({exc.message.splitlines()[0]})"
        ) from exc
    return f"models:/{name}/{version}"


def _find_model_folder(root: Path) -> Path:
    """The folder with ``config.json`` inside a downloaded model (the pyfunc's artifact first)."""
    preferred = root / "artifacts" / "model"
    if (preferred / "config.json").is_file():
        return preferred
    if (root / "config.json").is_file():
        return root
    found = sorted(root.rglob("config.json"), key=lambda p: len(p.parts))
    if not found:
        raise ConfigError(f"the model at {root} holds no config.json (not a transformers folder)")
    return found[0].parent


@restores_tracking_uri
def load_model_dir(uri: str, dst: str | Path | None = None) -> Path:
    """Download a model and return the local folder that holds its ``config.json``.

    ``uri`` may be a registry URI (``models:/name@alias``, ``models:/name/3``), a run or logged
    model URI (``runs:/...``, ``models:/m-...``), an ``s3://`` folder, or a local folder (returned
    as it is). ``dst`` is the download folder (default: a new temporary folder, removed when the
    process exits: a Conductor's weights are read into memory, and every `conductor solve` of a
    registered model otherwise left a copy of it behind).
    """
    local = Path(uri).expanduser()
    if "://" not in uri and ":/" not in uri and local.is_dir():
        return _find_model_folder(local)
    if dst is None:
        target = Path(tempfile.mkdtemp(prefix="conductor-model-"))
        atexit.register(shutil.rmtree, target, ignore_errors=True)
    else:
        target = Path(dst)
    target.mkdir(parents=True, exist_ok=True)
    if is_s3(uri):
        return _find_model_folder(Storage().download_dir(uri, target))
    mlflow = configure()
    from mlflow.exceptions import MlflowException

    try:
        path = mlflow.artifacts.download_artifacts(artifact_uri=uri, dst_path=str(target))
    except MlflowException as exc:
        raise ConfigError(f"model {uri!r}: {exc.message.splitlines()[0]}") from exc
    return _find_model_folder(Path(path))
