"""The workflow world: its rules (subtasks read, checking, parts), its questions, its grading,
its simulated workers through the solve loop, and the plan-shape measures of its bench."""

from __future__ import annotations

import asyncio
from collections import Counter
from random import Random

import pytest

from conductor_core.simulation.workflow_baselines import (
    TOPOLOGIES,
    part_domains,
    topology,
    topology_workflow,
)
from conductor_core.simulation.workflow_eval import plan_shape, run_questions, summarize
from conductor_core.simulation.workflow_problems import workflow_problems
from conductor_core.simulation.workflow_world import (
    NONE_ANSWER,
    Part,
    WorldQuestion,
    part_answers,
    respond,
    step_role,
    world_question,
)
from conductor_core.solve import solve_options
from conductor_core.tasks.grading import grade
from conductor_core.workers.config import (
    PoolConfig,
    SimulationProfile,
    WorkerConfig,
    WorkflowRules,
)
from conductor_core.workers.pool import WorkerPool
from conductor_core.workflow.model import ALL, Step, Workflow

MATH = Part("math", "Calculate: 2 + 3 = ?", "5")
MCQ = Part("mcq", "Which of these numbers is the largest? P) 1 Q) 9 R) 4", "Q", options=3)
WORD = Part("freeform", "Write the word 'cat' backwards, letter by letter.", "tac")
TWO = WorldQuestion(difficulty=1, parts=(MATH, WORD))
ONE = WorldQuestion(difficulty=1, parts=(MCQ,))


def _profile(skill: float = 1.0) -> SimulationProfile:
    return SimulationProfile(skills={"math": skill, "mcq": skill, "freeform": skill})


def test_a_step_reads_its_part_and_whether_it_checks_from_its_subtask() -> None:
    assert step_role("Solve part 2.", TWO).part == 1
    assert step_role("Solve part 3.", TWO).part is None  # no such part: the whole question
    assert step_role("Solve part 1.", ONE).part is None  # one part: always the whole
    assert step_role("Verify part 1 carefully", TWO).checks
    assert not step_role("Answer the question.", TWO).checks


def test_a_solver_answers_at_its_skill_falling_with_difficulty() -> None:
    rules = WorkflowRules(difficulty_drop=0.3)
    hard = WorldQuestion(difficulty=3, parts=(MCQ,))
    easy_right = [respond(ONE, _profile(0.9), rules, "Answer.", [], Random(i)) for i in range(400)]
    hard_right = [respond(hard, _profile(0.9), rules, "Answer.", [], Random(i)) for i in range(400)]
    rate = [sum(t == "The answer is Q." for t in texts) / 400 for texts in (easy_right, hard_right)]
    assert rate[0] == pytest.approx(0.9, abs=0.05)
    assert rate[1] == pytest.approx(0.3, abs=0.06)


def test_a_part_step_answers_only_its_part_and_a_reader_puts_parts_together() -> None:
    rules = WorkflowRules()
    part2 = respond(TWO, _profile(), rules, "Solve part 2.", [], Random(0))
    assert part2 == "Part 2: tac"
    assert grade(_problem(TWO), part2).correct is False  # a part is not the answer
    whole = respond(TWO, _profile(0.0), rules, "Answer.", ["Part 1: 5", part2], Random(0))
    assert whole.endswith("The answer is 5, tac.")  # read from the parts, not re-solved
    assert grade(_problem(TWO), whole).correct


def test_an_aggregator_takes_the_most_common_answer_ties_to_the_latest() -> None:
    rules = WorkflowRules()
    seen = ["The answer is P.", "The answer is Q.", "The answer is P."]
    assert respond(ONE, _profile(0.0), rules, "Answer.", seen, Random(0)) == "The answer is P."
    tie = ["The answer is P.", "The answer is R."]
    assert respond(ONE, _profile(0.0), rules, "Answer.", tie, Random(0)) == "The answer is R."


def test_a_checker_needs_to_see_an_answer_finds_wrong_ones_and_may_overturn_right_ones() -> None:
    sure = WorkflowRules(check_skill=1.0, false_alarm=0.0)
    blind = respond(ONE, _profile(), sure, "Check the answer.", [], Random(0))
    assert blind == f"The answer is {NONE_ANSWER}."
    fixed = respond(ONE, _profile(1.0), sure, "Check it.", ["The answer is P."], Random(0))
    assert fixed == "The answer is Q."
    never = WorkflowRules(check_skill=0.0, false_alarm=0.0)
    kept = respond(ONE, _profile(1.0), never, "Check it.", ["The answer is P."], Random(0))
    assert kept == "The answer is P."
    alarm = WorkflowRules(check_skill=1.0, false_alarm=1.0)
    overturned = respond(ONE, _profile(1.0), alarm, "Check it.", ["The answer is Q."], Random(0))
    assert overturned != "The answer is Q."
    assert part_answers(overturned, ONE)[0] in "PR"


def test_generated_questions_look_as_hard_as_they_are_and_split_three_ways() -> None:
    problems = workflow_problems(600, seed=3)
    assert problems == workflow_problems(600, seed=3)
    assert len({p.question for p in problems}) == 600
    splits = Counter(p.metadata["split"] for p in problems)
    assert splits == {"train": 360, "validation": 120, "test": 120}
    for p in problems:
        q = world_question(p.metadata)
        assert q is not None and p.reference == q.reference()
        assert len({part.domain for part in q.parts}) == len(q.parts)
        for part in q.parts:
            if part.domain == "math":
                assert part.question.count(" ") - 3 == 2 * q.difficulty  # h + 1 terms
            if part.domain == "mcq":
                assert part.options == (3, 4, 6)[q.difficulty - 1]
                assert part.answer != "A"
    assert {len(world_question(p.metadata).parts) for p in problems} == {1, 2, 3}


def test_hand_written_topologies_read_the_parts_from_the_question() -> None:
    text = f"Answer every part. Part 1: {WORD.question} Part 2: {MATH.question}"
    assert part_domains(text) == ["freeform", "math"]
    assert part_domains(MCQ.question) == ["mcq"]
    parts = topology_workflow("parts", text)
    assert [s.worker for s in parts.steps] == [2, 0, 3]
    assert parts.steps[-1].access == ALL
    with pytest.raises(ValueError, match="unknown topology"):
        topology_workflow("nope", text)


def test_plan_shape_counts_checks_that_see_what_they_check_and_splits() -> None:
    three = WorldQuestion(difficulty=2, parts=(MATH, WORD, MCQ))
    wf = Workflow(
        steps=(
            Step(worker=0, subtask="Solve part 1."),
            Step(worker=3, subtask="Check part 1.", access=(0,)),
            Step(worker=3, subtask="Check part 2.", access=(0,)),  # sees part 1 only
            Step(worker=2, subtask="Solve part 2."),
            Step(worker=3, subtask="Answer the question.", access=ALL),
        )
    )
    shape = plan_shape(wf, three)
    assert (shape.steps, shape.checks, shape.checks_seeing) == (5, 2, 1)
    assert shape.split is False  # part 3 never named
    assert plan_shape(topology_workflow("parts", _problem(three).question), three).split


def _problem(q: WorldQuestion):
    from conductor_core.tasks.problem import Domain, Problem

    text = (
        q.parts[0].question
        if len(q.parts) == 1
        else "Answer every part. "
        + " ".join(f"Part {k + 1}: {p.question}" for k, p in enumerate(q.parts))
    )
    return Problem(
        id="q",
        source="test",
        domain=Domain.FREEFORM,
        question=text,
        reference=q.reference(),
        metadata={"world": q.to_metadata()},
    )


def test_simulated_workers_follow_the_world_rules_through_the_solve_loop(tmp_path) -> None:
    problems = workflow_problems(60, seed=1)
    path = tmp_path / "problems.jsonl"
    from conductor_core.tasks.problem import write_jsonl

    write_jsonl(problems, path)

    def worker(name: str, skills: dict[str, float], rules: WorkflowRules | None) -> WorkerConfig:
        sim = SimulationProfile(skills=skills, problems=[str(path)], workflow=rules, seed=1)
        return WorkerConfig(name=name, provider="simulated", model=name, simulation=sim)

    perfect = {"math": 0.0, "mcq": 0.0, "freeform": 0.0}
    rules = WorkflowRules(difficulty_drop=0.0)
    cfg = PoolConfig(
        workers=[
            worker("m", {**perfect, "math": 1.0}, rules),
            worker("c", {**perfect, "mcq": 1.0}, rules),
            worker("w", {**perfect, "freeform": 1.0}, rules),
            worker("x", perfect, rules),
        ]
    )

    async def run(name: str) -> dict:
        pool = WorkerPool(cfg)
        results = await run_questions(problems, topology(name), pool, solve_options(cfg))
        return summarize(results)

    parts = asyncio.run(run("parts"))
    single = asyncio.run(run("single:0"))
    assert parts["accuracy"] == 1.0  # every part to its specialist, then put together
    math_only = sum(world_question(p.metadata).parts[0].domain == "math" for p in problems)
    composite = [p for p in problems if len(world_question(p.metadata).parts) > 1]
    assert single["accuracy"] < math_only / len(problems) + 1e-9
    assert parts["composite_split_share"] == 1.0 and composite
    assert set(TOPOLOGIES) >= {"parts", "solve-check", "best-of-3", "moa"}


def test_plan_success_simulates_a_plan_with_the_world_rules() -> None:
    from conductor_core.simulation.workflow_eval import plan_success

    rules = WorkflowRules(difficulty_drop=0.0, check_skill=1.0, false_alarm=0.0)
    specialists = [
        SimulationProfile(skills={"math": 1.0, "freeform": 0.0}, workflow=rules),
        SimulationProfile(skills={"math": 0.0, "freeform": 1.0}, workflow=rules),
        SimulationProfile(skills={"math": 0.5, "freeform": 0.5}, workflow=rules),
    ]
    text = f"Answer every part. Part 1: {MATH.question} Part 2: {WORD.question}"
    split = Workflow(
        steps=(
            Step(worker=0, subtask="Solve part 1."),
            Step(worker=1, subtask="Solve part 2."),
            Step(worker=2, subtask="Answer the question.", access=ALL),
        )
    )
    assert plan_success(TWO, split, specialists, draws=50) == 1.0
    assert plan_success(TWO, Workflow(steps=split.steps[:2]), specialists, draws=50) == 0.0
    whole = Workflow(steps=(Step(worker=2, subtask="Answer the question."),))
    assert plan_success(TWO, whole, specialists, draws=2000) == pytest.approx(0.25, abs=0.04)
    checked = Workflow(steps=(*whole.steps, Step(worker=2, subtask="Check it.", access=(0,))))
    # the checker finds every wrong part and re-solves it at 0.5: 1 - 0.5 * 0.5 per part
    assert plan_success(TWO, checked, specialists, draws=2000) == pytest.approx(0.5625, abs=0.04)
    assert part_domains(text) == ["math", "freeform"]


def test_with_persistent_errors_a_worker_checking_itself_fixes_nothing() -> None:
    from conductor_core.simulation.workflow_eval import plan_success

    def profiles(persist: float) -> list[SimulationProfile]:
        rules = WorkflowRules(
            difficulty_drop=0.0, check_skill=1.0, false_alarm=0.0, error_persistence=persist
        )
        return [SimulationProfile(skills={"math": 0.5, "freeform": 0.5}, workflow=rules)] * 2

    whole = Step(worker=0, subtask="Answer the question.")
    self_check = Workflow(steps=(whole, Step(worker=0, subtask="Check it.", access=(0,))))
    cross_check = Workflow(steps=(whole, Step(worker=1, subtask="Check it.", access=(0,))))
    # fresh draws: the re-answer of a found wrong part is right half the time, whoever checks
    assert plan_success(TWO, self_check, profiles(0.0), draws=2000) == pytest.approx(
        0.5625, abs=0.04
    )
    # persistent: the worker writes its own wrong answer again; another worker's is its own
    assert plan_success(TWO, self_check, profiles(1.0), draws=2000) == pytest.approx(0.25, abs=0.04)
    assert plan_success(TWO, cross_check, profiles(1.0), draws=2000) == pytest.approx(
        0.5625, abs=0.04
    )
    # the own answer is one per run: the same key gives the same answer, another key may not
    rules = WorkflowRules(error_persistence=1.0)
    texts = {respond(TWO, _profile(0.5), rules, "Answer.", [], Random(i), "k") for i in range(20)}
    assert len(texts) == 1
    runs = {respond(TWO, _profile(0.5), rules, "Answer.", [], Random(0), i) for i in range(20)}
    assert len(runs) > 1


def test_simulated_workers_repeat_their_own_answers_within_a_run(tmp_path) -> None:
    from conductor_core.tasks.problem import write_jsonl

    problems = [
        p
        for p in workflow_problems(80, seed=2)
        if [q.domain for q in world_question(p.metadata).parts] == ["math"]
    ]
    path = tmp_path / "problems.jsonl"
    write_jsonl(problems, path)

    def run(persist: float, name: str) -> list[bool]:
        rules = WorkflowRules(error_persistence=persist)
        sim = SimulationProfile(skills={"math": 0.5}, problems=[str(path)], workflow=rules)
        cfg = PoolConfig(
            workers=[
                WorkerConfig(name=f"w{i}", provider="simulated", model=f"w{i}", simulation=sim)
                for i in range(4)
            ]
        )

        async def go() -> list[bool]:
            pool = WorkerPool(cfg)
            results = await run_questions(problems, topology(name), pool, solve_options(cfg))
            return [r.right for r in results]

        return asyncio.run(go())

    # best-of-3 asks the math specialist (worker 0) three times and reads the three: with
    # persistent errors the three are its one answer, so each question ends as worker 0 alone
    assert run(1.0, "best-of-3") == run(1.0, "single:0")
    assert run(0.0, "best-of-3") != run(0.0, "single:0")
