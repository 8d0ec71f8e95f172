"""Simulated workers: parsing, determinism, skill calibration, formats and failure injection."""

from __future__ import annotations

import asyncio
import re
from random import Random

import pytest

from conductor_core.simulation.answers import broken_code, is_right_text, wrong_math
from conductor_core.simulation.problem_bank import ProblemBank
from conductor_core.simulation.provider import SimulatedProvider, parse_worker_message
from conductor_core.tasks.problem import Domain, Problem, write_jsonl
from conductor_core.workers.bundled import bundled_pool_path, bundled_problems_path
from conductor_core.workers.config import (
    FailureRates,
    PoolConfig,
    WorkerConfig,
    load_pool,
)
from conductor_core.workers.types import ErrorKind, Provider, ProviderError
from tests.support.simulated import ask, make_worker, user, worker_message

MATH = Problem(
    id="m1", source="t", domain=Domain.MATH, question="What is 6 times 7?", reference="42"
)
MCQ = Problem(
    id="q1",
    source="t",
    domain=Domain.MCQ,
    question="Pick the even number.\n\nA. 1\nB. 3\nC. 4\nD. 5",
    reference="C",
    choices=["1", "3", "4", "5"],
)
CODE = Problem(
    id="c1",
    source="t",
    domain=Domain.CODE,
    question="Write f(x) returning x squared.",
    reference="def f(x):\n    return x * x\n",
    tests={
        "kind": "functional",
        "entry_point": "f",
        "test_code": "def check(candidate):\n    assert candidate(3) == 9\n",
    },
)
FREE = Problem(
    id="f1", source="t", domain=Domain.FREEFORM, question="Capital of France?", reference="Paris"
)
FREE2 = Problem(
    id="f2", source="t", domain=Domain.FREEFORM, question="Capital of Italy?", reference="Rome"
)
BANK = ProblemBank([MATH, MCQ, CODE, FREE, FREE2])


def accuracy(provider: SimulatedProvider, problem: Problem, text: str, n: int = 400) -> float:
    async def run() -> float:
        hits = 0
        for i in range(n):
            out = await provider.complete(user(text), sample_index=i)
            hits += is_right_text(problem, out.text)
        return hits / n

    return asyncio.run(run())


# -- parsing --------------------------------------------------------------------------------------


def test_parse_exact_format_with_steps_and_previous_answer():
    text = worker_message(
        "What is 6 times 7?\nShow work.",
        subtask="Check the earlier answers.",
        steps=[("Solve it.", "It is \\boxed{42}."), ("Solve again.", "Maybe 41\nor 43")],
        previous_answer="\\boxed{40}",
    )
    parsed = parse_worker_message(text)
    assert parsed.structured
    assert parsed.question == "What is 6 times 7?\nShow work."
    assert parsed.subtask == "Check the earlier answers."
    assert parsed.previous_answer == "\\boxed{40}"
    assert [(s.agent, s.subtask, s.response) for s in parsed.steps] == [
        ("agent_0", "Solve it.", "It is \\boxed{42}."),
        ("agent_1", "Solve again.", "Maybe 41\nor 43"),
    ]
    assert parsed.visible_texts() == ["It is \\boxed{42}.", "Maybe 41\nor 43", "\\boxed{40}"]


def test_parse_without_steps_and_unformatted_text():
    parsed = parse_worker_message(worker_message("Q?", subtask="Do it."))
    assert parsed.structured and parsed.steps == () and parsed.previous_answer is None
    assert parsed.question == "Q?"
    raw = parse_worker_message("  just a plain question?  ")
    assert not raw.structured
    assert raw.question == "just a plain question?"
    assert raw.subtask == ""


def test_parse_round_trips_the_prompts_module_renderer():
    prompts = pytest.importorskip("conductor_core.workflow.prompts")
    text = prompts.worker_message(
        "What is 6 times 7?",
        [(0, "Solve it.", "\\boxed{42}"), (2, "Check it.", "")],
        "Verify the answers.",
        previous_answer="\\boxed{41}",
    )
    parsed = parse_worker_message(text)
    assert parsed.structured
    assert parsed.question == "What is 6 times 7?"
    assert parsed.subtask == "Verify the answers."
    assert parsed.previous_answer == "\\boxed{41}"
    assert [(s.agent, s.subtask, s.response) for s in parsed.steps] == [
        ("agent_0", "Solve it.", "\\boxed{42}"),
        ("agent_2", "Check it.", ""),
    ]


# -- bank -----------------------------------------------------------------------------------------


def test_bank_lookup_normalises_whitespace_and_falls_back_to_loose_key(tmp_path):
    assert BANK.get("What  is 6\ntimes 7?") is MATH
    assert BANK.get("what is 6 times 7") is MATH  # case and punctuation: loose-key fallback
    assert BANK.get("What is 6 times 8?") is None
    path = tmp_path / "p.jsonl"
    write_jsonl([MATH, FREE], path)
    assert len(ProblemBank.from_file(path)) == 2


def test_bundled_resources_are_complete():
    bank = ProblemBank.bundled()
    counts: dict[str, int] = {}
    for p in bank:
        counts[str(p.domain)] = counts.get(str(p.domain), 0) + 1
        assert p.metadata["split"] in ("train", "test")
        assert re.fullmatch(rf"demo-{p.domain}-\d{{3}}", p.id)
    assert counts == {"math": 20, "mcq": 20, "code": 15, "freeform": 5}
    assert bundled_problems_path().exists()
    pool = load_pool(bundled_pool_path())
    assert len(pool) == 4
    assert all(w.provider == "simulated" and w.concurrency == 16 for w in pool.workers)
    assert len({w.price.output_per_mtok for w in pool.workers}) == 4
    # each domain has a clearly best worker
    for domain, best in (("math", 0), ("mcq", 1), ("code", 2)):
        skills = [w.simulation.skills[domain] for w in pool.workers]
        assert skills.index(max(skills)) == best
        assert max(skills) - sorted(skills)[-2] >= 0.25


def test_bundled_code_references_pass_and_broken_variants_fail():
    def passes(code: str, problem: Problem) -> bool:
        ns: dict = {}
        checker: dict = {}
        try:
            exec(code, ns)
            exec(problem.tests["test_code"], checker)
            checker["check"](ns[problem.tests["entry_point"]])
        except Exception:
            return False
        return True

    code_problems = [p for p in ProblemBank.bundled() if p.domain == Domain.CODE]
    for p in code_problems:
        assert passes(p.reference, p), p.id
        for seed in range(12):
            broken = broken_code(p.reference, "f", Random(seed))
            compile(broken, "<broken>", "exec")
            assert not passes(broken, p), (p.id, broken)


# -- determinism and calibration ------------------------------------------------------------------


def test_same_inputs_same_answer_and_usage():
    a = SimulatedProvider(make_worker(skills={"math": 0.5}), BANK)
    b = SimulatedProvider(make_worker(skills={"math": 0.5}), BANK)
    msgs = user(worker_message(MATH.question))
    ca = asyncio.run(a.complete(msgs, sample_index=3))
    cb = asyncio.run(b.complete(msgs, sample_index=3))
    assert ca == cb
    assert isinstance(a, Provider)


def test_sample_index_and_seed_change_answers():
    p = SimulatedProvider(make_worker(skills={"math": 0.5}), BANK)
    answers = {ask(p, MATH.question, i) for i in range(20)}
    assert len(answers) > 1
    q = SimulatedProvider(make_worker(skills={"math": 0.5}, seed=99), BANK)
    assert [ask(p, MATH.question, i) for i in range(20)] != [
        ask(q, MATH.question, i) for i in range(20)
    ]


@pytest.mark.parametrize("problem", [MATH, MCQ, CODE, FREE], ids=lambda p: str(p.domain))
def test_accuracy_matches_skill(problem):
    skill = 0.7
    p = SimulatedProvider(make_worker(skills={str(problem.domain): skill}), BANK)
    acc = accuracy(p, problem, worker_message(problem.question))
    assert abs(acc - skill) < 0.08, acc


def test_default_skill_for_unlisted_domain():
    p = SimulatedProvider(make_worker(skills={"math": 0.9}, default_skill=0.2), BANK)
    acc = accuracy(p, FREE, FREE.question)
    assert abs(acc - 0.2) < 0.07, acc


def test_visible_right_answer_raises_accuracy_to_verify_skill():
    p = SimulatedProvider(make_worker(skills={"math": 0.2}, verify_skill=0.9), BANK)
    alone = accuracy(p, MATH, worker_message(MATH.question))
    right_step = worker_message(MATH.question, "Verify.", steps=[("Solve.", "So \\boxed{42}.")])
    wrong_step = worker_message(MATH.question, "Verify.", steps=[("Solve.", "So \\boxed{41}.")])
    prev = worker_message(MATH.question, "Refine.", previous_answer="\\boxed{42}")
    assert abs(alone - 0.2) < 0.07
    assert abs(accuracy(p, MATH, right_step) - 0.9) < 0.06
    assert abs(accuracy(p, MATH, prev) - 0.9) < 0.06
    assert abs(accuracy(p, MATH, wrong_step) - 0.2) < 0.07


# -- answer formats -------------------------------------------------------------------------------


def formats(problem: Problem, skill: float) -> list[str]:
    p = SimulatedProvider(make_worker(skills={str(problem.domain): skill}), BANK)
    return [ask(p, problem.question, i) for i in range(10)]


def test_math_format_right_and_wrong():
    for text in formats(MATH, 1.0):
        assert text.rstrip().endswith("\\boxed{42}.")
    for text in formats(MATH, 0.0):
        value = re.findall(r"\\boxed\{([^}]*)\}", text)[-1]
        assert value != "42" and float(value) != 42.0


def test_wrong_math_values_are_plausible_and_different():
    rng = Random(0)
    for ref in ("42", "0", "31.50", "100/3", "-7", "2\\sqrt{3}"):
        for _ in range(20):
            wrong = wrong_math(ref, rng)
            assert wrong != ref and wrong
    assert re.fullmatch(r"-?\d+\.\d\d", wrong_math("31.50", Random(1)))


def test_mcq_format_right_and_wrong():
    for text in formats(MCQ, 1.0):
        assert text.endswith("Answer: C")
    for text in formats(MCQ, 0.0):
        letter = re.findall(r"Answer: ([A-Z])", text)[-1]
        assert letter in "ABD"


def test_code_format_right_and_wrong():
    for text in formats(CODE, 1.0):
        assert "```python\ndef f(x):\n    return x * x\n```" in text
    for text in formats(CODE, 0.0):
        block = re.search(r"```python\n(.*?)\n```", text, re.DOTALL)
        assert block is not None
        ns: dict = {}
        exec(block.group(1), ns)
        with pytest.raises((AssertionError, ValueError, TypeError)):
            assert ns["f"](3) == 9


def test_freeform_right_and_wrong():
    assert set(formats(FREE, 1.0)) == {"Paris"}
    assert set(formats(FREE, 0.0)) == {"Rome"}


def test_unknown_question_gets_generic_answer():
    p = SimulatedProvider(make_worker(), BANK)
    text = ask(p, worker_message("Tell me about tides.", subtask="Explain tides briefly."))
    assert "Explain tides briefly." in text
    assert "\\boxed" not in text and "Answer:" not in text
    assert SimulatedProvider(make_worker(), None).bank is not None


def test_usage_and_token_distribution():
    p = SimulatedProvider(make_worker(output_tokens=100, output_tokens_jitter=10), BANK)
    text = worker_message(MATH.question)

    async def run():
        return [await p.complete(user(text), sample_index=i) for i in range(200)]

    comps = asyncio.run(run())
    assert all(c.usage.input_tokens == len(text) // 4 for c in comps)
    outs = [c.usage.output_tokens for c in comps]
    mean = sum(outs) / len(outs)
    assert 95 < mean < 105
    assert len(set(outs)) > 5


def test_latency_zero_does_not_sleep_and_positive_latency_sleeps():
    slept: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        slept.append(seconds)

    ask(SimulatedProvider(make_worker(), BANK, sleep=fake_sleep), MATH.question)
    assert slept == []
    slow = SimulatedProvider(
        make_worker(latency_ms=200, latency_jitter_ms=20), BANK, sleep=fake_sleep
    )
    for i in range(5):
        ask(slow, MATH.question, i)
    assert len(slept) == 5 and all(0.1 < s < 0.3 for s in slept)


# -- failures -------------------------------------------------------------------------------------


def test_failure_rates_roughly_as_configured():
    rates = FailureRates(rate_limit=0.1, server_error=0.1, timeout=0.05, malformed=0.05)
    p = SimulatedProvider(make_worker(failures=rates), BANK)
    counts: dict[str, int] = {}
    n = 2000

    async def run():
        for i in range(n):
            try:
                await p.complete(user(MATH.question), sample_index=i)
                kind = "ok"
            except ProviderError as exc:
                kind = exc.kind
                assert exc.retryable
            counts[kind] = counts.get(kind, 0) + 1

    asyncio.run(run())
    expected = {
        ErrorKind.RATE_LIMIT: 0.1,
        ErrorKind.SERVER: 0.1,
        ErrorKind.TIMEOUT: 0.05,
        ErrorKind.MALFORMED: 0.05,
        "ok": 0.7,
    }
    for kind, rate in expected.items():
        assert abs(counts.get(kind, 0) / n - rate) < 0.03, (kind, counts)


def test_failure_errors_carry_status_and_retry_after():
    p = SimulatedProvider(make_worker(failures=FailureRates(rate_limit=1.0)), BANK)
    with pytest.raises(ProviderError) as info:
        ask(p, MATH.question)
    assert info.value.status == 429 and info.value.retryable
    assert info.value.retry_after is not None and 0 < info.value.retry_after < 0.1
    s = SimulatedProvider(make_worker(failures=FailureRates(server_error=1.0)), BANK)
    with pytest.raises(ProviderError) as info:
        ask(s, MATH.question)
    assert info.value.status == 500 and info.value.kind == ErrorKind.SERVER


def test_retry_of_same_request_can_succeed_and_attempts_are_deterministic():
    rates = FailureRates(server_error=0.5)

    async def attempts(provider: SimulatedProvider) -> list[str]:
        out = []
        for _ in range(12):
            try:
                out.append((await provider.complete(user(MATH.question))).text)
            except ProviderError as exc:
                out.append(exc.kind)
        return out

    first = asyncio.run(attempts(SimulatedProvider(make_worker(failures=rates), BANK)))
    second = asyncio.run(attempts(SimulatedProvider(make_worker(failures=rates), BANK)))
    assert first == second  # deterministic per (request, attempt number)
    assert ErrorKind.SERVER in first
    successes = {t for t in first if t != ErrorKind.SERVER}
    assert len(successes) == 1  # the answer itself never depends on the attempt


def test_real_graders_agree_with_simulated_right_and_wrong_answers():
    math_grader = pytest.importorskip("conductor_core.tasks.grading.math")
    mcq_grader = pytest.importorskip("conductor_core.tasks.grading.mcq")
    free_grader = pytest.importorskip("conductor_core.tasks.grading.freeform")
    bank = ProblemBank.bundled()

    def grade(problem: Problem, text: str) -> bool:
        if problem.domain == Domain.MATH:
            return math_grader.grade_math(problem.reference, text)[0]
        if problem.domain == Domain.MCQ:
            return mcq_grader.grade_mcq(problem.reference, text, choices=problem.choices)[0]
        return free_grader.rule_match(problem.reference, text)[0]

    for skill, expected in ((1.0, True), (0.0, False)):
        skills = {d: skill for d in ("math", "mcq", "freeform")}
        provider = SimulatedProvider(make_worker(skills=skills), bank)
        for problem in bank:
            if problem.domain == Domain.CODE:
                continue
            text = ask(provider, worker_message(problem.question))
            assert grade(problem, text) is expected, (problem.id, text)


def test_hedging_follows_correctness_and_keeps_answers_gradable():
    from conductor_core.simulation.answers import HEDGES
    from conductor_core.tasks.grading import grade

    def hedged(text: str) -> bool:
        return text.rsplit("\n", 1)[-1] in HEDGES

    for problem in (MATH, MCQ, FREE):
        profile = {
            "skills": {str(problem.domain): 0.5},
            "hedge_when_wrong": 0.8,
            "hedge_when_right": 0.1,
        }
        p = SimulatedProvider(make_worker(**profile), BANK)
        plain = SimulatedProvider(make_worker(skills={str(problem.domain): 0.5}), BANK)
        counts = {True: [0, 0], False: [0, 0]}  # right -> [hedged, total]
        for i in range(400):
            text = ask(p, worker_message(problem.question), i)
            right = is_right_text(problem, text)
            # Hedging draws from its own stream: correctness is the same as without it.
            assert right == is_right_text(problem, ask(plain, worker_message(problem.question), i))
            assert grade(problem, text).correct == right, text
            counts[right][0] += hedged(text)
            counts[right][1] += 1
        assert abs(counts[False][0] / counts[False][1] - 0.8) < 0.1, counts
        assert abs(counts[True][0] / counts[True][1] - 0.1) < 0.07, counts
    never = SimulatedProvider(make_worker(skills={"math": 0.5}), BANK)
    assert not any(hedged(ask(never, MATH.question, i)) for i in range(50))


# -- the bank from the config ---------------------------------------------------------------------


@pytest.fixture
def fresh_bank_cache():
    from conductor_core.simulation.problem_bank import clear_bank_cache

    clear_bank_cache()
    yield
    clear_bank_cache()


def test_provider_finds_its_bank_from_its_config(tmp_path):
    path = tmp_path / "known.jsonl"
    write_jsonl([MATH, FREE], path)
    provider = SimulatedProvider(make_worker(problems=[str(path)], skills={"math": 1.0}))
    assert len(provider.bank) == 2 and provider.bank.get(MATH.question) == MATH
    assert ask(provider, worker_message(MATH.question)).rstrip().endswith("\\boxed{42}.")
    default = SimulatedProvider(make_worker())  # problems: [bundled]
    assert len(default.bank) == len(ProblemBank.bundled())
    nothing = SimulatedProvider(make_worker(problems=[]))
    assert len(nothing.bank) == 0
    assert "\\boxed" not in ask(nothing, worker_message(MATH.question))
    # bank= (tests) replaces the configured problems
    assert SimulatedProvider(make_worker(problems=[str(path)]), bank=BANK).bank is BANK


def test_bank_of_several_files_and_bundled_names(tmp_path):
    from conductor_core.simulation.problem_bank import bank_for
    from conductor_core.workers.bundled import bundled_train_problems_path

    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write_jsonl([MATH], first)
    write_jsonl([MATH.model_copy(update={"id": "m-dup"}), FREE], second)
    bank = bank_for([first, str(second)])
    assert [p.id for p in bank] == ["m1", "m-dup", "f1"]
    assert bank.get(MATH.question).id == "m1"  # the first file wins
    train = bank_for(["bundled-train"])
    assert len(train) > 0 and bundled_train_problems_path().is_file()
    assert bank_for(["bundled"]).get("Capital of France?") is None


def test_relative_problem_path_resolves_against_the_working_directory(tmp_path, monkeypatch):
    from conductor_core.simulation.problem_bank import bank_for

    (tmp_path / "sub").mkdir()
    write_jsonl([FREE], tmp_path / "sub" / "p.jsonl")
    monkeypatch.chdir(tmp_path)
    provider = SimulatedProvider(make_worker(problems=["sub/p.jsonl"]))
    assert [p.id for p in provider.bank] == ["f1"]
    assert bank_for(["sub/p.jsonl"]) is bank_for([tmp_path / "sub" / "p.jsonl"])


def test_missing_problem_file_is_a_config_error(tmp_path):
    from conductor_core.errors import ConfigError
    from conductor_core.workers.pool import WorkerPool

    config = PoolConfig(workers=[make_worker()]).with_simulation_problems(
        [tmp_path / "missing.jsonl"]
    )
    with pytest.raises(ConfigError, match=r"simulation\.problems.*missing\.jsonl"):
        WorkerPool(config)


def test_a_pool_reads_each_problem_file_once(tmp_path, monkeypatch, fresh_bank_cache):
    import os

    from conductor_core.simulation import problem_bank
    from conductor_core.workers.pool import WorkerPool

    reads: list[str] = []
    real_read = problem_bank.read_problems

    def counting_read(path):
        reads.append(str(path))
        return real_read(path)

    monkeypatch.setattr(problem_bank, "read_problems", counting_read)
    path = tmp_path / "known.jsonl"
    write_jsonl([MATH, MCQ], path)
    workers = [make_worker(model=f"sim-{i}", seed=i) for i in range(4)]
    config = PoolConfig(workers=workers).with_simulation_problems([path], replace=True)
    pool = WorkerPool(config)
    banks = {id(p.bank) for p in pool._providers}
    assert reads == [str(path)] and len(banks) == 1
    WorkerPool(config)  # a second pool on the same file: still one read
    other = config.with_simulation_problems(["bundled"])  # another list, same file read once
    WorkerPool(other)
    assert reads.count(str(path)) == 1
    # A changed file is read again.
    write_jsonl([MATH, MCQ, FREE], path)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 1_000_000_000))
    assert len(WorkerPool(config)._providers[0].bank) == 3
    assert reads.count(str(path)) == 2


def test_known_problem_looks_a_question_up_in_the_pools_problems(tmp_path):
    from conductor_core.simulation.problem_bank import known_problem, known_problems

    path = tmp_path / "known.jsonl"
    write_jsonl([FREE], path)
    pool = load_pool(bundled_pool_path())
    question = (
        "A train travels 240 kilometres in 3 hours. At the same speed, how many kilometres "
        "does it travel in 5 hours?"
    )
    assert known_problem(pool, question).id == "demo-math-004"
    assert known_problem(pool, "Capital of France?") is None
    mixed = pool.with_simulation_problems([path])
    assert known_problem(mixed, "Capital of France?") == FREE
    assert len(known_problems(mixed)) == len(ProblemBank.bundled()) + 1
    only = mixed.with_simulation_problems([path], replace=True)
    assert known_problem(only, question) is None
    openai = WorkerConfig(provider="openai", model="m", endpoint="http://127.0.0.1:9/v1")
    assert known_problems(PoolConfig(workers=[openai])) is None
    assert known_problem(PoolConfig(workers=[openai]), question) is None


def test_pool_built_without_a_bank_answers_bundled_problems_at_its_skill():
    from conductor_core.workers.pool import WorkerPool

    config = load_pool(bundled_pool_path())  # no bank anywhere: the workers read `bundled`
    math = [p for p in ProblemBank.bundled() if p.domain == Domain.MATH]

    async def rate(worker: int) -> float:
        async with WorkerPool(config) as pool:
            results = await asyncio.gather(
                *(
                    pool.call(worker, user(worker_message(p.question)), sample_index=k)
                    for p in math
                    for k in range(20)
                )
            )
        texts = [r.text for r in results]
        problems = [p for p in math for _ in range(20)]
        return sum(is_right_text(p, t) for p, t in zip(problems, texts, strict=True)) / len(texts)

    expert = config.workers[0].simulation.skills["math"]  # 0.9
    weak = config.workers[2].simulation.skills["math"]  # 0.4
    assert abs(asyncio.run(rate(0)) - expert) < 0.06  # 400 answers: 3 standard errors
    assert abs(asyncio.run(rate(2)) - weak) < 0.08
