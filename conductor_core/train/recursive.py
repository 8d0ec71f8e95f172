"""The recursive stage: part of each batch forced into a second round (the trainer:
:class:`~conductor_core.train.trainers.RecursiveGRPOTrainer`; here its layout, advantages, prompts
and metrics).

A generation batch holds ``B`` groups of ``G`` plans (one group per question). The first
``2 * pairs`` groups form ``pairs`` forced trajectories, ``pairs = round(B * forced_fraction / 2)``
(so ``forced_fraction`` 0.5 forces half of the batch's plans into a second round, as the paper
does): group ``2j`` holds round-1 plans for a question, and group ``2j + 1`` holds round-2 plans
for the same question, each written after seeing a round-1 plan of group ``2j`` and its final
answer (a new plan, or three empty lists to keep the answer). Other groups are ordinary
single-round groups (under data parallelism the pairs are laid out over the whole step's
batch and each rank holds whole pairs: :func:`rank_pairs`). Row ``i`` of a round-2 group
continues row ``i`` of its round-1 group (the paper's sampling), so every forced pair brings
``G`` recursion contexts, each drawn as the policy answers.

Rewards: a round-1 row scores its own answer; a round-2 row scores the final answer after the
second round (both through :func:`~conductor_core.solve.solve`). A round-2 plan that does not
parse, or fails by its own fault, scores 0 as in round 1 (the paper's rule), although deployment
keeps the previous answer then; ``experimental.truncated_is_format_error`` also makes a cut-off
plan a format error, not run, even when its lists parse. Round-1 groups get GRPO's group-normalised
advantages, those of forced round-1 rows multiplied by ``first_round_discount`` (the paper:
0.25). A round-2 row's advantage is measured against what keeping is worth, known exactly: its
final reward minus the reward of the round-1 answer it continues. That baseline depends on the
context only, so the gradient stays the policy gradient of the final reward; keeping has
advantage 0, a new plan gains what it adds to the kept answer and loses what it takes away.

Generation goes through TRL's own backend (transformers or vLLM), round 2 with one sample per
prompt, under the routing floor but without routing coverage (coverage would write a worker id at
every slot and so rule out the keep plan; the floor leaves the keep plan ``1 - floor`` of its
probability and is importance-corrected like round 1's). With ``recursive.round2_grammar``
(transformers only) round 2 is sampled under the plan grammar, as deployment decodes it, and
trained as that policy (:mod:`~conductor_core.train.grammar_sampling`): every round-2 plan is
then the keep plan or one that parses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from conductor_core.outcome import Outcome
from conductor_core.policy.base import PlanRequest
from conductor_core.workflow.model import AccessMode
from conductor_core.workflow.parser import try_parse_plan
from conductor_core.workflow.prompts import plan_messages

_Item = TypeVar("_Item")


@dataclass
class _Batch:
    inputs: list[dict[str, Any]]
    pairs: int
    first_rows: list[int] = field(default_factory=list)
    second_rows: list[int] = field(default_factory=list)


def forced_pairs(groups: int, fraction: float) -> int:
    """How many (round-1, round-2) group pairs a batch of ``groups`` groups gets."""
    return max(0, min(groups // 2, round(groups * fraction / 2)))


def rank_pairs(groups: int, fraction: float, rank: int = 0, world_size: int = 1) -> int:
    """The forced pairs among this rank's ``groups`` groups under data parallelism.

    The pairs are laid out over the whole step's batch (``groups x world_size`` groups, each
    rank holding a contiguous run of them): the first ``2 * forced_pairs(all groups)`` groups
    are paired, so ``fraction`` is the share of the step's plans, not of each rank's, and two
    groups per rank still give forced pairs. A rank holds an even number of groups
    (:func:`~conductor_core.train.grpo.rank_batch` checks it), so no pair spans two ranks.
    """
    paired_groups = 2 * forced_pairs(groups * world_size, fraction)
    mine = min(groups, max(0, paired_groups - rank * groups))
    return mine // 2


def pair_rows(pairs: int, group: int) -> tuple[list[int], list[int]]:
    """The batch layout of ``pairs`` forced trajectories of ``group`` plans each: the round-1
    rows and the round-2 rows, round-2 row ``k`` continuing round-1 row ``k``."""
    first: list[int] = []
    second: list[int] = []
    for j in range(pairs):
        a, b = 2 * j * group, (2 * j + 1) * group
        first.extend(range(a, a + group))
        second.extend(range(b, b + group))
    return first, second


def discount_rows(advantages: Any, rows: list[int], factor: float) -> None:
    """Multiply the advantages of ``rows`` by ``factor`` in place (rows past the end, which another
    process holds under data parallelism, are skipped)."""
    if factor == 1.0 or not rows:
        return
    kept = [r for r in rows if r < advantages.shape[0]]
    advantages[kept] = advantages[kept] * factor


def measure_against_keeping(
    advantages: Any,
    first_rows: Sequence[int],
    second_rows: Sequence[int],
    rewards: Sequence[float | None],
    firsts: Mapping[int, Outcome],
) -> None:
    """Set each round-2 row's advantage, in place, against the exact value of keeping: its
    reward (``rewards``, what the trainer gets) less the reward of keeping the round-1 answer it
    continues (``firsts[row].kept_reward``, by round-1 row), one value for every token of the row;
    0 where either is unknown (left out). Rows another process holds are skipped."""
    for row, source in zip(second_rows, first_rows, strict=True):
        if row >= advantages.shape[0] or row >= len(rewards):
            continue  # another process holds it
        first = firsts.get(source)
        final = rewards[row]
        kept = None if first is None else first.kept_reward
        advantages[row] = 0.0 if final is None or kept is None else final - kept


def round_metrics(
    first_rows: Sequence[int], second_rows: Sequence[int], outcomes: Sequence[Outcome]
) -> dict[str, float]:
    """A step's ``recursion/*`` metrics from its batch's ``outcomes`` (in row order): keep rates
    by round-1 correctness and rewards by round (:func:`recursion_metrics`), the round-2 rows, and
    the forced round-1 rows' format errors."""
    seconds = [outcomes[r] for r in second_rows]
    firsts = [outcomes[r] for r in first_rows]
    got = recursion_metrics(firsts, seconds)
    parsed = [o for o in seconds if o.plan_ok]
    return {
        "recursion/second_round_rows": float(len(second_rows)),
        # Round-1 format errors, the keep plan among them: what round 2 learns leaking into
        # round 1 shows here first.
        "recursion/first_format_error_rate": sum(o.format_error for o in firsts) / len(firsts),
        "recursion/keep_rate": sum(1 for o in parsed if o.kept) / len(parsed) if parsed else 0.0,
        **{
            f"recursion/{key}": got[key]
            for key in (
                "keep_when_right",
                "keep_when_wrong",
                "keep_discrimination",
                "answer_kept_when_right",
                "revise_when_wrong",
                "new_plan_discrimination",
                "first_reward",
                "final_reward",
            )
        },
    }


def is_keep_text(text: str, max_steps: int, access_mode: AccessMode | str) -> bool:
    """True when a round-2 completion parses as the keep plan (three empty lists)."""
    workflow, _ = try_parse_plan(
        text,
        workers=None,
        max_steps=max_steps,
        access_mode=AccessMode(access_mode),
        allow_empty=True,
    )
    return workflow is not None and workflow.is_keep


def prompt_token_ids(tokenizer: Any, request: PlanRequest) -> list[int]:
    """The token ids of the prompt asking for ``request``'s plan: its messages
    (:func:`~conductor_core.workflow.prompts.plan_messages`; in a recursion round the round-1
    prompt, the previous plan as the model's own turn, then the recursion turn) in the
    tokenizer's chat template, ending with the generation prompt."""
    chat = tokenizer.apply_chat_template(
        plan_messages(request), tokenize=False, add_generation_prompt=True
    )
    return list(tokenizer(chat, add_special_tokens=False)["input_ids"])


def by_first_answer(
    firsts: Sequence[Outcome], items: Sequence[_Item]
) -> tuple[list[_Item], list[_Item]]:
    """``items`` (same order as ``firsts``) split into those after a right round-1 answer and
    those after a wrong one; a round 1 that did not parse or run is in neither."""
    pairs = list(zip(firsts, items, strict=True))
    right = [item for a, item in pairs if a.correct]
    wrong = [item for a, item in pairs if a.plan_ok and not a.correct]
    return right, wrong


def recursion_metrics(firsts: Sequence[Outcome], seconds: Sequence[Outcome]) -> dict[str, float]:
    """Keep/revise rates of round-2 outcomes given the round-1 outcomes (same order).

    ``keep_discrimination`` is P(keep | round 1 right) - P(keep | round 1 wrong): 0 for a policy
    that keeps at random (whatever its keep rate), 1 for one that keeps exactly the right answers.
    As deployment decides (a round-2 plan that does not parse keeps the answer as well, though
    training scores it 0): ``answer_kept_when_right`` is P(no new plan | right) and
    ``new_plan_discrimination`` P(new plan | wrong) - P(new plan | right).
    """
    right, wrong = by_first_answer(firsts, list(zip(firsts, seconds, strict=True)))
    scored1 = [a.reward for a in firsts if a.reward is not None]
    scored2 = [b.reward for b in seconds if b.reward is not None]

    def share(pairs: list[tuple[Outcome, Outcome]], keep: bool) -> float:
        hits = sum(1 for _, b in pairs if b.plan_ok and b.kept == keep)
        return hits / len(pairs) if pairs else 0.0

    keep_right, keep_wrong = share(right, True), share(wrong, True)
    return {
        "keep_when_right": keep_right,
        "keep_when_wrong": keep_wrong,
        "revise_when_wrong": share(wrong, False),
        # As deployment decides: a round-2 plan that does not parse keeps the answer too.
        "answer_kept_when_right": 1.0 - share(right, False) if right else 0.0,
        "new_plan_discrimination": share(wrong, False) - share(right, False),
        "keep_discrimination": keep_right - keep_wrong,
        "first_reward": sum(scored1) / len(scored1) if scored1 else 0.0,
        "final_reward": sum(scored2) / len(scored2) if scored2 else 0.0,
        "round2_format_error_rate": sum(1 for b in seconds if not b.plan_ok) / max(1, len(seconds)),
        "right_first": float(len(right)),
        "wrong_first": float(len(wrong)),
    }
