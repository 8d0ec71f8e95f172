"""The MLflow pyfunc wrapper of a registered Conductor: the Hugging Face folder is the model's
artifact ``model`` (byte for byte), and ``predict`` generates completions for chat prompts: each
input is one user message, or a whole chat as a JSON list of ``{"role", "content"}`` messages (a
recursion round: the question, the previous plan as the assistant's turn, the recursion turn).

Imported only when a model is logged or loaded (it subclasses ``mlflow.pyfunc.PythonModel``).
"""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

import mlflow.pyfunc

ARTIFACT_KEY = "model"
"""Name of the artifact that holds the Hugging Face model folder."""

DEFAULT_PARAMS: dict[str, Any] = {"max_new_tokens": 1024, "temperature": 0.0}
"""Inference params accepted by ``predict`` (declared in the logged signature)."""

EXAMPLE_QUESTION = "How many positive divisors does 360 have?"

INPUT_EXAMPLE: list[str] = [
    json.dumps([{"role": "user", "content": EXAMPLE_QUESTION}]),
]
"""The logged model's input example: one question as an OpenAI chat request's ``messages`` (a
JSON list of ``{"role", "content"}``), which ``predict`` takes as one input."""


def _prompts(model_input: Any) -> list[str]:
    """Prompts from a string, a list of strings, or a DataFrame with a ``prompt`` column."""
    if isinstance(model_input, str):
        return [model_input]
    columns = getattr(model_input, "columns", None)
    if columns is not None:
        column = "prompt" if "prompt" in columns else columns[0]
        return [str(x) for x in model_input[column].tolist()]
    return [str(x) for x in model_input]


ROLES = frozenset({"system", "user", "assistant"})


def conversation(prompt: str) -> list[dict[str, str]]:
    """The chat messages of one input: a JSON list of ``{"role", "content"}`` messages (roles
    system, user, assistant) as they are, anything else as one user message."""
    text = prompt.strip()
    if text.startswith("["):
        try:
            messages = json.loads(text)
        except ValueError:
            messages = None
        if (
            isinstance(messages, list)
            and messages
            and all(
                isinstance(m, dict)
                and set(m) == {"role", "content"}
                and m["role"] in ROLES
                and isinstance(m["content"], str)
                for m in messages
            )
        ):
            return messages
    return [{"role": "user", "content": prompt}]


# MLflow asks for type hints on ``predict`` when the class is defined; it has none on purpose.
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message=".*type hints to the `predict` method")

    class ConductorTextModel(mlflow.pyfunc.PythonModel):
        """Chat completion with a causal LM folder: each input is one user message, or a chat as a
        JSON list of messages (:func:`conversation`).

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

        def predict(self, context, model_input, params=None):
            """One completion per prompt (a list of inputs, each a user message or a JSON chat; a
            string is one input).

            No type hints: from hints MLflow infers a signature and, given an input example, loads
            the weights and runs ``predict`` while logging the model (the signature is given)."""
            import torch

            params = {**DEFAULT_PARAMS, **(params or {})}
            tok = self.tokenizer
            texts = [
                tok.apply_chat_template(conversation(p), tokenize=False, add_generation_prompt=True)
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
