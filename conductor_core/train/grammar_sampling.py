"""Sampling under the plan grammar during training (the recursive stage's
``recursive.round2_grammar``).

A Conductor is deployed decoding under the plan grammar, so in a recursion round it chooses
between the keep plan and a plan that parses: it cannot write a malformed one. Sampled unaided,
round 2 has a third way out, a plan that does not parse (which deployment would also treat as
keeping the answer), and a policy that finds it stops exploring the keep plan itself. Under the
grammar, the stage samples the deployed policy ``pi_G(a | h) = pi(a | h) / Z(h)`` (``Z``: the
policy's mass on the tokens the grammar allows after ``h``), records the allowed tokens at every
step, and the loss scores each token as ``log pi - log Z``
(:func:`~conductor_core.train.offered_mask.grammar_log_probs`): the policy gradient of the deployed
policy's expected reward, with no importance ratio.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from conductor_core.train.generate_hook import generate_hook

__all__ = ["allowed_tensor", "generating_under"]


@contextmanager
def generating_under(model: Any, processor: Any | None) -> Iterator[Any]:
    """Within the block, ``model.generate`` appends ``processor`` (a transformers logits
    processor; None leaves ``generate`` alone) to the logits processors of every call."""
    if processor is None:
        yield model
        return
    with generate_hook(model, lambda _ids, _mask: processor):
        yield model


def allowed_tensor(
    masks: Any, rows: Sequence[int], total: int, length: int, device: Any = None
) -> Any:
    """A batch's allowed tokens, ``(total, length, V)`` bool: row ``rows[k]`` takes ``masks[k]``
    (the ``(len(rows), steps, V)`` masks its generate call recorded, cut or padded to ``length``
    completion tokens); every other position allows every token (its row was sampled unaided)."""
    import torch

    if len(rows) != masks.shape[0]:
        raise ValueError(f"{masks.shape[0]} recorded rows for {len(rows)} batch rows")
    vocab = max(1, int(masks.shape[2]))
    out = torch.ones((total, length, vocab), dtype=torch.bool)
    steps = min(length, int(masks.shape[1]))
    if steps and rows:
        out[list(rows), :steps] = masks[:, :steps].bool()
    return out.to(device) if device is not None else out
