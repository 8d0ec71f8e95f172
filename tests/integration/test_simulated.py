"""The real code grader (which runs code in the sandbox) agrees with simulated workers' right and
wrong code answers (the simulated workers themselves: tests/unit/test_simulated.py)."""

from __future__ import annotations

import pytest

from conductor_core.simulation.problem_bank import ProblemBank
from conductor_core.simulation.provider import SimulatedProvider
from conductor_core.tasks.problem import Domain
from tests.support.simulated import ask, make_worker, worker_message


@pytest.mark.slow
def test_real_code_grader_agrees_with_simulated_code_answers():
    code_grader = pytest.importorskip("conductor_core.tasks.grading.code")
    bank = ProblemBank.bundled()
    for skill, expected in ((1.0, True), (0.0, False)):
        provider = SimulatedProvider(make_worker(skills={"code": skill}), bank)
        for problem in bank:
            if problem.domain != Domain.CODE:
                continue
            text = ask(provider, worker_message(problem.question))
            verdict = code_grader.grade_code(problem, text)
            assert verdict.correct is expected, (problem.id, verdict.reason)
