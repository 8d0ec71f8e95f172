"""The synchronous Python API: solve a question, evaluate, train.

::

    from conductor_core import Conductor

    with Conductor() as conductor:              # scripted plans on the bundled simulated pool
        result = conductor.solve("Calculate: (56 + 26) * 25 = ?")
    print(result.answer, result.calls, result.cost)
    for step in result.plan:
        print(step.worker_name, step.subtask)

    from conductor_core.api import evaluate, train

    report = evaluate("demo", baselines=["single", "moa"], repeats=2, output_dir="runs/eval")
    print(report.summary.get("conductor:scripted").accuracy)
    stage = train("base", profile="tiny", steps=2, output_dir="runs/train-api")

These calls are what the ``conductor`` command runs: :class:`Conductor` is ``conductor solve``'s
loop (:func:`conductor_core.solve.solve` on a :class:`~conductor_core.workers.pool.WorkerPool`),
:func:`evaluate` is ``conductor eval run``
(:func:`~conductor_core.evaluate.shard_job.run_shard` on an
:class:`~conductor_core.evaluate.config.EvalConfig`), :func:`train` is ``conductor train``
(:func:`~conductor_core.train.grpo.run_stage` on a stage config). Their arguments are the
command's options, spelt as keywords.

They block until done, in a plain script and in a notebook alike: a notebook's cell already runs
inside an event loop, where ``asyncio.run`` is refused, so the asynchronous work runs on an event
loop of its own in a helper thread (:class:`Conductor`) or the call moves to a thread
(:func:`evaluate`, :func:`train`). From async code, ``await conductor.asolve(...)``.

Importing this module loads none of the heavy dependencies: a plan source, the pool and the
evaluation or training code are imported when first used.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    from conductor_core.evaluate.config import EvalConfig
    from conductor_core.evaluate.shard_job import ShardResult
    from conductor_core.policy.base import PlanSource
    from conductor_core.solve import SolveOptions
    from conductor_core.train.config import StageConfig
    from conductor_core.train.grpo import StageResult
    from conductor_core.workers.config import PoolConfig
    from conductor_core.workflow.trace import SolveTrace

__all__ = [
    "Conductor",
    "Grade",
    "PlanStep",
    "SolveResult",
    "eval_config",
    "evaluate",
    "grade_known",
    "load_pool_config",
    "train",
    "train_config",
]

T = TypeVar("T")


# -- results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PlanStep:
    """One step of the plan that gave the answer, as it ran."""

    index: int
    worker: int
    """The worker's pool id (its position in the pool YAML)."""
    worker_name: str
    subtask: str
    reads: tuple[int, ...]
    """The earlier steps whose output this step saw."""
    response: str | None
    error: str | None = None
    cost: float = 0.0
    latency_s: float = 0.0


@dataclass(frozen=True)
class Grade:
    """An answer graded against the reference of a question the pool's simulated workers know."""

    reference_id: str
    """The id of the known problem the question is."""
    correct: bool
    reason: str
    """The grader's one line."""


@dataclass(frozen=True)
class SolveResult:
    """A solved question: the answer, the plan that gave it, and what it cost.

    ``error`` says why there is no answer (``None`` when there is one): ``format_error: CODE:
    message`` (the Conductor's plan did not parse), ``infra_error: ...`` (a worker failed) or
    ``plan_failure: KIND`` (the plan ran out of a budget or made a request a worker refused).
    ``grade`` is the answer graded against the reference, when the question is one the pool's
    simulated workers know (the bundled demo problems, for the bundled pool); else ``None``
    (``correct`` says the same in one word).
    ``trace`` is the full record that ``conductor solve --json`` prints.
    """

    question: str
    answer: str | None
    plan: tuple[PlanStep, ...]
    calls: int
    cost: float
    input_tokens: int
    output_tokens: int
    rounds: int
    wall_s: float
    error: str | None
    grade: Grade | None
    trace: SolveTrace = field(repr=False)

    @property
    def correct(self) -> bool | None:
        """Whether the answer is right, where the question's reference is known (see ``grade``)."""
        return None if self.grade is None else self.grade.correct

    @property
    def ok(self) -> bool:
        """There is an answer."""
        return self.answer is not None and self.error is None

    @property
    def tokens(self) -> int:
        """Worker tokens, in and out."""
        return self.input_tokens + self.output_tokens

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: every field, the trace as ``conductor solve --json`` prints it."""
        out = asdict(self)  # dataclass fields; the trace (a pydantic model) is copied as is
        out["correct"] = self.correct
        out["trace"] = self.trace.model_dump(mode="json")
        return out

    @classmethod
    def from_trace(
        cls,
        trace: SolveTrace,
        worker_names: list[str],
        grade: Grade | None = None,
    ) -> SolveResult:
        """The result of ``trace`` (``worker_names``: the pool's, by pool id)."""
        workflow = _answering_workflow(trace)
        steps = tuple(
            PlanStep(
                index=s.index,
                worker=s.worker,
                worker_name=worker_names[s.worker] if s.worker < len(worker_names) else "",
                subtask=s.subtask,
                reads=tuple(s.visible),
                response=s.response,
                error=s.error,
                cost=s.cost,
                latency_s=s.latency_s,
            )
            for s in (workflow.steps if workflow is not None else [])
        )
        return cls(
            question=trace.question,
            answer=trace.answer,
            plan=steps,
            calls=trace.calls,
            cost=trace.cost,
            input_tokens=trace.input_tokens,
            output_tokens=trace.output_tokens,
            rounds=len(trace.rounds),
            wall_s=trace.wall_s,
            error=_error(trace),
            grade=grade,
            trace=trace,
        )


def _answering_workflow(trace: SolveTrace):
    """The executed plan whose answer stands (the last round that ran cleanly), else the last
    plan that ran at all (to show where it failed), else None."""
    ran = [r.workflow for r in trace.rounds if r.workflow is not None]
    for wf in reversed(ran):
        if not wf.infra_error and wf.plan_failure is None and wf.answer == trace.answer:
            return wf
    return ran[-1] if ran else None


def _error(trace: SolveTrace) -> str | None:
    if trace.format_error:
        first = trace.rounds[0] if trace.rounds else None
        err = (first.plan_error if first is not None else None) or {}
        detail = ": ".join(v for v in (err.get("code"), err.get("message")) if v)
        return "format_error" + (f": {detail}" if detail else ": the first plan kept no answer")
    if trace.infra_error:
        wf = trace.rounds[0].workflow if trace.rounds else None
        failed = [s for s in (wf.steps if wf is not None else []) if s.error]
        if failed:
            return f"infra_error: step {failed[0].index}: {failed[0].error}"
        return "infra_error"
    if trace.plan_failure is not None:
        return f"plan_failure: {trace.plan_failure}"
    if trace.answer is None:
        return "no answer"
    return None


# -- shared by the CLI and the API ---------------------------------------------------------------


def load_pool_config(
    pool: str | Path | None = None, problems: str | Path | None = None
) -> PoolConfig:
    """The pool config of ``pool`` (a pool YAML; ``None``: the bundled simulated pool, no keys
    needed); ``problems`` (a Problem JSONL/Parquet file) replaces the problems its simulated
    workers know. ``conductor solve --pool ... --problems ...``."""
    # lazy: api's top imports only the standard library (a light facade; test_api checks)
    from conductor_core.workers.bundled import bundled_pool_path
    from conductor_core.workers.config import load_pool

    config = load_pool(pool or bundled_pool_path())
    if problems is not None:
        config = config.with_simulation_problems([Path(problems)], replace=True)
    return config


def grade_known(config: PoolConfig, question: str, answer: str | None) -> Grade | None:
    """``answer`` graded against the reference of ``question`` when a simulated worker of the
    pool knows it (``None`` otherwise, or without an answer)."""
    if answer is None:
        return None
    # lazy: api's top imports only the standard library (a light facade; test_api checks)
    from conductor_core.simulation.problem_bank import known_problem

    known = known_problem(config, question)
    if known is None:
        return None
    # lazy: api's top imports only the standard library (a light facade; test_api checks)
    from conductor_core.tasks.grading import grade

    verdict = grade(known, answer)
    return Grade(reference_id=known.id, correct=verdict.correct, reason=verdict.reason)


def eval_config(
    benchmark: str | None = None,
    *,
    config: str | Path | None = None,
    **fields: Any,
) -> EvalConfig:
    """An evaluation config: the YAML file ``config`` (if given) with ``fields`` over it, or
    ``fields`` alone (``benchmark`` is then required). ``fields`` are those of
    :class:`~conductor_core.evaluate.config.EvalConfig` (``docs/evaluation.md``); ``None`` values
    are left out, so the file's or the default value stands."""
    # lazy: api's top imports only the standard library (a light facade; test_api checks)
    from conductor_core.errors import ConfigError
    from conductor_core.evaluate.config import load_eval_config, parse_eval_config

    overrides = {k: _plain(v) for k, v in fields.items() if v is not None}
    if benchmark is not None:
        overrides["benchmark"] = str(benchmark)
    if config is not None:
        return load_eval_config(config, overrides)
    if "benchmark" not in overrides:
        raise ConfigError("evaluate: give a benchmark (or a config file that names one)")
    return parse_eval_config(overrides, origin="evaluate")


def _plain(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return list(value)
    return value


def train_config(
    stage: str | None = None,
    *,
    config: str | Path | None = None,
    profile: str | None = None,
    steps: int | None = None,
    output_dir: str | Path | None = None,
    init_from: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> StageConfig:
    """A training stage's config: the YAML ``config`` (default: the bundled config of ``stage``,
    ``base`` when neither is given) under ``profile``, with ``steps``, ``output_dir``,
    ``init_from`` and ``overrides`` (dotted keys, as ``conductor train --set``) over it."""
    # lazy: api's top imports only the standard library (a light facade; test_api checks)
    from conductor_core.train import bundled_config_path
    from conductor_core.train.config import load_config

    merged = dict(overrides or {})
    for key, value in (("output_dir", output_dir), ("steps", steps), ("init_from", init_from)):
        if value is not None:
            merged[key] = str(value) if isinstance(value, Path) else value
    path = config or bundled_config_path(stage or "base")
    return load_config(path, stage=stage, profile=profile, overrides=merged)


# -- evaluate and train --------------------------------------------------------------------------


def evaluate(
    benchmark: str | None = None,
    *,
    conductor: str | None = None,
    pool: str | Path | None = None,
    baselines: str | Iterable[str] | None = None,
    repeats: int | None = None,
    output_dir: str | Path | None = None,
    config: str | Path | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
    **fields: Any,
) -> ShardResult:
    """Evaluate a Conductor and baselines on a benchmark: ``conductor eval run``.

    ``benchmark``: ``demo`` (the bundled questions; the default unless ``config`` names one), a
    benchmark name or a Problem file;
    ``conductor``: its plan source (``scripted`` by default, ``tiny``, a model folder, a URL,
    ``models:/NAME@ALIAS``); ``baselines``: e.g. ``["single", "moa"]`` or ``"single,moa"``;
    ``fields``: any other field of :class:`~conductor_core.evaluate.config.EvalConfig`
    (``limit``, ``rounds``, ``shard="0/4"``, ``evaluate_conductor=False``, ...). ``config``: an
    evaluation YAML the arguments override.

    Returns the shard's :class:`~conductor_core.evaluate.shard_job.ShardResult`: ``summary``
    holds the figures (``summary.get(method)``: accuracy, stderr, calls, cost per question),
    ``report`` the files written under ``output_dir`` (records, report.md/html, plots). Records
    are the checkpoint: the same call again adds nothing.
    """
    if benchmark is None and config is None:
        benchmark = "demo"
    cfg = eval_config(
        benchmark,
        config=config,
        conductor=conductor,
        pool=pool,
        baselines=baselines,
        repeats=repeats,
        output_dir=output_dir,
        **fields,
    )
    # lazy: api's top imports only the standard library (a light facade; test_api checks)
    from conductor_core.evaluate.shard_job import run_shard

    return _blocking(lambda: run_shard(cfg, progress=progress, log=log))


def train(
    stage: str | None = "base",
    *,
    profile: str | None = None,
    config: str | Path | None = None,
    steps: int | None = None,
    output_dir: str | Path | None = None,
    init_from: str | Path | None = None,
    overrides: Mapping[str, Any] | None = None,
    progress: bool = False,
    log: Callable[[str], None] | None = None,
) -> StageResult:
    """Run one GRPO training stage: ``conductor train`` (needs the ``train`` extra).

    ``stage``: ``base``, ``adaptive`` or ``recursive``; ``profile``: ``tiny`` (a random tiny
    model, minutes on a CPU), ``small`` or ``paper`` (``docs/training.md``); ``overrides``: any
    config field by its dotted name, e.g. ``{"reward.executions_per_plan": 2}``. Resumes from the
    last checkpoint under ``output_dir``. Returns the stage's
    :class:`~conductor_core.train.grpo.StageResult` (``model_dir``: the trained Conductor, to give
    ``Conductor(model=...)``; ``history``: the figures of each step).
    """
    cfg = train_config(
        stage,
        config=config,
        profile=profile,
        steps=steps,
        output_dir=output_dir,
        init_from=init_from,
        overrides=overrides,
    )
    # lazy: api's top imports only the standard library (a light facade; test_api checks)
    from conductor_core.train.grpo import run_stage

    return _blocking(lambda: run_stage(cfg, progress=progress, log=log))


def _blocking(fn: Callable[[], T]) -> T:
    """``fn()``, which runs its own event loop: here, or in a thread of its own when this thread
    already runs one (a notebook's cell), where ``asyncio.run`` is refused."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return fn()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="conductor-api") as pool:
        return pool.submit(fn).result()


# -- the Conductor -------------------------------------------------------------------------------


class _LoopThread:
    """An event loop running in a daemon thread of its own, started on first use: where the
    synchronous calls of :class:`Conductor` run their coroutines (one loop for the object's
    lifetime, so clients a plan source opened stay on the loop they were made on)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def run(self, coro: Any) -> Any:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name="conductor-api-loop", daemon=True
                )
                thread.start()
                self._loop, self._thread = loop, thread
            loop = self._loop
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # e.g. Ctrl-C while waiting: stop the work too
            raise

    @property
    def started(self) -> bool:
        return self._loop is not None

    def close(self) -> None:
        with self._lock:
            loop, thread = self._loop, self._thread
            self._loop = self._thread = None
        if loop is None or thread is None:
            return
        # wound down on its own thread: this one may run a loop of its own (a notebook's)
        asyncio.run_coroutine_threadsafe(loop.shutdown_asyncgens(), loop).result()
        asyncio.run_coroutine_threadsafe(loop.shutdown_default_executor(), loop).result()
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


class Conductor:
    """A Conductor on a worker pool: ``Conductor(model=..., pool=...).solve("question")``.

    ``model`` is the plan source, as ``conductor solve --conductor`` takes it: ``"scripted"``
    (a deterministic heuristic, labelled as such: not a learned model), ``"tiny"`` (an untrained
    tiny local model), ``"smollm2-135m-instruct"``, a model folder written by training,
    ``models:/NAME@ALIAS``, an OpenAI-compatible URL serving a Conductor (``model_name``,
    ``api_key_env``); or a :class:`~conductor_core.policy.base.PlanSource` object (e.g. a
    :class:`~conductor_core.policy.fixed.FixedPlanSource`). ``pool`` is a pool YAML (``None``:
    the bundled simulated pool, which knows the bundled demo questions). The other arguments are
    ``conductor solve``'s options.

    Nothing is loaded until the first :meth:`solve`. Close it (``with Conductor() as c:`` or
    :meth:`close`) to release the plan source and the helper thread.
    """

    def __init__(
        self,
        model: str | PlanSource = "scripted",
        pool: str | Path | None = None,
        *,
        model_name: str | None = None,
        api_key_env: str | None = None,
        plan_grammar: bool = True,
        temperature: float | None = None,
        plan_tokens: int | None = None,
        problems: str | Path | None = None,
        rounds: int = 1,
        max_steps: int = 5,
        access_mode: str = "binary",
        descriptors: bool = False,
        prompt_style: str = "full",
        max_tokens: int | None = None,
        max_cost: float | None = None,
        deadline: float | None = None,
    ) -> None:
        # lazy: api's top imports only the standard library (a light facade; test_api checks)
        from conductor_core.solve import solve_options

        self.model = model
        self.pool = pool
        self.model_name = model_name
        self.api_key_env = api_key_env
        self.plan_grammar = plan_grammar
        self.temperature = temperature
        self.plan_tokens = plan_tokens
        self.problems = problems
        self.pool_config: PoolConfig = load_pool_config(pool, problems)
        self.options: SolveOptions = solve_options(
            self.pool_config,
            max_steps=max_steps,
            access_mode=access_mode,
            descriptors=descriptors,
            prompt_style=prompt_style,
            rounds=rounds,
            max_tokens=max_tokens,
            max_cost=max_cost,
            deadline=deadline,
        )
        self._source: PlanSource | None = None if isinstance(model, str) else model
        self._loop = _LoopThread()

    def __repr__(self) -> str:
        model = self.model if isinstance(self.model, str) else type(self.model).__name__
        return f"Conductor(model={model!r}, pool={str(self.pool or 'bundled')!r})"

    @property
    def workers(self) -> list[str]:
        """The pool's worker names, by pool id."""
        return [w.display_name for w in self.pool_config.workers]

    @property
    def plan_source(self) -> PlanSource:
        """The plan source (made on first use; a model is loaded when it first plans)."""
        if self._source is None:
            # lazy: api's top imports only the standard library (a light facade; test_api checks)
            from conductor_core.policy.factory import load_plan_source

            assert isinstance(self.model, str)
            self._source = load_plan_source(
                self.model,
                model=self.model_name,
                api_key_env=self.api_key_env,
                plan_grammar=self.plan_grammar,
                temperature=self.temperature,
                plan_tokens=self.plan_tokens,
            )
        return self._source

    def solve(
        self,
        question: str,
        *,
        seed: int = 0,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> SolveResult:
        """Plan, run and answer ``question``; blocks until done. ``seed`` is the sample index
        (another seed, another sample of the Conductor and the workers); ``on_event`` gets each
        event of the plan and its steps as ``conductor solve`` shows them live (called from the
        helper thread)."""
        return self._loop.run(self.asolve(question, seed=seed, on_event=on_event))

    async def asolve(
        self,
        question: str,
        *,
        seed: int = 0,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> SolveResult:
        """:meth:`solve` for async code (use one or the other on one object: a plan source that
        opened a client keeps it on the loop it was made on)."""
        # lazy: api's top imports only the standard library (a light facade; test_api checks)
        from conductor_core.solve import solve
        from conductor_core.workers.pool import WorkerPool

        source = self.plan_source
        async with WorkerPool(self.pool_config) as pool:
            trace = await solve(
                question,
                source,
                pool,
                options=self.options,
                sample_index=seed,
                on_event=on_event,
            )
        graded = grade_known(self.pool_config, question, trace.answer)
        return SolveResult.from_trace(trace, self.workers, graded)

    def evaluate(self, benchmark: str | None = None, **kwargs: Any) -> ShardResult:
        """:func:`evaluate` with this Conductor's model and pool (``model`` given by name)."""
        if not isinstance(self.model, str):
            raise TypeError(
                "Conductor.evaluate needs the model by name (scripted, tiny, a folder, a URL); "
                "evaluate a PlanSource object with conductor_core.evaluate.runner.run_eval"
            )
        fields = {
            "conductor": self.model,
            "conductor_model": self.model_name,
            "conductor_key_env": self.api_key_env,
            "plan_grammar": self.plan_grammar,
            "conductor_temperature": self.temperature,
            "conductor_max_tokens": self.plan_tokens,
            "pool": self.pool,
            "problems": self.problems,
            "rounds": self.options.max_rounds,
            "max_steps": self.options.max_steps,
            "access_mode": self.options.access_mode.value,
            "descriptors": self.options.descriptors,
            "prompt_style": self.options.prompt_style.value,
        }
        return evaluate(benchmark, **{**fields, **kwargs})

    async def aclose(self) -> None:
        """Release the plan source (a model is dropped, a client closed)."""
        if self._source is not None:
            await self._source.aclose()

    def close(self) -> None:
        """Release the plan source and stop the helper thread."""
        if self._loop.started:
            self._loop.run(self.aclose())
        elif self._source is not None:
            _blocking(lambda: asyncio.run(self.aclose()))
        self._loop.close()

    def __enter__(self) -> Conductor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> Conductor:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
        self._loop.close()  # in case solve() was called too
