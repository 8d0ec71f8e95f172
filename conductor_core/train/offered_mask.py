"""Sampling masks in the loss: the adaptive stage's offered mask and the recursive stage's
round-2 plan grammar, so that each stage trains the policy that deployment runs.

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

The recursive stage's ``recursive.round2_grammar`` is the same construction over the whole plan:
round 2 is sampled under the plan grammar (:mod:`~conductor_core.train.grammar_sampling`), and
each of its tokens is scored as ``log pi(a) - log Z``, ``Z`` the policy's mass on the tokens the
grammar allowed there (:func:`grammar_log_probs`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["backbone_and_head", "grammar_log_probs", "masked_log_probs", "slot_tensor"]


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
    bits = slots[rows, cols]
    powers = torch.arange(len(pool_tokens), device=bits.device)
    masked = ((bits.unsqueeze(1) >> powers) & 1).bool()  # (n, P)
    allowed = torch.ones(logits.shape, dtype=torch.bool, device=logits.device)
    allowed[:, list(pool_tokens)] = ~masked.to(logits.device)
    return _renormalised(log_probs, logits, rows, cols, allowed)


def grammar_log_probs(
    log_probs: Any, hidden: Any, head: Any, allowed: Any, temperature: float = 1.0
) -> Any:
    """``log_probs`` (B, T) of the sampled completion tokens, each replaced by its
    log-probability under the plan grammar it was sampled under: ``log pi(a) - log Z``, where
    ``Z`` is the probability the policy gives the tokens the grammar allows there.

    ``allowed`` (B, T, V) holds the allowed tokens at each position
    (:meth:`~conductor_core.policy.plan_mask.PlanLogitsProcessor.allowed`; a position allowing
    every token is left as it is); ``hidden`` and ``head`` as for :func:`masked_log_probs`.
    Differentiable in ``log_probs`` and ``hidden``.
    """
    import torch

    rows, cols = torch.nonzero(~allowed.all(dim=-1), as_tuple=True)
    if rows.numel() == 0:
        return log_probs
    logits = head(hidden[rows, cols]).float() / temperature
    ok = allowed[rows, cols].to(logits.device)
    width = min(ok.shape[1], logits.shape[1])
    keep = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
    keep[:, :width] = ok[:, :width]
    return _renormalised(log_probs, logits, rows, cols, keep)


def _renormalised(log_probs: Any, logits: Any, rows: Any, cols: Any, allowed: Any) -> Any:
    """``log_probs`` with the entries at ``(rows, cols)`` moved to the distribution renormalised
    over ``allowed`` (n, V): minus the log of the mass ``logits`` (n, V) give the allowed tokens.
    The sampled token was allowed, so that mass is never 0."""
    import torch

    log_z = torch.logsumexp(
        torch.log_softmax(logits, dim=-1).masked_fill(~allowed, float("-inf")), dim=1
    )
    out = log_probs.clone()
    out[rows, cols] = log_probs[rows, cols] - log_z.clamp(max=0.0).to(log_probs.dtype)
    return out
