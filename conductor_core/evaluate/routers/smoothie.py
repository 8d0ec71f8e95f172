"""Smoothie (Guha et al., 2024, "Smoothie: Label Free Language Model Routing"), as a baseline.

Label-free routing: every worker answers the question; the answers are embedded with a sentence
encoder; a latent-variable (weak-supervision) model treats each worker's embedding as a noisy
vote ``lambda_i = y + eps_i`` around the unknown true answer's embedding ``y`` with independent
Gaussian errors of variance ``1/theta_i``. Then ``E||lambda_i - lambda_j||^2 = 1/theta_i +
1/theta_j``, and for any other pair ``j, k`` the triplet identity gives ``1/theta_i =
(d_ij + d_ik - d_jk) / 2``; averaging over all pairs estimates each worker's error, and the
question goes to the worker with the largest ``theta_i`` (the smallest estimated error). Its
answer is the method's answer.

Here the expectations are taken over the question's own answers (Smoothie-Local with a
neighbourhood of one: the question itself, no other test questions), with one sample per worker.
By default (``embed="answer"``) what is embedded is each output's final answer as the graders
extract it (math value, mcq letter, code block, free-form answer line): the reasoning text around
it varies in wording and would drown the agreement on the answer; ``embed="output"`` embeds the
whole generation, as the paper does. Cost: one call per worker (as the paper's Smoothie).

With ``reference`` (:func:`reference_from_records`: other questions' answers by every worker, e.g.
the ``single`` records of an unlabeled split; correctness is never read) the expectations also
average over the ``neighbours`` reference questions nearest to this one in question-embedding
space: the paper's Smoothie-Local neighbourhood, which pools evidence on how well each worker
agrees on similar questions.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Iterable, Sequence
from typing import Any

from conductor_core.evaluate.methods import (
    Attempt,
    BareQuestionCaller,
    failure_of_samples,
    single_worker,
)
from conductor_core.evaluate.records import EvalRecord
from conductor_core.evaluate.routers.encoder import SentenceEncoder, get_encoder
from conductor_core.evaluate.voting import vote_key
from conductor_core.solve import SolveOptions, solve
from conductor_core.tasks.problem import Domain, Problem
from conductor_core.workflow.executor import WorkerCaller
from conductor_core.workflow.trace import TraceSummary


def triplet_errors(embeddings: Any) -> Any:
    """Smoothie's triplet estimate of each voter's error ``1/theta_i`` from an ``(n_voters, dim)``
    array (``n_voters >= 3``), or ``(n_samples, n_voters, dim)`` to average over samples."""
    import numpy as np

    lam = np.asarray(embeddings, dtype=np.float64)
    if lam.ndim == 2:
        lam = lam[None]
    n = lam.shape[1]
    if n < 3:
        raise ValueError("the triplet estimate needs at least three voters")
    # d[i, j] = mean over samples of ||lambda_i - lambda_j||^2
    d = ((lam[:, :, None, :] - lam[:, None, :, :]) ** 2).sum(-1).mean(0)
    err = np.zeros(n)
    for i in range(n):
        others = [j for j in range(n) if j != i]
        vals = [(d[i, j] + d[i, k] - d[j, k]) / 2 for j, k in itertools.combinations(others, 2)]
        err[i] = max(float(np.mean(vals)), 0.0)
    return err


TIE_DECIMALS = 6
"""Decimals at which Smoothie compares error estimates and similarities: well above the
floating-point noise of an embedding (about 1e-7), well below real differences."""

_STATED = re.compile(r"(?i)^(?:the\s+)?final\s+answer\s+is[:\s]+(.*?)\.?$")


def answer_view(problem: Problem, output: str) -> str:
    """The part of ``output`` that Smoothie embeds in ``answer`` mode: the final answer as the
    voting key extracts it (math, mcq, code); for free-form answers the first line, without a
    leading "The final answer is"."""
    if problem.domain is Domain.FREEFORM:
        lines = [ln.strip() for ln in output.strip().splitlines() if ln.strip()]
        first = lines[0] if lines else ""
        m = _STATED.match(first)
        return (m.group(1) if m else first) or output
    return vote_key(problem, output) or output


def smoothie_choice(
    answers: Sequence[str], encoder: SentenceEncoder, neighbours: Any = None
) -> int:
    """The index of the answer Smoothie trusts most (the smallest triplet error estimate);
    ``neighbours`` adds ``(k, len(answers), dim)`` answer embeddings of similar questions."""
    import numpy as np

    if len(answers) < 3:
        return 0
    lam = encoder.encode(list(answers))[None]
    if neighbours is not None and len(neighbours):
        lam = np.concatenate([lam, neighbours], axis=0)
    # Equal answers tie exactly in exact arithmetic, but an embedding's last bits depend on the
    # batch it was encoded in (padding, thread count): compare at TIE_DECIMALS so that a tie goes
    # to the first worker in pool order, on every run and machine.
    return int(np.argmin(np.round(triplet_errors(lam), TIE_DECIMALS)))


class SmoothieReference:
    """Other questions' answers by every worker (label-free), for Smoothie-Local neighbourhoods:
    question embeddings ``(n, dim)`` and answer embeddings ``(n, workers, dim)``."""

    def __init__(self, questions: Any, answers: Any) -> None:
        self.questions = questions
        self.answers = answers

    def nearest(self, query: Any, k: int) -> Any:
        """The answer embeddings of the ``k`` reference questions nearest to ``query``."""
        import numpy as np

        sims = np.round(self.questions @ query, TIE_DECIMALS)
        idx = np.argsort(-sims, kind="stable")[:k]  # ties: the earlier reference question
        return self.answers[idx]


def reference_from_records(
    records: Iterable[EvalRecord],
    problems: Sequence[Problem],
    worker_methods: Sequence[str],
    encoder: SentenceEncoder,
    embed: str = "answer",
) -> SmoothieReference:
    """A :class:`SmoothieReference` from the answers in ``records`` of the methods
    ``worker_methods`` (one per pool worker, in pool order) on ``problems``; only the answers are
    read (never correctness), the lowest repeat's where a problem has several (records are
    written in completion order, so "the first one read" would change from run to run).
    Problems lacking an answer of some worker are left out."""
    import numpy as np

    index = {m: w for w, m in enumerate(worker_methods)}
    got: dict[str, dict[int, str]] = {}
    for r in sorted(records, key=lambda r: r.repeat):
        w = index.get(r.method)
        if w is not None and r.answer and not r.infra_error:
            got.setdefault(r.problem_id, {}).setdefault(w, r.answer)
    kept = [p for p in problems if len(got.get(p.id, {})) == len(worker_methods)]
    if not kept:
        raise ValueError("no problem has an answer of every worker in the records")
    q = encoder.encode([p.question for p in kept])
    texts = [
        got[p.id][w] if embed == "output" else answer_view(p, got[p.id][w])
        for p in kept
        for w in range(len(worker_methods))
    ]
    a = encoder.encode(texts).reshape(len(kept), len(worker_methods), -1)
    return SmoothieReference(np.asarray(q), np.asarray(a))


class SmoothieMethod:
    """Baseline: every worker answers the bare question; Smoothie picks one answer."""

    def __init__(
        self,
        workers: Sequence[int],
        encoder: str | None = None,
        name: str | None = None,
        options: SolveOptions | None = None,
        embed: str = "answer",
        reference: SmoothieReference | None = None,
        neighbours: int = 10,
    ) -> None:
        if embed not in ("answer", "output"):
            raise ValueError(f"embed: 'answer' or 'output', got {embed!r}")
        self.workers = list(workers)
        self.encoder = get_encoder(encoder)
        self.embed = embed
        self.reference = reference
        self.neighbours = neighbours
        self.name = name or f"smoothie[{self.encoder.name}]"
        self.options = options or SolveOptions(answer_fallback=True)
        self.sources = {w: single_worker(w) for w in self.workers}
        self.choices: dict[tuple[str, int], int] = {}
        """(problem id, sample index) -> the worker chosen (for inspection and tests)."""

    async def attempt(self, problem: Problem, pool: WorkerCaller, sample_index: int) -> Attempt:
        caller = BareQuestionCaller(pool, problem.question)
        traces = await asyncio.gather(
            *(
                solve(
                    problem.question,
                    self.sources[w],
                    caller,
                    options=self.options,
                    sample_index=sample_index,
                )
                for w in self.workers
            )
        )
        summaries = [TraceSummary.from_trace(t) for t in traces]
        valid = [
            (w, s.answer)
            for w, s in zip(self.workers, summaries, strict=True)
            if not s.infra_error and s.answer
        ]
        plan_failure, infra_error = (None, False) if valid else failure_of_samples(summaries)
        summary = TraceSummary(
            infra_error=infra_error,
            plan_failure=plan_failure,
            calls=sum(s.calls for s in summaries),
            input_tokens=sum(s.input_tokens for s in summaries),
            output_tokens=sum(s.output_tokens for s in summaries),
            cost=sum(s.cost for s in summaries),
            plan_len=len(self.workers),
            workers=[w for s in summaries for w in s.workers],
            rounds=1,
        )
        if valid:
            texts = [a if self.embed == "output" else answer_view(problem, a) for _, a in valid]
            near = None
            if self.reference is not None and len(valid) == len(self.workers):
                query = self.encoder.encode([problem.question])[0]
                near = self.reference.nearest(query, self.neighbours)
            pick = await asyncio.to_thread(smoothie_choice, texts, self.encoder, near)
            chosen, summary.answer = valid[pick]
            self.choices[(problem.id, sample_index)] = chosen
            summary.raw_plan = f"# smoothie: chose worker {chosen}"
        return Attempt(summary)

    async def aclose(self) -> None:
        return None
