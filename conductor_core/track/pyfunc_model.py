"""The MLflow pyfunc wrapper of a registered Conductor: the Hugging Face folder is the model's
artifact ``model`` (byte for byte), and ``predict`` generates completions for chat prompts.

Imported only when a model is logged or loaded (it subclasses ``mlflow.pyfunc.PythonModel``).
"""

from __future__ import annotations

import os
from typing import Any

import mlflow.pyfunc

ARTIFACT_KEY = "model"
"""Name of the artifact that holds the Hugging Face model folder."""

DEFAULT_PARAMS: dict[str, Any] = {"max_new_tokens": 1024, "temperature": 0.0}
"""Inference params accepted by ``predict`` (declared in the logged signature)."""


def _prompts(model_input: Any) -> list[str]:
    """Prompts from a string, a list of strings, or a DataFrame with a ``prompt`` column."""
    if isinstance(model_input, str):
        return [model_input]
    columns = getattr(model_input, "columns", None)
    if columns is not None:
        column = "prompt" if "prompt" in columns else columns[0]
        return [str(x) for x in model_input[column].tolist()]
    return [str(x) for x in model_input]


class ConductorTextModel(mlflow.pyfunc.PythonModel):
    """Chat completion with a causal LM folder: each input is one user message.

    Params (``predict(..., params=...)``): ``max_new_tokens`` (default 1024) and ``temperature``
    (default 0: greedy).
    """

    def load_context(self, context: Any) -> None:
        """Load the tokenizer and the model from the ``model`` artifact (transformers, CPU)."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import transformers

        folder = context.artifacts[ARTIFACT_KEY]
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left"
        self.model = transformers.AutoModelForCausalLM.from_pretrained(folder)
        self.model.eval()

    def predict(
        self, context: Any, model_input: list[str], params: dict[str, Any] | None = None
    ) -> list[str]:
        """One completion per prompt (a list of user messages; a string is one prompt)."""
        import torch

        params = {**DEFAULT_PARAMS, **(params or {})}
        tok = self.tokenizer
        texts = [
            tok.apply_chat_template(
                [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
            )
            if getattr(tok, "chat_template", None)
            else p
            for p in _prompts(model_input)
        ]
        enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        temperature = float(params["temperature"])
        kwargs: dict[str, Any] = {
            "max_new_tokens": int(params["max_new_tokens"]),
            "pad_token_id": tok.pad_token_id,
            "do_sample": temperature > 0,
        }
        if temperature > 0:
            kwargs["temperature"] = temperature
        with torch.inference_mode():
            out = self.model.generate(**enc, **kwargs)
        width = enc["input_ids"].shape[1]
        return [tok.decode(row, skip_special_tokens=True) for row in out[:, width:]]
