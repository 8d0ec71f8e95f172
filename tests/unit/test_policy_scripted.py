"""The scripted (deterministic heuristic) plan source."""

from __future__ import annotations

import asyncio

import pytest

from conductor_core.errors import ConfigError
from conductor_core.policy.base import PlanRequest, PlanSource, PreviousRound, WorkerInfo
from conductor_core.policy.scripted import LABEL, ScriptedPlanSource, guess_domain
from conductor_core.workflow.model import ALL, AccessMode
from conductor_core.workflow.parser import parse_plan

QUESTIONS = {
    "math": "Compute 17 * 23 + 4.",
    "mcq": "Which planet is largest?\nA) Mars\nB) Jupiter\nC) Venus\nD) Earth",
    "code": "Implement a function that reverses a linked list.",
    "freeform": "Describe the water cycle for a child.",
}


def _workers(n: int, descriptions: tuple[str, ...] = ()) -> tuple[WorkerInfo, ...]:
    return tuple(
        WorkerInfo(id=i, description=descriptions[i] if i < len(descriptions) else "")
        for i in range(n)
    )


def _plan(source: ScriptedPlanSource, request: PlanRequest):
    return asyncio.run(source.plan(request))


@pytest.mark.parametrize(
    ("question", "domain"),
    [
        ("What is 2^10 - 3?", "math"),
        ("Solve for x: 3x + 5 = 20", "math"),
        ("Compute the number of primes below fifty.", "math"),
        ("Which is a mammal? (A) Shark (B) Dolphin (C) Trout (D) Eel", "mcq"),
        ("Capital of France?\nA. Paris\nB. Rome\nC. Madrid", "mcq"),
        ("def add(a, b):\n    '''Add two numbers.'''", "code"),
        ("Write a function that returns the median of a list.", "code"),
        ("Tell me about the history of Rome.", "freeform"),
    ],
)
def test_guess_domain_from_surface_cues(question: str, domain: str) -> None:
    assert guess_domain(question) == domain


@pytest.mark.parametrize("domain", sorted(QUESTIONS))
def test_each_domain_yields_a_valid_two_step_plan(domain: str) -> None:
    source = ScriptedPlanSource()
    assert isinstance(source, PlanSource)
    result = _plan(source, PlanRequest(question=QUESTIONS[domain], workers=_workers(3)))
    assert result.ok, result.error
    assert result.raw.splitlines()[0] == LABEL
    assert result.extra["domain"] == domain
    steps = result.workflow.steps
    assert len(steps) == 2
    assert steps[0].access == ()
    assert steps[1].access == ALL
    assert steps[0].worker != steps[1].worker
    # The raw text is real Conductor output: the real parser reads the same workflow back.
    assert parse_plan(result.raw, workers=3) == result.workflow


def test_routes_by_configured_mapping() -> None:
    source = ScriptedPlanSource({"math": 2, "code": 1})
    math = _plan(source, PlanRequest(question=QUESTIONS["math"], workers=_workers(3)))
    code = _plan(source, PlanRequest(question=QUESTIONS["code"], workers=_workers(3)))
    assert math.workflow.worker_ids() == [2, 0]
    assert code.workflow.worker_ids() == [1, 2]


def test_routes_by_description_keywords_by_default() -> None:
    workers = _workers(3, ("fast general assistant", "strong at coding", "math olympiad expert"))
    source = ScriptedPlanSource()
    math = _plan(source, PlanRequest(question=QUESTIONS["math"], workers=workers))
    code = _plan(source, PlanRequest(question=QUESTIONS["code"], workers=workers))
    mcq = _plan(source, PlanRequest(question=QUESTIONS["mcq"], workers=workers))
    assert math.workflow.steps[0].worker == 2
    assert code.workflow.steps[0].worker == 1
    assert mcq.workflow.steps[0].worker == 0  # no keyword matches: the first worker


def test_route_to_a_worker_not_offered_falls_back() -> None:
    source = ScriptedPlanSource({"math": 7})
    result = _plan(source, PlanRequest(question=QUESTIONS["math"], workers=_workers(2)))
    assert result.ok
    assert result.workflow.worker_ids() == [0, 1]
    assert result.extra["route_fallback"] is True


def test_single_worker_or_one_step_cap_gives_one_step() -> None:
    source = ScriptedPlanSource()
    alone = _plan(source, PlanRequest(question=QUESTIONS["math"], workers=_workers(1)))
    capped = _plan(
        source, PlanRequest(question=QUESTIONS["math"], workers=_workers(3), max_steps=1)
    )
    no_verify = _plan(
        ScriptedPlanSource(verify=False), PlanRequest(question="hi", workers=_workers(3))
    )
    for result in (alone, capped, no_verify):
        assert result.ok, result.error
        assert len(result.workflow) == 1


def test_recursion_round_keeps_the_answer() -> None:
    request = PlanRequest(
        question=QUESTIONS["math"],
        workers=_workers(3),
        previous=PreviousRound(plan="model_id = [0]", answer="\\boxed{395}"),
    )
    result = _plan(ScriptedPlanSource(), request)
    assert result.ok, result.error
    assert result.workflow.is_keep
    assert "model_id = []" in result.raw


def test_index_access_mode_parses() -> None:
    request = PlanRequest(
        question=QUESTIONS["code"], workers=_workers(2), access_mode=AccessMode.INDEX
    )
    result = _plan(ScriptedPlanSource(), request)
    assert result.ok, result.error
    assert result.workflow.access_mode == AccessMode.INDEX
    assert result.workflow.dependencies() == [(), (0,)]


def test_deterministic() -> None:
    request = PlanRequest(question=QUESTIONS["mcq"], workers=_workers(4), sample_index=3)
    first = _plan(ScriptedPlanSource(), request)
    second = _plan(ScriptedPlanSource(), request)
    assert first.raw == second.raw


def test_bad_routes_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="unknown domain 'poetry'"):
        ScriptedPlanSource({"poetry": 0})
    with pytest.raises(ConfigError, match=r"routes\['math'\]"):
        ScriptedPlanSource({"math": -1})


def test_no_workers_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="offers no workers"):
        _plan(ScriptedPlanSource(), PlanRequest(question="hi", workers=()))
