"""The offered mask: the adaptive stage trains the policy that deployment runs.

A Conductor is deployed decoding under the plan grammar (a local model through a logits mask in
``conductor_core.policy``, a served one through vLLM's structured outputs), which
lets a plan name only the workers its prompt offers. So the policy deployment runs is the model's
distribution with the unoffered workers' ids removed at every worker slot and the rest
renormalised: ``pi_A(a | h) = pi(a | h) / (1 - sum over unoffered ids u of pi(u | h))``.

With ``adaptive.mask_unoffered`` the adaptive stage optimises that policy exactly. Sampling masks
the unoffered ids at each slot (:func:`~conductor_core.train.exploration.routing_exploration`,
which records the masked slots), and the loss's log-probability of each token at a masked slot
is ``log pi_A``, computed from the same forward pass as TRL's (:func:`masked_log_probs`): the
gradient is the policy gradient of ``pi_A``'s expected reward, with no importance ratio (the
sampled token is the policy's own choice). What the stage then learns is a ranking of the offered
workers for each question, not the syntax of the model list; a plan that names an unoffered
worker cannot be sampled, as it cannot be written at deployment.

Only the worker-id slots are masked, and only ids written as one token (every id of a pool of up
to ten workers with Qwen tokenizers); the rest of the plan is sampled as the model writes it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["backbone_and_head", "masked_log_probs", "slot_tensor"]


def slot_tensor(log: Sequence[dict[int, int]], length: int, device: Any = None) -> Any:
    """The masked slots of a batch as a ``(rows, length)`` int64 tensor: at each completion
    position, the bit set of the pool ids masked there (0: no mask)."""
    import torch

    out = torch.zeros((len(log), length), dtype=torch.int64, device=device)
    for row, slots in enumerate(log):
        for position, bits in slots.items():
            if position < length:
                out[row, position] = bits
    return out


def backbone_and_head(model: Any) -> tuple[Any, Any]:
    """The module whose output holds the last hidden states (the one TRL's fused LM head calls)
    and the LM head, of an unwrapped causal LM or a PEFT model around one."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.base_model, base.get_output_embeddings()


def masked_log_probs(
    log_probs: Any,
    hidden: Any,
    head: Any,
    slots: Any,
    pool_tokens: Sequence[int],
    temperature: float = 1.0,
) -> Any:
    """``log_probs`` (B, T) of the sampled completion tokens, with each masked slot's entry
    replaced by its log-probability under the offered mask: ``log pi(a) - log(1 - m)``, where
    ``m`` is the probability the policy gives the ids masked there.

    ``hidden`` (B, T, H) are the last hidden states that predict those tokens, ``head`` the LM
    head, ``slots`` (B, T) the bit sets of :func:`slot_tensor` and ``pool_tokens`` the token of
    each pool id; logits are divided by ``temperature`` as TRL does. Differentiable in
    ``log_probs`` and ``hidden``.
    """
    import torch

    rows, cols = torch.nonzero(slots, as_tuple=True)
    if rows.numel() == 0:
        return log_probs
    logits = head(hidden[rows, cols]).float() / temperature
    pool_log_probs = torch.log_softmax(logits, dim=-1)[:, list(pool_tokens)]  # (n, P)
    bits = slots[rows, cols]
    powers = torch.arange(len(pool_tokens), device=bits.device)
    masked = ((bits.unsqueeze(1) >> powers) & 1).bool()
    log_m = torch.logsumexp(pool_log_probs.masked_fill(~masked, float("-inf")), dim=1)
    # log(1 - m), kept finite when the policy puts (almost) all its mass on masked ids
    log_keep = torch.log1p(-torch.exp(log_m).clamp(max=1.0 - 1e-6))
    out = log_probs.clone()
    out[rows, cols] = log_probs[rows, cols] - log_keep.to(log_probs.dtype)
    return out
