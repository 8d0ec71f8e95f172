"""Turn a user's ``--conductor`` value into a plan source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from conductor_core.errors import ConductorError
from conductor_core.policy.base import PlanSource
from conductor_core.policy.local import TransformersPlanSource
from conductor_core.policy.openai_policy import OpenAIPlanSource
from conductor_core.policy.pretrained import is_pretrained_name, pretrained_model_dir
from conductor_core.policy.scripted import ScriptedPlanSource
from conductor_core.policy.tiny import default_tiny_dir
from conductor_core.track.registry import load_model_dir

ACCEPTED_FORMS = (
    "'scripted' (deterministic heuristic plans), 'tiny' (the built-in tiny local model), "
    "'smollm2-135m-instruct' (the bundled pretrained SmolLM2-135M-Instruct, offline), "
    "an http(s) URL of an OpenAI-compatible endpoint serving the Conductor, "
    "a local model directory written by save_pretrained, "
    "or a registered or stored model (models:/NAME@ALIAS, runs:/..., s3://BUCKET/PREFIX)"
)
REMOTE_MODEL_PREFIXES = ("models:/", "runs:/", "s3://")


def load_plan_source(
    spec: str,
    *,
    model: str | None = None,
    api_key_env: str | None = None,
    plan_grammar: bool = True,
    temperature: float | None = None,
    plan_tokens: int | None = None,
    **kw: Any,
) -> PlanSource:
    """The plan source that ``spec`` names.

    * ``"scripted"``: :class:`~conductor_core.policy.scripted.ScriptedPlanSource` (``kw``: routes,
      verify);
    * ``"tiny"``: the default tiny Conductor (built on first use) on transformers (``kw`` as for
      :class:`~conductor_core.policy.local.TransformersPlanSource`);
    * ``"smollm2-135m-instruct"``: the bundled pretrained SmolLM2-135M-Instruct (its 4-bit GGUF
      dequantized, converted on first use: :mod:`~conductor_core.policy.pretrained`), as a
      directory; the name wins over a folder of that name (give ``./smollm2-135m-instruct``);
    * ``http://...`` or ``https://...``: :class:`~conductor_core.policy.openai_policy.
      OpenAIPlanSource`; ``model`` names the served model (None: the only one the server lists);
    * an existing directory: a :class:`~conductor_core.policy.local.TransformersPlanSource`;
    * ``models:/NAME@ALIAS`` (a registered model, e.g. what the training pipeline registered),
      ``runs:/...`` or ``s3://...``: the model folder is downloaded
      (:func:`~conductor_core.track.registry.load_model_dir`), then as a directory.

    ``plan_grammar`` (local models: ``tiny``, a directory, a stored model): decode under the plan
    grammar (:mod:`~conductor_core.policy.plan_mask`), so that the model cannot write a malformed
    plan; False lets it write unaided. Scripted plans are always well formed; a URL Conductor is
    sent the grammar by ``structured=True`` (vLLM's structured outputs) instead.

    ``temperature`` (a learned Conductor, local or at a URL): its sampling temperature, 0 for
    greedy decoding; None keeps the plan source's default, 1.0 (GRPO's sampling, the paper's).
    ``plan_tokens``: the most tokens it writes for a plan; None keeps the default (a trained
    model folder's own plan length, else 1024). Neither has an effect on ``"scripted"``.

    Anything else raises :class:`ConductorError` naming the accepted forms. No model is
    loaded here; only ``"tiny"`` (built on first use), ``"smollm2-135m-instruct"`` (converted on
    first use) and the stored forms (downloaded) do work.
    """
    text = (spec or "").strip()
    lowered = text.lower()
    if lowered == "scripted":
        return ScriptedPlanSource(**kw)
    decoding: dict[str, Any] = {}
    if temperature is not None:
        if temperature < 0:
            raise ConductorError(f"the Conductor's temperature must be >= 0, got {temperature}")
        decoding["temperature"] = temperature
    if plan_tokens is not None and plan_tokens < 1:
        raise ConductorError(f"the Conductor's plan tokens must be >= 1, got {plan_tokens}")
    if lowered.startswith(("http://", "https://")):
        if plan_tokens is not None:
            decoding["max_tokens"] = plan_tokens
        return OpenAIPlanSource(text, model, api_key_env=api_key_env, **decoding, **kw)
    if plan_tokens is not None:
        decoding["max_new_tokens"] = plan_tokens
    local = {"plan_grammar": plan_grammar, **decoding, **kw}
    if lowered == "tiny":
        return TransformersPlanSource(default_tiny_dir(), **local)
    if is_pretrained_name(text):
        return TransformersPlanSource(pretrained_model_dir(), **local)
    if lowered.startswith(REMOTE_MODEL_PREFIXES):
        return TransformersPlanSource(load_model_dir(text), **local)
    if text:
        path = Path(text).expanduser()
        if path.is_dir():
            if not (path / "config.json").is_file():
                raise ConductorError(
                    f"--conductor: {text} has no config.json, so it is not a model directory; "
                    f"give a directory written by save_pretrained"
                )

            return TransformersPlanSource(path, **local)
        if path.exists():
            raise ConductorError(f"--conductor: {text} is a file, not a model directory")
    raise ConductorError(f"--conductor: cannot use {text!r}; give {ACCEPTED_FORMS}")
