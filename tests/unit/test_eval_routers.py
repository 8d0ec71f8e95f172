"""Router baselines (Smoothie, RouterDC, MASRouter) and the bare-question single workers, without
running them on a pool: what each sends to the workers, the triplet estimate, MASRouter's
surrogate reward and plans, and a missing router folder (on the bundled simulated pool with the
real sentence encoder: tests/integration/test_eval_routers.py)."""

from __future__ import annotations

import asyncio
import importlib.util

import pytest

from conductor_core.evaluate.methods import (
    BareQuestionCaller,
    PlanSourceMethod,
    SelfConsistencyMethod,
    mixture_of_agents,
)
from conductor_core.evaluate.routers.masrouter import build_plan, surrogate_reward
from conductor_core.evaluate.routers.smoothie import triplet_errors
from conductor_core.evaluate.specs import build_baselines
from conductor_core.tasks.problem import Problem
from conductor_core.workers.config import load_pool
from conductor_core.workers.types import CallResult, Usage
from conductor_core.workflow.prompts import worker_message


def pool_path():
    from importlib import resources

    return resources.files("conductor_core.resources") / "train" / "pool.yaml"


class Recorder:
    """A fake pool that records the messages each worker receives."""

    def __init__(self, n: int = 2) -> None:
        self.n = n
        self.sent: list[tuple[int, str]] = []
        self.config = load_pool(str(pool_path()))

    def __len__(self) -> int:
        return self.n

    def worker(self, worker_id: int):
        return self.config.workers[worker_id]

    async def call(self, worker_id, messages, *, sample_index=0, deadline=None, priority=0.0):
        self.sent.append((worker_id, messages[-1]["content"]))
        return CallResult(
            worker=worker_id,
            model="m",
            text="The answer is 42.",
            usage=Usage(input_tokens=1, output_tokens=1),
        )


QUESTION = "What is 6 * 7?\nAnswer with a number."


def _problem() -> Problem:
    return Problem(id="q", source="t", domain="math", question=QUESTION, reference="42")


def test_single_worker_and_self_consistency_send_the_bare_question() -> None:
    pool = Recorder()
    config = pool.config
    single = build_baselines(["single:1"], config)[0]
    sc = build_baselines(["sc:0:3"], config)[0]
    assert isinstance(sc, SelfConsistencyMethod)
    asyncio.run(single.attempt(_problem(), pool, 0))
    asyncio.run(sc.attempt(_problem(), pool, 0))
    assert pool.sent == [(1, QUESTION)] + [(0, QUESTION)] * 3


def test_multi_agent_plans_still_get_the_worker_message() -> None:
    pool = Recorder()
    moa = PlanSourceMethod("moa", mixture_of_agents([0, 1], 1))
    asyncio.run(moa.attempt(_problem(), pool, 0))
    assert len(pool.sent) == 3
    assert all(text != QUESTION and "<question>" in text for _, text in pool.sent)
    assert pool.sent[0][1] == worker_message(QUESTION, [], pool.sent[0][1].split("\n")[-1])


def test_bare_question_caller_passes_the_call_through() -> None:
    pool = Recorder()
    caller = BareQuestionCaller(pool, QUESTION)
    assert len(caller) == 2 and caller.worker(1).name == "sim-choice"
    alone = worker_message(QUESTION, [], "Solve it.")
    asyncio.run(caller.call(1, [{"role": "user", "content": alone}], sample_index=3))
    assert pool.sent == [(1, QUESTION)]
    # A step that reads earlier steps keeps its whole message.
    reads = worker_message(QUESTION, [(0, "Solve it.", "42")], "Check it.")
    asyncio.run(caller.call(0, [{"role": "user", "content": reads}]))
    assert pool.sent[-1] == (0, reads)


@pytest.mark.skipif(importlib.util.find_spec("numpy") is None, reason="numpy")
def test_triplet_estimate_finds_the_least_noisy_voter() -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    y = rng.normal(size=(200, 1, 16))
    noise = np.array([0.1, 1.0, 1.0, 2.0])[None, :, None]
    lam = y + rng.normal(size=(200, 4, 16)) * noise
    err = triplet_errors(lam)
    assert int(np.argmin(err)) == 0 and int(np.argmax(err)) == 3
    assert err[0] < err[1] < err[3]


def test_masrouter_surrogate_and_plans() -> None:
    assert surrogate_reward("single", [1.0], 0.9) == 1.0
    assert surrogate_reward("chain", [1.0, 0.0], 0.9) == pytest.approx(0.9)
    assert surrogate_reward("debate", [0.0, 0.0, 0.0], 0.9) == 0.0
    wf = build_plan("debate", ["solver", "analyst", "solver"], [0, 1, 2])
    assert wf.worker_ids() == [0, 1, 2]
    assert [s.access_literal() for s in wf.steps] == [[], [], ["all"]]


def test_unknown_router_folder_is_a_clear_error(tmp_path) -> None:
    from conductor_core.errors import ConductorError

    config = load_pool(str(pool_path()))
    with pytest.raises(ConductorError, match="fit_routerdc"):
        build_baselines([f"routerdc:{tmp_path}"], config)
    with pytest.raises(ConductorError, match="CONDUCTOR_ROUTER_DIR"):
        build_baselines(["masrouter"], config)


class _TableEncoder:
    """A stand-in encoder: fixed vectors per text (its results cannot depend on batching)."""

    def __init__(self, table: dict[str, list[float]]) -> None:
        self.table = table

    def encode(self, texts):
        import numpy as np

        return np.asarray([self.table[t] for t in texts], dtype=np.float32)


def test_smoothie_ties_go_to_the_first_worker_and_the_reference_reads_the_lowest_repeat() -> None:
    """Equal answers tie exactly: the pick must not depend on floating-point summation order,
    and a reference built from records written in completion order must not depend on it."""
    from conductor_core.evaluate.routers.smoothie import reference_from_records, smoothie_choice
    from tests.support.eval_records import eval_record

    enc = _TableEncoder({"4": [1.0, 0.0], "5": [0.0, 1.0], "q": [1.0, 0.0], "6": [0.6, 0.8]})
    # workers 1 and 3 say "4", workers 0 and 2 say "5": two exact ties, the first in pool order
    assert smoothie_choice(["5", "4", "5", "4"], enc) == 0
    assert smoothie_choice(["4", "5", "4", "5"], enc) == 0

    problem = Problem(id="p", source="t", domain="math", question="q", reference="4")

    def record(method: str, repeat: int, answer: str):
        return eval_record("p", method, repeat=repeat, sample_index=repeat, answer=answer)

    methods = ["a", "b", "c"]
    late_first = [record("a", 1, "6"), record("a", 0, "4"), record("b", 0, "5")]
    late_first.append(record("c", 0, "4"))
    ref = reference_from_records(late_first, [problem], methods, enc)
    assert ref.answers[0, 0].tolist() == [1.0, 0.0]  # repeat 0's "4", not repeat 1's "6"


def test_masrouter_learns_from_executed_outcomes(tmp_path) -> None:
    """The executed reward (issue 25 §6): each sampled system goes to the executor, and the
    controller learns from what comes back: here worker 1 answers math right and worker 2 code,
    whoever answers last; worker 0's runs are spoiled by infrastructure (left out, no crash)."""
    import json

    import numpy as np

    from conductor_core.evaluate.routers.encoder import SentenceEncoder
    from conductor_core.evaluate.routers.masrouter import ROLES, MASRouterConfig, fit_masrouter

    rng = np.random.default_rng(0)
    problems = [
        Problem(id=f"{d}{i}", source="t", domain=d, question=f"{d} question {i}", reference="1")
        for d in ("math", "code")
        for i in range(8)
    ]
    table = {p.question: [1.0, 0.0] if p.domain == "math" else [0.0, 1.0] for p in problems}
    for text in table:
        table[text] = list(np.asarray(table[text]) + rng.normal(scale=0.05, size=2))
    for k, (_, description) in enumerate(ROLES):
        table[description] = [np.cos(k), np.sin(k)]
    seen: list[tuple[Problem, object]] = []

    def execute(plans):
        seen.extend(plans)
        out = []
        for problem, plan in plans:
            last = plan.steps[-1].worker
            if last == 0:
                out.append(None)
            else:
                out.append(float(last == (1 if problem.domain == "math" else 2)))
        return out

    class StandIn(SentenceEncoder):
        """The table encoder where fit_masrouter takes a SentenceEncoder (named, no model)."""

        def __init__(self) -> None:
            self.name, self.location, self.table = "stand-in", "none", _TableEncoder(table)

        def encode(self, texts):
            return self.table.encode(texts)

    cfg = MASRouterConfig(epochs=40, samples=8, batch_size=16, seed=0)
    folder = fit_masrouter(
        [],
        problems,
        tmp_path / "mas",
        worker_methods=["single:a", "single:b", "single:c"],
        encoder=StandIn(),
        config=cfg,
        execute=execute,
    )
    assert len(seen) == cfg.epochs * len(problems) * cfg.samples
    assert all(0 <= s.worker <= 2 for _, plan in seen for s in plan.steps)
    meta = json.loads((folder / "router.json").read_text())
    assert meta["reward"] == "executed"
    history = meta["reward_history"]
    # From a random pick (about a third right) to the domain's worker almost always (seeds 0-2:
    # first epoch 0.39-0.40, last 0.96, reward net of the calls' cost).
    assert history[0] < 0.6 and history[-1] > 0.85
